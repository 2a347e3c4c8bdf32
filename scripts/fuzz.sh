#!/usr/bin/env bash
# Fuzzes every harness of fuzz/ with libFuzzer (README "Fuzzing"): builds the `fuzz` preset (clang,
# ASan + UBSan, coverage) and runs each harness for SECONDS (default 600) on a copy of its
# committed corpus, JOBS harnesses at a time (default: the number of cores). Prints one line per
# harness: executions, their rate, coverage, and whether it crashed. A crash leaves its input as
# build-fuzz/findings/<harness>/crash-* (add it to fuzz/corpus/<harness>/ once fixed).
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]      e.g. scripts/fuzz.sh 30 gguf http
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -eq 0 ] && harnesses=(gguf safetensors llama2c hf_config tokenizer_json
                                         chat_template request_json http)
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ is not installed (libFuzzer comes with it): scripts/setup.sh installs it" >&2
  exit 1
fi
cmake --preset fuzz >/dev/null
targets=()
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
cmake --build --preset fuzz -j "$jobs" --target "${targets[@]}"

run_one() {
  local h=$1 work=build-fuzz/findings/$1
  rm -rf "$work" && mkdir -p "$work/corpus"
  cp fuzz/corpus/"$h"/* "$work/corpus/"
  # -rss_limit_mb: a parser that allocates what a file claims instead of what it holds is a
  # finding. -timeout: one input may take this long (the HTTP harness waits for answers).
  local timeout=10
  [ "$h" = http ] && timeout=30
  set +e
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    build-fuzz/fuzz/fuzz_"$h" "$work/corpus" -max_total_time="$seconds" -max_len=65536 \
    -rss_limit_mb=2048 -timeout="$timeout" -artifact_prefix="$work/" -print_final_stats=1 \
    >"$work/log.txt" 2>&1
  local rc=$?
  set -e
  local execs rate cov
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log.txt" | grep -o '[0-9]*$' | tail -1 || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$work/log.txt" | grep -o '[0-9]*$' | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' "$work/log.txt" | tail -1 | grep -o '[0-9]*' || true)
  if [ $rc -eq 0 ]; then
    printf '%-16s %10s execs  %6s/s  cov %6s  no crash in %ss\n' "$h" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$seconds"
  else
    printf '%-16s %10s execs  %6s/s  cov %6s  FAILED (exit %d): see %s/log.txt\n' "$h" "${execs:-?}" "${rate:-?}" "${cov:-?}" $rc "$work"
    return 1
  fi
}

export -f run_one
export seconds
status=0
printf '%s\n' "${harnesses[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}' || status=1
exit $status
