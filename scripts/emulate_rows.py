#!/usr/bin/env python3
"""Re-runs the rows of a results.csv measured on a GPU on the emulated device, one worker process
per row, and prints measured against predicted: peak allocated and peak reserved, and the status
(an OOM must be predicted as an OOM). The card is the one the rows were measured on (--card, as a
JSON object of sweep's EmulatedCard); a budget the rows ran under (budget_bytes, a memory
fraction of that card) applies as it did there.

    scripts/emulate_rows.py docs/tables/rtx3060-results.csv [--sweep build/sweeps/sweep]

Exit status 1 when a row is outside 1% (allocated) / 3% (reserved) or changes status."""
import argparse, csv, json, subprocess, sys

H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85017493504, "context_bytes": 0,
        "cc_major": 9, "cc_minor": 0, "sms": 132, "cpu": False}
AXES_INT = ["batch", "seq", "target_seq", "accumulation", "steps", "warmup_steps", "repetitions",
            "budget_bytes", "lora_r"]
AXES_FLOAT = ["audio_s", "lora_alpha", "lora_dropout"]
AXES_TEXT = ["model", "family", "mode", "precision", "checkpointing", "optimizer", "alloc_conf",
             "adapter", "offload", "weights"]


def point_of(row, card):
    p = {"device": "emulated", "card": card}
    for k in AXES_TEXT:
        if row.get(k):
            p[k] = row[k]
    for k in AXES_INT:
        if row.get(k):
            p[k] = int(float(row[k]))
    for k in AXES_FLOAT:
        if row.get(k):
            p[k] = float(row[k])
    if row.get("use_cache"):
        p["use_cache"] = row["use_cache"] == "1"
    if row.get("lora_targets"):
        p["lora_targets"] = row["lora_targets"].split(";")
    # Rows measured before the whole Whisper (2026-11-27): a Whisper row without target_seq is
    # the encoder-classifier, whisper-*-cls now (as sweep's results reader reads it).
    if p.get("family") == "whisper" and not row.get("target_seq"):
        p["family"] = "whisper-cls"
        if not p["model"].endswith("-cls"):
            p["model"] += "-cls"
    return p


def main():
    a = argparse.ArgumentParser()
    a.add_argument("results")
    a.add_argument("--sweep", default="build/sweeps/sweep")
    a.add_argument("--card", default=json.dumps(H100))
    args = a.parse_args()
    card = json.loads(args.card)
    bad = n = 0
    for row in csv.DictReader(open(args.results)):
        if row["status"] not in ("ok", "oom") or row.get("device") != "cuda":
            continue
        p = point_of(row, card)
        out = subprocess.run([args.sweep, "worker", "--point", json.dumps(p), "--result-fd", "1"],
                             capture_output=True, text=True)
        try:
            m = json.loads(out.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            m = {"status": "crash", "message": out.stderr[-300:]}
        label = " ".join(f"{k}={row[k]}" for k in ["model", "batch", "precision", "checkpointing",
                                                    "optimizer", "adapter", "offload", "weights"] if row.get(k))
        n += 1
        if m["status"] != row["status"]:
            bad += 1
            print(f"STATUS {label}: measured {row['status']}, predicted {m['status']} {m.get('message', '')[:160]}")
            continue
        if row["status"] == "oom":
            print(f"ok     {label}: oom (measured in {row.get('phase')}, predicted in {m.get('phase')})")
            continue
        ra = int(m["peak_allocated_bytes"]) / int(row["peak_allocated_bytes"])
        rr = int(m["peak_reserved_bytes"]) / int(row["peak_reserved_bytes"])
        ok = abs(ra - 1) <= 0.01 and abs(rr - 1) <= 0.03
        bad += not ok
        print(f"{'ok    ' if ok else 'OFF   '} {label}: allocated {ra:.4f} reserved {rr:.4f}")
    print(f"{n} rows, {bad} off")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
