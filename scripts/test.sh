#!/usr/bin/env bash
# The test command of README.md (and of .ci/run): installs what is missing, builds the release
# and the Debug + ASan/UBSan trees, and runs the whole ctest suite in both.
# EMBER_SKIP_ASAN=1 skips the sanitizer pass (quicker local runs); EMBER_SKIP_CUDA=1 the CUDA compile.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)

cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

# The CUDA backend compiles wherever nvcc is (its kernels run only on a GPU; see README "CUDA"):
# the cuda preset's backend/cuda/ object library alone, so CI proves it builds without one.
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -n "$nvcc" ] && [ "${EMBER_SKIP_CUDA:-0}" != "1" ]; then
  cmake --preset cuda -DCMAKE_CUDA_COMPILER="$nvcc" >/dev/null
  cmake --build --preset cuda --target ember_cuda -j "$jobs"
else
  echo "test: nvcc not found; the CUDA backend was not compiled"
fi

if [ "${EMBER_SKIP_ASAN:-0}" != "1" ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan -j "$jobs"
fi
