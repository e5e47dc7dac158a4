#!/usr/bin/env bash
# What every reader of results makes of the committed results, with the binary under test: the
# outputs tests/axes_test.cc holds equal, byte for byte, to those of the binary before the axis
# table (this folder's *.out files). An output that depends on the axes' code (their labels,
# names, order, grouping, join keys, the run's plan) is here.
#
#   outputs.sh SWEEP OUT          the outputs of binary SWEEP into folder OUT
#   outputs.sh SWEEP OUT --rows   first the rows of every_technique.yaml again (every_technique.csv)
#
# Inputs: every_technique.csv (an emulated run of every_technique.yaml: each technique axis off
# its plain value, alone and together), the RTX 3060 rows measured on an H100
# (docs/tables/rtx3060-results.csv) and the GPU CI's baseline (bench/baselines/ci-gpu).
set -euo pipefail
sweep=$1 out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Inputs are named relative to the checkout, as the outputs quote them.
cd "$root"
axes=tests/data/axes
if [ "${3:-}" = --rows ]; then
  "$sweep" run "$axes/every_technique.yaml" --out "$work/rows" >/dev/null
  cp "$work/rows/results.csv" "$axes/every_technique.csv"
fi
inputs=("every_technique=$axes/every_technique.csv"
        "rtx3060=docs/tables/rtx3060-results.csv"
        "ci-gpu=bench/baselines/ci-gpu/results.csv")
for input in "${inputs[@]}"; do
  name=${input%%=*} csv=${input#*=}
  "$sweep" report "$csv" --out "$work/report-$name" >/dev/null 2>&1
  cp "$work/report-$name/report.md" "$out/$name.report.md"
  "$sweep" recommend "$csv" --gpu rtx3060 --out "$work/recommend-$name" >"$out/$name.recommend.out" 2>&1 || true
  "$sweep" recommend "$csv" --gpu rtx3060 --out "$work/recommend-$name" --json >"$out/$name.recommend.json" 2>/dev/null || true
  "$sweep" compare "$csv" "$csv" --export "$work/compare-$name" >"$out/$name.compare.md" 2>/dev/null || true
  for f in benchmark-smaller.json bencher.json compare.csv; do
    cp "$work/compare-$name/$f" "$out/$name.compare.$f"
  done
done
# The plan of every_technique.yaml: its points, their ids and labels, in order.
"$sweep" run "$axes/every_technique.yaml" --out "$work/plan" --dry-run --json >"$out/every_technique.plan.json" 2>/dev/null
# The scratch folder's name varies from run to run.
sed -i "s#$work#WORK#g" "$out"/*
