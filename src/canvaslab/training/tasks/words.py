"""Word lists of the grammar data (``grammar``): the open classes its parts draw from.

Large on purpose: a model that sees a JSON key, a name or an item in only a few sentences learns the
sentences; one that sees hundreds of interchangeable ones learns the slot. What the held-out templates
(``heldout_templates``) use is taken out here, once, so no held-out key name, person, item or value reaches
training through these lists (``tests/training/test_grammar.py`` checks it).
"""

from __future__ import annotations

import random

from canvaslab.training.tasks import heldout_templates


def _words(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(text.split()))


def _without(words: tuple[str, ...], *taken: object) -> tuple[str, ...]:
    drop = {str(w).lower() for group in taken for w in group}
    return tuple(w for w in words if w.lower() not in drop)


# JSON key names: held-out records' keys are removed below (title, pages, rating, team, salary, ...)
_KEY_WORDS = _words("""
name age city country email phone address street zip code label tag kind category status state level rank
score points total count amount price size width height depth length weight volume speed distance duration
year month day hour minute second date time start end begin finish owner author editor artist creator maker
brand model version edition color colour shape material fabric flavor scent sound genre style mood theme topic
subject course grade class group unit room floor building office desk seat row column line page_count section
chapter verse note comment message reply answer question hint clue key value id uid serial number index order
position slot lane track route path port host domain url link handle username nickname alias first_name
last_name middle_name surname title_case language locale region zone area district village town province
planet star moon ocean river lake island mountain forest desert valley_name field garden farm crop fruit
vegetable animal species breed pet owner_name vet diet food drink meal dish recipe ingredient spice sauce
cheese bread cake pie soup salad tea coffee juice milk water sugar salt oil butter egg rice pasta bean nut
seed leaf flower tree root branch bark wood stone metal gold silver iron copper glass paper plastic cotton
wool silk leather tool device gadget machine engine motor wheel tire door window roof wall fence gate bridge
tower castle church school library museum theater cinema stadium park beach harbor airport_code train bus
car bike boat ship plane rocket vehicle driver pilot captain crew passenger guest host_name visitor member
player coach referee fan winner loser champion hero villain king queen prince princess knight wizard
dragon robot alien monster ghost hero_name superpower weapon shield armor potion spell quest level_name boss
health mana energy stamina strength power armor_class defense attack magic luck charisma wisdom courage
mission goal target budget income expense profit loss tax fee discount coupon voucher invoice receipt
account balance deposit loan debt credit card_type pin password token secret private public visible
hidden active enabled disabled archived deleted verified approved paid shipped delivered returned refunded
open closed locked available sold reserved pending finished done ready valid empty full fresh ripe raw
cooked frozen organic vegan spicy sweet sour bitter salty hot cold warm wet dry clean dirty new old young
senior junior married single student teacher doctor nurse lawyer farmer baker chef pilot_name singer dancer
painter writer poet actor director producer manager leader captain_name partner friend sibling parent child
score_a score_b home away guest_team venue capacity attendance season episode series part volume_name issue
release launch deadline due_date birthday anniversary holiday weekday weekend morning evening night
latitude longitude altitude elevation population density area_code currency unit_price quantity stock
items tags labels members players colors sizes notes aliases hobbies languages toppings features genres
""")
# the held-out records' keys, from their own generators
HELD_OUT_KEYS = frozenset(key for record in heldout_templates.RECORDS.values() for key in record.make(random.Random(0)))
JSON_KEYS = _without(_KEY_WORDS, HELD_OUT_KEYS)
# List-valued keys read best as plurals; the rest take scalar values
LIST_KEYS = tuple(k for k in JSON_KEYS if k in _words("items tags labels members players colors sizes notes aliases "
                                                      "hobbies languages toppings features genres"))
SCALAR_KEYS = tuple(k for k in JSON_KEYS if k not in LIST_KEYS)

# String values: everyday words and places, minus the held-out records' values
STRING_VALUES = _without(_words("""
alpha beta gamma delta omega apple banana cherry grape lemon lime mango melon olive peach pear plum berry
red blue green black white yellow purple orange pink brown grey silver gold teal navy amber ivory coral
north south east west central upper lower inner outer left right front back top bottom middle
small medium large tiny huge short long wide narrow light heavy quick slow bright dark soft loud quiet
Paris Lima Oslo Cairo Tokyo Quito Rome Delhi Accra Seoul Perth Bern Madrid Vienna Prague Dublin Athens
Berlin Sydney Boston Denver Austin Toronto Chicago Mumbai Jakarta Manila Santiago Bogota Tunis Rabat Kyiv
Riga Tallinn Sofia Zagreb Warsaw Helsinki Geneva Milan Naples Porto Seville Lyon Nice Bergen Malmo Turku
Ada Alan Grace Linus Maria Noor Kenji Olga Pedro Ines Yuki Sam Leila Hugo Chen Amara Felix Rosa Tariq Elena
Aaron Bella Carlos Dana Emil Fatima George Hiro Iris Jonas Kara Luca Maya Nils Omar Paula Quinn Rita Sven
Tara Uma Victor Wendy Xavier Yara Zane cat dog horse rabbit turtle parrot fox wolf bear deer eagle owl
lamp chair kettle backpack guitar bicycle clock mug tent camera phone laptop table sofa pencil brush
draft final beta_release stable legacy basic premium standard deluxe trial monthly yearly weekly daily
spring summer autumn winter morning evening rainy windy cloudy foggy calm stormy
"""), heldout_templates.TITLES, heldout_templates.TEAMS, heldout_templates.SKILLS, heldout_templates.DESTINATIONS,
    heldout_templates.STATIONS)

# People and things of word problems, minus the held-out stories' own
PEOPLE = _without(_words("""
Tom Ana Li Sara Omar Mia Ben Zoe Ivan Nora Raj Eva Adam Alice Amir Anna Aria Asha Bruno Carla Chloe Clara
Daniel David Dina Eli Emma Erik Ezra Farah Finn Gabriel Gina Hannah Harry Hector Ida Igor Imani Isaac Jack
Jade Jamal Jana Jasper Jin Joel Julia Kai Karim Kate Kim Laila Lena Leo Liam Lily Lina Lucas Lucy Luis Maja
Malik Marco Marta Max Mila Mohamed Nadia Nina Noah Olivia Oscar Pia Quentin Rafael Rana Rosa Ruby Ryan Sami
Selma Simon Sofia Sonia Tariq Teo Theo Tina Ulla Vera Vikram Wanda Will Xena Yasmin Yusuf Zara Zeno Abel
Bea Cleo Dev Edith Femi Greta Hugo Ilse Joao Nell Otto Petra Rhea Saul Tobias Una Vito
"""), heldout_templates.NAMES)
ITEMS = _without(_words("""
apples books coins stamps marbles pencils cards shells cookies stickers oranges pears plums lemons eggs
cupcakes muffins bagels candies chocolates balloons kites toys dolls blocks bricks cups plates
bowls spoons forks glasses hats scarves gloves socks shoes shirts pens erasers notebooks folders rulers
magnets pebbles rocks leaves acorns flowers roses tulips seeds carrots potatoes tomatoes onions peppers
nuts grapes cherries berries bananas melons coconuts pies cakes tarts rolls loaves sandwiches pizzas
letters postcards photos posters maps keys locks boxes bags baskets jars cans tins buckets
ropes nails screws bolts tiles planks logs sticks cones rings bracelets necklaces badges medals trophies
games robots cars trucks trains boats planes rockets drums flutes whistles bells lamps
"""), heldout_templates.ITEMS)

# Function-name parts and argument names of the code grammar (held-out ones removed in ``grammar``)
NAME_VERBS = _words("calc compute apply get make do step transform convert map process eval find solve run "
                    "shift bump adjust mix combine check test judge weigh rate measure")
NAME_NOUNS = _words("value result number score total item level count thing point mark output answer signal reading "
                    "offset pair unit entry")
ARGUMENTS = _without(_words("x n value a b v z t m p q val number count size score item data w s i j inp arg"),
                     heldout_templates.ARGUMENTS)
