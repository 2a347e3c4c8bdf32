#!/usr/bin/env bash
# The test command of README.md (and of .ci/run): installs what is missing, builds the release
# and the Debug + ASan/UBSan trees, and runs the whole ctest suite in both.
# EMBER_SKIP_ASAN=1 skips the sanitizer pass (quicker local runs).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)

cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

if [ "${EMBER_SKIP_ASAN:-0}" != "1" ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan -j "$jobs"
fi
