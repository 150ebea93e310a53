"""How often the shipped `mini` saw each token id in training: every token id of the recipe's pool of training
examples (prompts and answers, as the models saw them) counted into token_counts.npy, the file
`canvaslab noise-study plan --token-counts` takes for its rare-token control, with a summary (tokens, ids seen,
occurrences of the tokenizer's unused ids) in counts.json. Counting the pool's own ids, not a re-tokenized text
dump, gives the counts of exactly what the model was trained on (the recipe's pool takes ~90 s on 2 cores).
A model trained on another data version, mixture or with distilled prose answers is counted with the options its
training took (`--data`, `--mixture`, `--prose-answers`; `--mixture ''` for the data version's own shares; the
sums' `--sum-format` of `mini train` is not an option here: the shipped recipe's and the grammar data's are used).

    python benchmarks/mini_token_counts.py --passages prose.txt --out DIR     # DIR/token_counts.npy, counts.json
    python benchmarks/mini_token_counts.py --passages prose.txt --data grammar --mixture '' \
        --prose-answers prose_answers.json --out DIR                        # mini 1.1.0's pool
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from canvaslab import choices
from canvaslab.choices import DATA_VERSIONS
from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.errors import CanvaslabError
from canvaslab.models.mini import load_mini_tokenizer
from canvaslab.training.batches import Pool, generate_texts
from canvaslab.training.recipe import SHIPPED
from canvaslab.training.tasks import AnswerStyle, parse_shares
from canvaslab.training.tasks.prose import checked_answers_file
from canvaslab.studies.unused_tokens.vocab_scan import find_unused_tokens


def checked(args) -> tuple[AnswerStyle, dict | None]:
    """The options checked as the commands check theirs: the answer style and the share overrides."""
    choices.readable_file("--passages", args.passages)
    if args.passages.stat().st_size == 0:
        raise CanvaslabError(f"--passages {args.passages}: the file is empty (`canvaslab mini passages` writes one)")
    choices.whole_number("--examples", args.examples, 1)
    choices.whole_number("--seed", args.seed, 0, choices.MAX_SEED)
    choices.writable_folder("--out", args.out)
    style = AnswerStyle(prose_answers=checked_answers_file(args.prose_answers, args.passages))
    return style, parse_shares(args.mixture, args.data) if args.mixture else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=Path, required=True, help="`canvaslab mini passages` of the default corpus")
    parser.add_argument("--out", type=Path, required=True, help="folder for token_counts.npy and counts.json")
    parser.add_argument("--examples", type=int, default=SHIPPED.examples, help="pool size (default: the recipe's)")
    parser.add_argument("--seed", type=int, default=0, help="the pool's seed (the recipe's: 0)")
    parser.add_argument("--data", choices=DATA_VERSIONS, default="shipped", help="the training data version")
    parser.add_argument("--mixture", default=SHIPPED.mixture,
                        help="the tasks' share overrides as training took them ('': the data version's own)")
    parser.add_argument("--prose-answers", type=Path, help="`canvaslab mini distill`'s answers, if trained on them")
    args = parser.parse_args()
    try:  # bad input: one line and exit 2, before the pool is generated
        style, shares = checked(args)
    except CanvaslabError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2)
    start = time.monotonic()
    tokenizer = load_mini_tokenizer()
    rows = generate_texts(args.passages, args.examples, args.seed, workers=os.cpu_count() or 1, style=style,
                          shares=shares, data=args.data)
    # the training run's cut: answers keep at most two canvases (run.py, max_answer_tokens)
    pool = Pool.build(tokenizer, rows, max_answer_tokens=2 * 128)
    counts = np.zeros(len(tokenizer), dtype=np.int64)
    for ids in (*pool.prompts, *pool.answers):
        counts += np.bincount(np.asarray(ids, dtype=np.int64), minlength=len(tokenizer))
    unused = list(find_unused_tokens(tokenizer).ids)
    args.out.mkdir(parents=True, exist_ok=True)
    np.save(args.out / "token_counts.npy", counts)
    summary = {"examples": args.examples, "seed": args.seed, "data": args.data, "mixture": args.mixture or None,
               "passages_sha256": hashlib.sha256(args.passages.read_bytes()).hexdigest(),
               "prose_answers_sha256": (hashlib.sha256(args.prose_answers.read_bytes()).hexdigest()
                                        if args.prose_answers else None),
               "tokens": int(counts.sum()), "ids_seen": int((counts > 0).sum()), "vocabulary": len(tokenizer),
               "unused_ids": len(unused), "unused_occurrences": int(counts[unused].sum()),
               "seconds": round(time.monotonic() - start, 1)}
    (args.out / "counts.json").write_text(json.dumps(summary, indent=1) + "\n")
    record_result(args.out / "token_counts.npy", shows="how often each token id occurs in a training pool"
                  " (the noise study's --token-counts; counts.json: tokens, ids seen, unused ids' "
                  "occurrences)", environment=environment_fingerprint())
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
