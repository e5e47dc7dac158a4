#!/usr/bin/env bash
# Regenerates the per-card tables of docs/tables/ (sweep tables), one card at a time, and prints
# the time each card took: the check that every card's table regenerates in under 10 minutes on
# a 2-core machine. Then the page's screenshot, docs/images/tables.png (headless Chromium).
#
#   scripts/tables.sh [CARD ...]     # default: every card of `sweep gpus`
#   SWEEP=build/sweeps/sweep RESULTS=results/tables scripts/tables.sh t4
#
# The fits' rows stay under $RESULTS/<card>/ and a second run reuses them (it then only reads);
# delete that directory to time a card from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."
sweep=${SWEEP:-build/sweeps/sweep}
results=${RESULTS:-results/tables}
cards=("$@")
if ((${#cards[@]} == 0)); then
  mapfile -t cards < <("$sweep" gpus --json | python3 -c 'import json,sys; [print(g["key"]) for g in json.load(sys.stdin)["gpus"]]')
fi
printf '%-12s %10s\n' card seconds
total=0
for card in "${cards[@]}"; do
  start=$(date +%s.%N)
  nice "$sweep" tables --card "$card" --out docs/tables --results "$results" -q
  s=$(echo "$(date +%s.%N) - $start" | bc)
  total=$(echo "$total + $s" | bc)
  flag=$(echo "$s > 600" | bc)
  printf '%-12s %10.1f%s\n' "$card" "$s" "$([ "$flag" = 1 ] && echo '  over 10 minutes' || true)"
done
printf '%-12s %10.1f\n' total "$total"
if command -v chromium >/dev/null; then
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1000 \
    --screenshot="$PWD/docs/images/tables.png" \
    "file://$PWD/docs/tables/index.html#card=rtx3060&model=gpt2&input=seq%20512" 2>/dev/null
  echo "screenshot: docs/images/tables.png"
fi
