#!/usr/bin/env bash
# One-time (and idempotent) set-up for sweep: Debian packages, LibTorch 2.11.0 from
# PyPI's torch wheel in a cached virtual environment outside the work tree, then a
# CMake configure + build. Prints nothing but progress; every step is skipped when
# its result is already there, so re-running costs seconds.
#
#   scripts/setup.sh            set up and build the `sweep` binary (Release) into ./build
#   scripts/setup.sh --tests    the same, and every test binary (what ctest runs)
#   SWEEP_CACHE=DIR             where the torch venv and ccache live (default ~/.cache/sweep)
#   SWEEP_BUILD_DIR=DIR         build folder (default ./build)
#   SWEEP_WERROR=ON|OFF         a compiler warning in our code fails the build; unset, CMake
#                               decides by the compiler, the same for both commands (ON with
#                               g++ 12, which CI builds with; OFF with others, such as the GPU
#                               image's g++ 13), so --tests after a plain build reuses its objects
#
# The compiler's output goes to BUILD/setup.log; the terminal gets a progress line every
# 30 s, and on a failure the log's errors.
set -euo pipefail

targets=(--target sweep)
tests=
case "${1:-}" in
  --tests) targets=(); tests=ON ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${SWEEP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sweep}
build=${SWEEP_BUILD_DIR:-$root/build}
torch_version=2.11.0
mkdir -p "$cache"

say() { printf '[setup] %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------------
# What the build needs (GoogleTest and Google Benchmark too: CMake's configure requires them),
# gnuplot for the reports' charts and python3-venv for the torch wheel. With --tests only:
# slurmctld, slurmd, slurm-client and munge, for the Slurm tests' throw-away one-host cluster
# (tests/slurm/cluster.sh; `sweep run --slurm` itself needs only sbatch, the cluster's), and
# chromium, which the tables' test opens docs/tables/index.html in, headless
# (tests/reports_tables_test.cc; on Ubuntu 24.04 the chromium package is a snap).
pkgs=(cmake g++ ccache libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libfccp-dev
      libbenchmark-dev libgtest-dev gnuplot-nox python3-venv)
if [ -n "$tests" ]; then pkgs+=(slurmctld slurmd slurm-client munge chromium); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- LibTorch from the torch wheel ---------------------------------------------------
# A python that already has torch 2.11.0 (the GPU runners' image) is used as it is;
# otherwise the wheel goes into a venv under the cache and is reused from then on.
has_torch() { "$1" -c "import torch,sys; sys.exit(0 if torch.__version__.split('+')[0]=='$torch_version' else 1)" 2>/dev/null; }
py=""
for cand in "${SWEEP_PYTHON:-}" "$cache/torch-$torch_version/bin/python" python3; do
  [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 && has_torch "$cand" && { py=$cand; break; }
done
if [ -z "$py" ]; then
  venv="$cache/torch-$torch_version"
  say "installing torch==$torch_version into $venv (once; a few GB)"
  rm -rf "$venv.tmp"
  python3 -m venv "$venv.tmp"
  "$venv.tmp/bin/python" -m pip install -q --upgrade pip
  "$venv.tmp/bin/python" -m pip install -q "torch==$torch_version"
  rm -rf "$venv"; mv "$venv.tmp" "$venv"
  # the venv's scripts hold absolute paths to venv.tmp; python itself does not care.
  py="$venv/bin/python"
  has_torch "$py" || { say "torch $torch_version did not import from $venv"; exit 1; }
fi
# -W ignore: importing torch without NumPy warns that it failed to initialise NumPy.
torch_prefix=$("$py" -W ignore -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
say "LibTorch: $torch_prefix"

# --- The reference packages, with --tests ----------------------------------------------
# TrainerArgs.EveryEmittedScriptConstructsWithTheRealPackages constructs every emitted
# TrainingArguments, SFTConfig, LoraConfig and BitsAndBytesConfig with transformers 5.23,
# PEFT 0.21 and TRL 1.16 (tests/fixtures/construct_trainer_args.py). They go beside torch: into
# its venv, or, for a system Python with torch, into a venv of their own that sees it. TRL
# without its dependencies: SFTConfig needs transformers alone (its trainer's `datasets` and
# pyarrow, a hundred MB, are not imported; the test reads SFTTrainer's signature from source).
# The test finds that Python in BUILD/ref-python, not in CMake's cache: both commands configure
# alike (tests/ci_gates_test.cc SetupScript.APlainBuildAndTestsConfigureAlike).
ref_py=
if [ -n "$tests" ]; then
  has_refs() { "$1" -W ignore -c "import sys, transformers, peft, trl, accelerate; sys.exit(0 if (transformers.__version__, peft.__version__, trl.__version__, accelerate.__version__) == ('5.23.0', '0.21.2', '1.16.0', '1.15.0') else 1)" 2>/dev/null; }
  ref_py=$py
  if ! has_refs "$ref_py"; then
    if "$py" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)'; then
      say "installing transformers 5.23, PEFT 0.21, TRL 1.16 into $("$py" -c 'import sys; print(sys.prefix)') (once)"
    else
      ref_venv="$cache/refs-torch-$torch_version"
      [ -x "$ref_venv/bin/python" ] || "$py" -m venv --system-site-packages "$ref_venv"
      ref_py="$ref_venv/bin/python"
      say "installing transformers 5.23, PEFT 0.21, TRL 1.16 into $ref_venv (once)"
    fi
    "$ref_py" -m pip install -q transformers==5.23.0 peft==0.21.2 accelerate==1.15.0
    "$ref_py" -m pip install -q --no-deps trl==1.16.0
    has_refs "$ref_py" || { say "the reference packages did not import from $ref_py"; exit 1; }
  fi
fi

# --- Configure and build --------------------------------------------------------------
export CCACHE_DIR=${CCACHE_DIR:-$cache/ccache}
cuda_args=()
[ -x /usr/local/cuda/bin/nvcc ] && cuda_args=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCUDAToolkit_ROOT=/usr/local/cuda)
mkdir -p "$build"
log="$build/setup.log"
: > "$log"
# The last lines of the log that say what went wrong, then the log's name; exits 1.
fail() {
  say "$1 failed; from $log:"
  grep -E -A3 'error|Error|CMake Error' "$log" | head -n 60 >&2 || tail -n 40 "$log" >&2
  say "the whole output: $log"
  exit 1
}
# No -Werror of its own: the plain build and --tests compile every object alike (CMakeLists.txt).
werror_arg=()
[ -n "${SWEEP_WERROR:-}" ] && werror_arg=(-DSWEEP_WERROR="$SWEEP_WERROR")
if [ ! -f "$build/CMakeCache.txt" ]; then
  say "configuring $build"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=${SWEEP_BUILD_TYPE:-Release} \
    -DCMAKE_PREFIX_PATH="$torch_prefix${SWEEP_EXTRA_PREFIX:+;$SWEEP_EXTRA_PREFIX}" "${cuda_args[@]}" \
    "${werror_arg[@]}" >>"$log" 2>&1 || fail "configuring"
elif ((${#werror_arg[@]})); then
  cmake "$build" "${werror_arg[@]}" >>"$log" 2>&1 || fail "configuring"
fi
[ -z "$ref_py" ] || echo "$ref_py" > "$build/ref-python"
what=${targets[*]:+the sweep binary}
what=${what:-everything (the tests too)}
say "building $what with $(nproc) jobs (the compiler's output: $log)"
start=$SECONDS
cmake --build "$build" -j "$(nproc)" "${targets[@]}" >>"$log" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null && sleep 1; done
  kill -0 "$pid" 2>/dev/null || break
  done_pct=$(grep -oE '^\[ *[0-9]+%\]' "$log" | tail -n 1 | tr -d '[] ')
  say "building: ${done_pct:-starting}, $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s"
done
wait "$pid" || fail "the build"
took="$(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s"
warnings=$(grep -c 'warning:' "$log" || true)
if [ "$warnings" -gt 0 ]; then say "built in $took; $warnings warning(s) in $log"; else say "built in $took"; fi
