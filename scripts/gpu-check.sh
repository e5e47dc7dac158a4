#!/usr/bin/env bash
# What only a GPU can show, in one command per lease: build on the GPU host (or unpack the
# binaries built here, see below), then any of
#   cuda       every *_CUDA test of sweep_tests (cuda_test, optim8bit_test, int8_test,
#              offload_test, results_store_test, ...), listed first, then run
#   context    a one-point capped run whose probe measures this card's CUDA context allowance
#   fidelity   configs/fidelity.yaml (FIDELITY_ARGS: overrides, e.g. repetitions=3), then scripts/hf_reference.py compare on its rows
#              (fidelity-ours and fidelity-reference: the two halves; JOBS reference points
#              at a time, default 1: with more, their peaks hold and their times do not)
#   sdpa       scripts/gpu-sdpa-points.txt: transformers with SDPA's kernel forced
#   reference  transformers at configs/fidelity.yaml's points and the sdpa ones, JOBS at a
#              time (peaks only, see above), into $RES/reference.jsonl, without sweep's rows:
#              `hf_reference.py compare DIR --load $RES/reference.jsonl` compares them later
#   baseline   configs/ci-gpu.yaml twice, and `sweep compare` of the two runs (must exit 0)
#   baseline-once  configs/ci-gpu.yaml once (step times on this card)
#   table=CFG  configs/CFG.yaml with --search max-batch, then `sweep recommend`
#   steptime   scripts/gpu-steptime-points.txt: transformers' step times, one point at a time,
#              into $RES/steptime.jsonl (the speed model on another card than its H100)
#   pairs      scripts/gpu-pairs.yaml: the H100's launch-bound pairs, 5 repetitions each
#   async-env  the context stage's point with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
#              exported: zygotes and probes start without it (docs/cuda-path.md), so it runs
# in the order given, each logged to $RES/<stage>.log; a failing stage does not stop the next.
# Stages joined by '+' run at the same time; STAGE@N stops that stage after N seconds. With
# DEADLINE (seconds since the epoch), a stage is stopped at it and none starts after it.
#
#   scripts/gpu-check.sh cuda fidelity baseline table=rtx3060-table
#   scripts/gpu-check.sh context cuda@200+reference@200 fidelity-ours baseline-once
#   RES=DIR (default results/gpu)  BUILD=DIR (default build-gpu)  JOBS=N
# The GPU host has torch 2.11.0+cu130 in python3 but an older transformers and no libfccp:
# wheels in .whl/ are installed into /tmp/site, and .deps/fccp (dpkg -x of libfccp-dev) is
# used when present (docs/fidelity.md says how they were fetched). .gpu/sweep-bin.tar.xz, when
# present, holds build/sweeps/sweep, build/tests/sweep_tests and lib/ (the Debian libraries
# they link that the host lacks) as built here against the same torch wheel: they run there
# once the paths compiled into them resolve (the wheel's site-packages under this machine's
# cache, the checkout at its path here), which saves the build. They are used only when they
# are the checkout's: the commit `sweep --version` names must be the checkout's HEAD (where
# git can say) and every file of .gpu/sources.sha256 (written with the tarball, docs/cuda-path.md)
# unchanged; else the script stops (exit 1) saying why. FORCE_PREBUILT=1 uses them anyway.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
B=${BUILD:-build-gpu}
RES=${RES:-results/gpu}
mkdir -p "$RES"
log() { printf '[gpu-check %s] %s\n' "$(date +%T)" "$*" | tee -a "$RES/gpu-check.log" >&2; }

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
[ -d .deps/fccp/usr ] && export FCCP_ROOT=$root/.deps/fccp/usr
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  g++ --version | head -1; cmake --version | head -1
} 2>&1 | tee "$RES/environment.txt"

# Why the unpacked binaries are not the checkout's, or nothing when they are (see the top).
stale_prebuilt() {
  local built here
  built=$(.gpu/build/sweeps/sweep --version 2>/dev/null | sed -n 's/.*(\([0-9a-f]*\)).*/\1/p')
  here=$(git rev-parse --short=12 HEAD 2>/dev/null)
  if [ -z "$built" ]; then
    echo "the binaries name no commit (\`sweep --version\`)"
  elif [ -n "$here" ] && [ "$built" != "$here" ]; then
    echo "they were built at commit $built, the checkout is at $here"
  elif [ -z "$here" ] && [ ! -f .gpu/sources.sha256 ]; then
    echo "built at $built, and neither git nor .gpu/sources.sha256 can say what the checkout is"
  elif [ -f .gpu/sources.sha256 ] && ! sha256sum --quiet --strict -c .gpu/sources.sha256 >/dev/null 2>&1; then
    echo "sources changed since they were built: $(sha256sum --quiet -c .gpu/sources.sha256 2>&1 | head -n 3 | tr '\n' ' ')"
  fi
}

# The binaries built here, when they start there and are the checkout's.
prebuilt() {
  [ -f .gpu/sweep-bin.tar.xz ] || return 1
  tar -xJf .gpu/sweep-bin.tar.xz -C .gpu || return 1
  local site here_site src stale
  site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  here_site=$(cat .gpu/site-packages)  # where the wheel's libraries were when they were linked
  [ -e "$here_site" ] || { mkdir -p "$(dirname "$here_site")" && ln -s "$site" "$here_site"; }
  src=$(cat .gpu/source-dir)           # SWEEP_SOURCE_DIR, SWEEP_BINARY of the tests
  [ -e "$src" ] || { mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; }
  export LD_LIBRARY_PATH=$root/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  stale=$(stale_prebuilt)
  if [ -n "$stale" ] && [ -z "${FORCE_PREBUILT:-}" ]; then
    log "refused .gpu/sweep-bin.tar.xz: $stale. Pack it again from this checkout (docs/cuda-path.md), remove it to build here, or set FORCE_PREBUILT=1"
    exit 1
  fi
  [ -n "$stale" ] && log "FORCE_PREBUILT: stale binaries used ($stale)"
  mkdir -p build/sweeps build/tests
  cp .gpu/build/sweeps/sweep build/sweeps/ && cp .gpu/build/tests/sweep_tests build/tests/
  build/sweeps/sweep --version >>"$RES/environment.txt" 2>&1
}
if [ -z "${BUILD:-}" ] && prebuilt; then
  B=build
  log "prebuilt binaries: $(tail -1 "$RES/environment.txt")"
else
  if [ ! -f "$B/CMakeCache.txt" ]; then
    log "configure $B"
    cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTORCH_CUDA_ARCH_LIST=9.0 \
      -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
      -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" \
      >"$RES/configure.log" 2>&1 || { tail -40 "$RES/configure.log"; exit 1; }
  fi
  log "build"
  cmake --build "$B" --target sweep sweep_tests -j "$(nproc)" >"$RES/build.log" 2>&1 ||
    { grep -B2 -A12 'error' "$RES/build.log" | head -80; exit 1; }
fi
sweep=$B/sweeps/sweep

stage() {
  local stage=$1
  log "stage $stage"
  case $stage in
    cuda)
      "$B/tests/sweep_tests" --gtest_list_tests --gtest_filter='*_CUDA*' >"$RES/cuda-tests.txt" 2>&1
      log "cuda tests: $(grep -c '^  ' "$RES/cuda-tests.txt")"; cat "$RES/cuda-tests.txt"
      "$B/tests/sweep_tests" --gtest_filter='*_CUDA*' >"$RES/cuda.log" 2>&1
      log "cuda tests exit $?"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED' "$RES/cuda.log" ;;
    fidelity)
      "$sweep" run configs/fidelity.yaml ${FIDELITY_ARGS:-} --out "$RES/fidelity" >"$RES/fidelity.log" 2>&1
      log "fidelity run exit $?"
      PYTHONUNBUFFERED=1 python3 scripts/hf_reference.py compare "$RES/fidelity" \
        >"$RES/fidelity-compare.md" 2>"$RES/fidelity-compare.err"
      log "reference compare exit $?"; cat "$RES/fidelity-compare.md" ;;
    fidelity-ours)
      "$sweep" run configs/fidelity.yaml ${FIDELITY_ARGS:-} --out "$RES/fidelity" >"$RES/fidelity.log" 2>&1
      log "fidelity run exit $?" ;;
    fidelity-reference)
      PYTHONUNBUFFERED=1 python3 scripts/hf_reference.py compare "$RES/fidelity" --jobs "${JOBS:-1}" \
        --save "$RES/fidelity-reference.jsonl" >"$RES/fidelity-compare.md" 2>"$RES/fidelity-compare.err"
      log "reference compare exit $?"; cat "$RES/fidelity-compare.md" ;;
    sdpa)
      PYTHONUNBUFFERED=1 python3 scripts/hf_reference.py points scripts/gpu-sdpa-points.txt \
        --jobs "${JOBS:-1}" --save "$RES/sdpa-reference.jsonl" >"$RES/sdpa.log" 2>&1
      log "sdpa points exit $?" ;;
    reference)
      "$sweep" run configs/fidelity.yaml gpu=h100-80gb --device emulated --dry-run --json \
        >"$RES/fidelity-dry-run.json" 2>"$RES/reference.log"
      { python3 scripts/hf_reference.py plan "$RES/fidelity-dry-run.json" &&
        grep -v '^#' scripts/gpu-sdpa-points.txt; } |
        sed -E 's/ --(steps|warmup|repetitions) [0-9]+//g; s/$/ --steps 1 --warmup 2 --repetitions 1/' \
        >"$RES/reference-points.txt"
      log "reference points: $(grep -c . "$RES/reference-points.txt")"
      PYTHONUNBUFFERED=1 python3 scripts/hf_reference.py points "$RES/reference-points.txt" \
        --jobs "${JOBS:-1}" --save "$RES/reference.jsonl" >>"$RES/reference.log" 2>&1
      log "reference points exit $?, $(grep -c '"error"' "$RES/reference.jsonl") failed" ;;
    context)
      # One small point under the RTX 3060's cap: the run's probe measures the context.
      printf '%s\n' 'name: context' 'device: cuda' 'gpu: rtx3060' 'steps: 2' 'warmup_steps: 1' \
        'repetitions: 1' 'grid: {seq: 128, batch: 2, precision: fp32}' 'models: [gpt2]' \
        >"$RES/context.yaml"
      "$sweep" run "$RES/context.yaml" --out "$RES/context" >"$RES/context.log" 2>&1
      log "context run exit $?"; grep -i 'context' "$RES/context.log" | head -5 ;;
    steptime)
      PYTHONUNBUFFERED=1 python3 scripts/hf_reference.py points scripts/gpu-steptime-points.txt \
        --jobs 1 --save "$RES/steptime.jsonl" >"$RES/steptime.log" 2>&1
      log "steptime points exit $?, $(grep -c . "$RES/steptime.jsonl") measured" ;;
    pairs)
      "$sweep" run scripts/gpu-pairs.yaml --out "$RES/pairs" >"$RES/pairs.log" 2>&1
      log "pairs run exit $?" ;;
    async-env)
      [ -f "$RES/context.yaml" ] || { log "async-env needs the context stage first"; return; }
      PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
        "$sweep" run "$RES/context.yaml" --out "$RES/async-env" >"$RES/async-env.log" 2>&1
      log "async-env run exit $? (0: the exported backend did not reach the points)"
      tail -3 "$RES/async-env.log" ;;
    baseline-once)
      "$sweep" run configs/ci-gpu.yaml --out "$RES/ci-gpu" >"$RES/baseline.log" 2>&1
      log "ci-gpu run exit $?" ;;
    baseline)
      "$sweep" run configs/ci-gpu.yaml --out "$RES/ci-gpu" >"$RES/baseline.log" 2>&1
      log "ci-gpu run exit $?"
      "$sweep" run configs/ci-gpu.yaml --out "$RES/ci-gpu-again" >>"$RES/baseline.log" 2>&1
      log "ci-gpu second run exit $?"
      "$sweep" compare "$RES/ci-gpu" "$RES/ci-gpu-again" >"$RES/baseline-compare.md" 2>&1
      log "compare of the two runs exit $?"; tail -5 "$RES/baseline-compare.md" ;;
    table=*)
      cfg=${stage#table=}
      "$sweep" run "configs/$cfg.yaml" --search max-batch --out "$RES/$cfg" >"$RES/$cfg.log" 2>&1
      log "$cfg search exit $?"
      "$sweep" recommend "$RES/$cfg" >"$RES/$cfg-recommend.md" 2>&1
      log "$cfg recommend exit $?" ;;
    *) log "unknown stage $stage" ;;
  esac
}

# Seconds left before DEADLINE (a day without one).
left() { if [ -n "${DEADLINE:-}" ]; then echo $((DEADLINE - $(date +%s))); else echo 86400; fi; }

export B RES sweep root JOBS FIDELITY_ARGS
for group in "$@"; do
  if [ "$(left)" -le 5 ]; then log "deadline: $group not started"; continue; fi
  pids=()
  for s in ${group//+/ }; do
    limit=$(left)
    if [[ $s == *@* ]]; then limit=$((${s#*@} < limit ? ${s#*@} : limit)); s=${s%@*}; fi
    timeout --kill-after=10 "$limit" bash -c "$(declare -f log stage); stage $s" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || log "a stage of $group ended with $?"; done
done
log "done"
