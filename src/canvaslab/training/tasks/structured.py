"""Constrained JSON: an object with required keys, types and values, asked for in plain words.

Each record kind has a JSON Schema (draft 2020-12, the commit-order scorer's format) and the values
the instruction fixes. The held-out key is the record kind plus its values.
"""

from __future__ import annotations

import json
import random

from canvaslab.training.tasks.base import Example, phrase

FIRST_NAMES = ("Ada", "Alan", "Grace", "Linus", "Maria", "Noor", "Kenji", "Olga", "Pedro", "Ines", "Yuki", "Sam",
               "Leila", "Hugo", "Chen", "Amara", "Felix", "Rosa", "Tariq", "Elena")
CITIES = ("Paris", "Lima", "Oslo", "Cairo", "Tokyo", "Quito", "Rome", "Delhi", "Accra", "Seoul", "Perth", "Bern")
PRODUCTS = ("lamp", "chair", "kettle", "backpack", "guitar", "bicycle", "clock", "mug", "tent", "camera")
COLORS = ("red", "blue", "green", "black", "white", "yellow", "purple", "orange")
TYPE_NAMES = {str: "string", int: "integer", bool: "boolean"}


def _schema(values: dict) -> dict:
    properties = {key: {"type": TYPE_NAMES[type(value)]} for key, value in values.items()}
    return {"type": "object", "properties": properties, "required": list(values), "additionalProperties": False}


def _person(rng: random.Random) -> tuple[dict, list[str]]:
    values = {"name": rng.choice(FIRST_NAMES), "age": rng.randint(18, 90), "city": rng.choice(CITIES)}
    n, a, c = values["name"], values["age"], values["city"]
    cores = [
        f'Return a JSON object with keys name (string) = "{n}", age (integer) = {a} and city (string) = "{c}".',
        f"Give me JSON for a person: name {n}, age {a}, city {c}.",
        f"I need a JSON object with name, age and city. The name is {n}, the age is {a}, the city is {c}.",
        f"Make a JSON record for {n}, who is {a} years old and lives in {c}. Keys: name, age, city.",
        f"json please: name={n}, age={a}, city={c}",
    ]
    return values, cores


def _product(rng: random.Random) -> tuple[dict, list[str]]:
    values = {"product": rng.choice(PRODUCTS), "price": rng.randint(1, 999), "in_stock": rng.random() < 0.5}
    p, price, stock = values["product"], values["price"], values["in_stock"]
    stock_words = "in stock" if stock else "out of stock"
    cores = [
        f'Return a JSON object with keys product (string) = "{p}", price (integer) = {price} and '
        f"in_stock (boolean) = {str(stock).lower()}.",
        f"Write JSON for a {p} that costs {price} and is {stock_words}. Keys: product, price, in_stock.",
        f"I need a product as JSON: product {p}, price {price}, in_stock {str(stock).lower()}.",
        f"Create a JSON object describing a {p}: price {price} (integer), in_stock as a boolean ({stock_words}).",
        f"json: product={p} price={price} in_stock={str(stock).lower()}",
    ]
    return values, cores


def _pet(rng: random.Random) -> tuple[dict, list[str]]:
    values = {"species": rng.choice(("cat", "dog", "parrot", "rabbit", "turtle")), "color": rng.choice(COLORS),
              "legs": 0, "vaccinated": rng.random() < 0.5}
    values["legs"] = {"parrot": 2}.get(values["species"], 4)
    s, col, legs, vac = values["species"], values["color"], values["legs"], str(values["vaccinated"]).lower()
    cores = [
        f'Return a JSON object with keys species (string) = "{s}", color (string) = "{col}", legs (integer) = {legs} '
        f"and vaccinated (boolean) = {vac}.",
        f"Describe my {col} {s} as JSON with keys species, color, legs ({legs}) and vaccinated ({vac}).",
        f"JSON for a pet: species {s}, color {col}, legs {legs}, vaccinated {vac}.",
        f"I have a {col} {s} with {legs} legs, vaccinated: {vac}. Give it to me as a JSON object "
        "(species, color, legs, vaccinated).",
    ]
    return values, cores


RECORDS = {"person": _person, "product": _product, "pet": _pet}


def json_object(rng: random.Random) -> Example:
    kind = rng.choice(tuple(RECORDS))
    values, cores = RECORDS[kind](rng)
    prompt, _ = phrase(rng, rng.choice(cores), lowercase=False)
    answer = json.dumps(values)
    key = f"json:{kind}:{answer}"
    reference = {"schema": _schema(values), "required_values": values}
    return Example("json", "json", key, prompt, answer, reference)
