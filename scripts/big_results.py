#!/usr/bin/env python3
"""Writes a large results.csv for timing `sweep report` on many rows (README, "Reading results").

Every row is a copy of a random row of SEED (a results.csv `sweep run` wrote, such as the
quickstart's) with the model, seq, precision, optimizer, checkpointing, batch and point_id
changed, so that the rows spread over 4 models x 12 shapes and each has a point of its own.

  scripts/big_results.py results/quickstart/results.csv /tmp/big 100000
  SWEEP_GNUPLOT=/nonexistent build/sweeps/sweep report /tmp/big --out /tmp/big-report
"""
import csv
import itertools
import os
import random
import sys


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    seed_csv, out_dir = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) == 4 else 100_000
    with open(seed_csv, newline="") as f:
        header, *seed = list(csv.reader(f))
    col = {name: i for i, name in enumerate(header)}
    axes = itertools.product(["gpt2", "gpt2-medium", "t5-small", "whisper-tiny"], range(1, 13),
                             ["fp32", "fp16-amp", "bf16-amp", "bf16"], ["adamw", "adafactor", "sgd"],
                             ["none", "block"], range(1, 65))
    rng = random.Random(0)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(header)
        for i, (model, shape, precision, optimizer, ckpt, batch) in enumerate(itertools.cycle(axes)):
            if i == n:
                break
            row = list(rng.choice(seed))
            for name, value in (("model", model), ("seq", 64 * shape), ("precision", precision),
                                ("optimizer", optimizer), ("checkpointing", ckpt),
                                ("batch", batch), ("point_id", "%016x" % i)):
                row[col[name]] = str(value)
            out.writerow(row)


if __name__ == "__main__":
    main()
