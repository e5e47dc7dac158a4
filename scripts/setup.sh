#!/usr/bin/env bash
# One-time (and idempotent) set-up for sweep: Debian packages, LibTorch 2.11.0 from
# PyPI's torch wheel in a cached virtual environment outside the work tree, then a
# CMake configure + build. Prints nothing but progress; every step is skipped when
# its result is already there, so re-running costs seconds.
#
#   scripts/setup.sh            set up and build (Release) into ./build
#   SWEEP_CACHE=DIR             where the torch venv and ccache live (default ~/.cache/sweep)
#   SWEEP_BUILD_DIR=DIR         build folder (default ./build)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${SWEEP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sweep}
build=${SWEEP_BUILD_DIR:-$root/build}
torch_version=2.11.0
mkdir -p "$cache"

say() { printf '[setup] %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------------
# slurmctld, slurmd, slurm-client and munge: the Slurm tests start a throw-away one-host
# cluster (tests/slurm/cluster.sh); `sweep run --slurm` needs only sbatch (slurm-client).
# chromium: the tables' test opens docs/tables/index.html headless (tests/reports_tables_test.cc).
pkgs=(cmake g++ ccache libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libfccp-dev
      libbenchmark-dev libgtest-dev gnuplot-nox python3-venv
      slurmctld slurmd slurm-client munge chromium)
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
torch_prefix=$("$py" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
say "LibTorch: $torch_prefix"

# --- Configure and build --------------------------------------------------------------
export CCACHE_DIR=${CCACHE_DIR:-$cache/ccache}
cuda_args=()
[ -x /usr/local/cuda/bin/nvcc ] && cuda_args=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCUDAToolkit_ROOT=/usr/local/cuda)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=${SWEEP_BUILD_TYPE:-Release} \
    -DCMAKE_PREFIX_PATH="$torch_prefix${SWEEP_EXTRA_PREFIX:+;$SWEEP_EXTRA_PREFIX}" "${cuda_args[@]}" >&2
fi
cmake --build "$build" -j "$(nproc)" >&2
