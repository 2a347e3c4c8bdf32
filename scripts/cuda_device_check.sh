#!/usr/bin/env bash
# Checks and measures the CUDA backend on a GPU machine, from binaries built elsewhere with the
# cuda preset (cmake --preset cuda): the GPU machines lent to development have the driver and the
# CUDA toolkit but not ember's Debian build dependencies. Run from the repository root:
#   scripts/cuda_device_check.sh BIN_DIR FIXTURES_DIR [STAGE...]
# BIN_DIR holds ember and ember_tests (and any shared library the machine lacks, found through
# LD_LIBRARY_PATH=BIN_DIR/lib); FIXTURES_DIR is ../shared or a copy of the part the tests read.
# Stages (default: all but profile): tests server greedy bench-small bench-8b bench-batch profile. Logs go to $OUT (or
# build-cuda/device-check in the repository); the last lines printed are the summary.
set -uo pipefail
bin=$(realpath "$1")
fixtures=$(realpath "$2")
shift 2
stages=${*:-tests server greedy bench-small bench-8b bench-batch}
out=${OUT:-build-cuda/device-check}/logs
mkdir -p "$out"
trap 'tar -C "$out/.." -czf "$out/../logs.tgz" logs' EXIT
export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export EMBER_FIXTURES="$fixtures"
ember="$bin/ember"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
if ldd "$ember" | grep -q "not found"; then
  ldd "$ember" | grep "not found"
  exit 1
fi
summary=()

has() { [[ " $stages " == *" $1 "* ]]; }

if has tests; then
  # Backend-parametrized tests whose fixtures are present (the rest need ../shared in full).
  filter='*BackendOps*:BackendParity*:*FamilyReference*:*FamilyZoo*phi3*:*FamilyZoo*qwen2*'
  filter+=':*FamilyZoo*llama_rope_llama3*:*SlidingWindow*'
  # QuantZoo presets by index: f32, bf16, q8_0, q4_0, q4_k_m, q6_k.
  for i in 0 2 3 4 13 16; do filter+=":*QuantZoo.MatchesExact*/$i"; done
  "$bin/ember_tests" --gtest_filter="$filter" >"$out/tests.log" 2>&1
  rc=$?
  grep -E "^\[ (parity|family|quant-zoo) \]|FAILED|SKIPPED \]|PASSED" "$out/tests.log" | head -80
  summary+=("tests: exit $rc, $(grep -c '^\[       OK' "$out/tests.log") ok, $(grep -c '^\[  FAILED' "$out/tests.log") failed lines")
fi

if has server; then
  # The server load tests (32 concurrent streams, prefix cache, preemption; every KV block back
  # at the end) with every server they start on the GPU.
  EMBER_BINARY="$ember" EMBER_TEST_SERVE_ARGS="--backend cuda" \
    "$bin/ember_tests" --gtest_filter='ServerLoad.*' >"$out/server.log" 2>&1
  rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" "$out/server.log"
  summary+=("server load tests on cuda: exit $rc")
fi

if has greedy; then
  model="$fixtures/models/stories260K/stories260K.gguf"
  for b in cpu cuda; do
    "$ember" run -m "$model" --backend "$b" --temp 0 -n 200 -p "" >"$out/greedy_$b.txt" 2>"$out/greedy_$b.err"
  done
  if cmp -s "$out/greedy_cpu.txt" "$out/greedy_cuda.txt"; then
    summary+=("greedy stories260K: cuda text identical to cpu ($(wc -c <"$out/greedy_cuda.txt") bytes)")
  else
    summary+=("greedy stories260K: cuda text DIFFERS from cpu")
    diff "$out/greedy_cpu.txt" "$out/greedy_cuda.txt" | head -5
  fi
fi

bench() {  # name, then ember bench arguments
  local name=$1
  shift
  "$ember" bench --backend cuda --probe "$@" >"$out/bench_$name.txt" 2>&1
  cat "$out/bench_$name.txt"
  summary+=("$name: $(grep -E '^\| (pp|tg)' "$out/bench_$name.txt" | tr -s ' ' | tr '\n' ' ')")
  summary+=("$name: $(grep -o 'decode / probe [0-9]*%' "$out/bench_$name.txt")")
}

smol="$fixtures/models/smollm2-135m-instruct/config.json"
llama8b="bench/configs/llama-8b-shaped/config.json"
has bench-small && bench smollm2-bf16 -m "$smol" --dummy --dtype bf16 -p 512 -n 128 -r 3
has bench-8b && bench llama8b-bf16 -m "$llama8b" --dummy --dtype bf16 -p 4096 -n 64 -r 3 --kv-dtype f16
has bench-batch && bench llama8b-bf16-b64 -m "$llama8b" --dummy --dtype bf16 -p 0 -n 32 -b 64 -r 2 --kv-dtype f16

if has profile; then
  # GPU time per op (each launch timed alone) for an 8B-shaped prefill and decode, and whether
  # decode steps replay graphs.
  EMBER_CUDA_PROFILE=1 "$ember" bench --backend cuda -m "$llama8b" --dummy -p 4096 -n 0 -r 1 \
    --kv-dtype f16 >"$out/profile_8b_prefill.txt" 2>&1
  EMBER_CUDA_PROFILE=1 "$ember" bench --backend cuda -m "$llama8b" --dummy -p 0 -n 32 -r 1 \
    --kv-dtype f16 >"$out/profile_8b_decode.txt" 2>&1
  EMBER_CUDA_GRAPH_STATS=1 "$ember" bench --backend cuda -m "$smol" --dummy -p 0 -n 128 -r 3 \
    >"$out/graphs_smollm2.txt" 2>&1
  tail -n 25 "$out/profile_8b_prefill.txt" "$out/profile_8b_decode.txt" "$out/graphs_smollm2.txt"
fi

echo "=== summary ==="
printf '%s\n' "${summary[@]}"
