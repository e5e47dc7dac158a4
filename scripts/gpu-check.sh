#!/usr/bin/env bash
# What only a GPU can show, in one command per lease: build on the GPU host, then any of
#   cuda       every *_CUDA test of sweep_tests (cuda_test, optim8bit_test, int8_test,
#              offload_test, results_store_test, ...), listed first, then run
#   fidelity   configs/fidelity.yaml, then scripts/hf_reference.py compare on its rows
#   baseline   configs/ci-gpu.yaml twice, and `sweep compare` of the two runs (must exit 0)
#   table=CFG  configs/CFG.yaml with --search max-batch, then `sweep recommend`
# in the order given, each logged to $RES/<stage>.log; a failing stage does not stop the next.
#
#   scripts/gpu-check.sh cuda fidelity baseline table=rtx3060-table
#   RES=DIR (default results/gpu)  BUILD=DIR (default build-gpu)
# The GPU host has torch 2.11.0+cu130 in python3 but an older transformers and no libfccp:
# wheels in .whl/ are installed into /tmp/site, and .deps/fccp (dpkg -x of libfccp-dev) is
# used when present (docs/fidelity.md says how they were fetched).
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
sweep=$B/sweeps/sweep

for stage in "$@"; do
  log "stage $stage"
  case $stage in
    cuda)
      "$B/tests/sweep_tests" --gtest_list_tests --gtest_filter='*_CUDA*' >"$RES/cuda-tests.txt" 2>&1
      log "cuda tests: $(grep -c '^  ' "$RES/cuda-tests.txt")"; cat "$RES/cuda-tests.txt"
      "$B/tests/sweep_tests" --gtest_filter='*_CUDA*' >"$RES/cuda.log" 2>&1
      log "cuda tests exit $?"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED' "$RES/cuda.log" ;;
    fidelity)
      "$sweep" run configs/fidelity.yaml --out "$RES/fidelity" >"$RES/fidelity.log" 2>&1
      log "fidelity run exit $?"
      PYTHONUNBUFFERED=1 python3 scripts/hf_reference.py compare "$RES/fidelity" \
        >"$RES/fidelity-compare.md" 2>"$RES/fidelity-compare.err"
      log "reference compare exit $?"; cat "$RES/fidelity-compare.md" ;;
    fidelity-ours)
      "$sweep" run configs/fidelity.yaml --out "$RES/fidelity" >"$RES/fidelity.log" 2>&1
      log "fidelity run exit $?" ;;
    fidelity-reference)
      PYTHONUNBUFFERED=1 python3 scripts/hf_reference.py compare "$RES/fidelity" \
        >"$RES/fidelity-compare.md" 2>"$RES/fidelity-compare.err"
      log "reference compare exit $?"; cat "$RES/fidelity-compare.md" ;;
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
done
log "done"
