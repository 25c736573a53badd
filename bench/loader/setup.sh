#!/usr/bin/env bash
# Creates the benchmark's own virtual environment, .venv-bench, with the peers
# that bench/loader/run.py compares stoker against: CPU PyTorch + torchvision,
# WebDataset, NVIDIA DALI, and simplejpeg (libjpeg-turbo) for the decode limit.
#
# stoker itself is NOT installed here: run.py runs the stoker peer with
# stoker's own interpreter (--stoker-python, default .venv/bin/python), so the
# two environments stay separate. Pass --with-stoker to also install the
# package from this checkout into .venv-bench (it builds the C++ extension).
#
# Usage: bench/loader/setup.sh [--with-stoker]
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
venv=$root/.venv-bench

with_stoker=0
for arg in "$@"; do
  case $arg in
    --with-stoker) with_stoker=1 ;;
    *) echo "usage: $0 [--with-stoker]" >&2; exit 2 ;;
  esac
done

python=${PYTHON:-python3}
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --progress-bar off)
"${pip[@]}" --upgrade pip

# PyTorch's CPU-only wheels are far smaller than PyPI's (which pull in the CUDA
# libraries); use them when their index answers, else plain PyPI.
cpu_index=https://download.pytorch.org/whl/cpu
if "$venv/bin/python" - "$cpu_index" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=10)
except Exception:
    sys.exit(1)
PY
then
  echo "torch: CPU wheels from $cpu_index"
  "${pip[@]}" --index-url "$cpu_index" torch torchvision
else
  echo "torch: $cpu_index not reachable; installing from PyPI"
  "${pip[@]}" torch torchvision
fi

"${pip[@]}" numpy pillow webdataset simplejpeg

# DALI's wheel runs CPU-only pipelines without a GPU; prefer the CUDA 13
# build, fall back to CUDA 12.
if ! "${pip[@]}" nvidia-dali-cuda130; then
  echo "nvidia-dali-cuda130 failed to install; trying nvidia-dali-cuda120"
  "${pip[@]}" nvidia-dali-cuda120
fi

if [ "$with_stoker" = 1 ]; then
  "${pip[@]}" scikit-build-core nanobind
  "${pip[@]}" --no-build-isolation "$root"
fi

"$venv/bin/python" - <<'PY'
import importlib
for name in ("torch", "torchvision", "PIL", "webdataset", "simplejpeg",
             "nvidia.dali"):
    module = importlib.import_module(name)
    print(f"{name:12} {getattr(module, '__version__', '?')}")
PY
echo "ready: $venv/bin/python bench/loader/run.py --help"
