#!/usr/bin/env bash
# The backend seam, checked: outside src/ember/backend/ no source file names the cpu backend's
# namespace (cpu::), includes a backend's kernel or storage header (anything under backend/cpu/,
# backend/reference/, backend/cuda/), or touches KV storage memory (PagedKv, HostKvStorage, k_at,
# v_at). Model and engine code talks to backend/backend.h, backend/batch.h and backend/weight.h only.
# Run by the build (target seam_check) and by ctest; exits non-zero listing every offending line.
set -euo pipefail
cd "$(dirname "$0")/.."
pattern='cpu::|#include "ember/backend/(cpu|reference|cuda)/|\bPagedKv\b|\bHostKvStorage\b|\b[kv]_at\('
if hits=$(grep -rnE "$pattern" src --include='*.h' --include='*.cpp' --include='*.inc' |
          grep -v '^src/ember/backend/'); then
  echo "backend seam broken: these lines outside src/ember/backend/ reach behind backend.h:" >&2
  echo "$hits" >&2
  exit 1
fi
echo "backend seam: clean"
