#!/usr/bin/env python
"""Which digits of a sum does `mini` get right? Per-place accuracy of held-out additions, from saved evaluations.

Reads the answers an evaluation wrote (``quality_diffusion_*.json`` of ``benchmarks/mini_quality.py`` or a
training run), parses each ``A + B = C.`` answer, and scores C's digits against the true sum place by place,
counted from the right (units, tens, ...), with the sum's length and the operands' copy. Nothing is
generated: it reads files only.

    python benchmarks/mini_sum_digits.py --out FILE.json RUN=QUALITY.json [RUN=QUALITY.json ...]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

PLACES = ("units", "tens", "hundreds", "thousands")
ANSWER = re.compile(r"\s*(\d+) \+ (\d+) = (\d+)\.")


def digit_accuracy(answers: list[dict], task: str) -> dict:
    """Exact, length and per-place accuracy of one task's answers (a place counts where the true sum has it)."""
    rows = [answer for answer in answers if answer["task"] == task]
    right, present = Counter(), Counter()
    parsed = exact = length = 0
    for answer in rows:
        match = ANSWER.match(answer["text"])
        if match is None:
            continue
        first, second, written = match.groups()
        truth = str(int(first) + int(second))
        parsed += 1
        exact += written == truth
        length += len(written) == len(truth)
        for place in range(1, len(truth) + 1):
            present[place] += 1
            right[place] += len(written) >= place and written[-place] == truth[-place]
    return {"n": len(rows), "parsed": parsed, "exact": exact / len(rows), "length_right": length / max(parsed, 1),
            "place_accuracy": {PLACES[place - 1]: right[place] / present[place] for place in sorted(present)}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+", help="NAME=path/to/quality_diffusion_*.json")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    report = {}
    for item in args.runs:
        name, _, path = item.partition("=")
        answers = json.loads(Path(path).read_text())["answers"]["diffusion"]
        report[name] = {"file": path, **{task: digit_accuracy(answers, task) for task in ("add2", "add3")}}
        print(name, json.dumps({t: report[name][t]["place_accuracy"] for t in ("add2", "add3")}), flush=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
