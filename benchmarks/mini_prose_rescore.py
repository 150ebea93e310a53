#!/usr/bin/env python
"""Score stored prose answers again with both readability proxies (word share and word-pair share).

    python benchmarks/mini_prose_rescore.py --passages prose.txt QUALITY.json [QUALITY.json ...]

Reads the ``answers`` of quality files written by ``mini_quality.py`` / ``canvaslab mini train`` and prints,
per file and model, the mean English-word share and English-bigram share of the prose answers (the
passages file is the one the run trained and was scored with).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from canvaslab.training.evaluate import english_bigram_fraction, english_fraction


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=Path, required=True)
    parser.add_argument("files", type=Path, nargs="+")
    args = parser.parse_args()
    for path in args.files:
        for model, answers in json.loads(path.read_text())["answers"].items():
            texts = [a["text"] for a in answers if a["task"] == "prose"]
            if texts:
                words = statistics.fmean(english_fraction(t, args.passages) for t in texts)
                pairs = statistics.fmean(english_bigram_fraction(t, args.passages) for t in texts)
                print(f"{path} {model}: n {len(texts)}, English-word share {words:.3f}, English-bigram share {pairs:.3f}")


if __name__ == "__main__":
    main()
