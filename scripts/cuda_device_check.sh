#!/usr/bin/env bash
# Checks and measures the CUDA backend on a GPU machine, from binaries built elsewhere with the
# cuda preset (cmake --preset cuda): the GPU machines lent to development have the driver and the
# CUDA toolkit but not ember's Debian build dependencies. Run from the repository root:
#   scripts/cuda_device_check.sh BIN_DIR FIXTURES_DIR [STAGE...]
# BIN_DIR holds ember and ember_tests (and any shared library the machine lacks, found through
# LD_LIBRARY_PATH=BIN_DIR/lib); FIXTURES_DIR is ../shared or a copy of the part the tests read.
# Stages (default: all but matvec-t1, gqa-ab, fuse-ab, pdl-ab, matvec-ab, matvec-ncu and profile):
# matvec matvec-t1 nccl tests greedy bench-small bench-8b bench-batch split-k gqa-ab fuse-ab pdl-ab
# matvec-ab matvec-ncu server profile. scripts/cuda_device_pack.sh makes BIN_DIR and FIXTURES_DIR. Logs go to $OUT (or
# build-cuda/device-check in the repository); the last lines printed are the summary. Each stage
# has a time limit, so that one hang leaves the others' results.
set -uo pipefail
bin=$(realpath "$1")
fixtures=$(realpath "$2")
shift 2
stages=${*:-matvec nccl tests greedy bench-small bench-8b bench-batch split-k server}
out=${OUT:-build-cuda/device-check}/logs
mkdir -p "$out"
trap 'tar -C "$out/.." -czf "$out/../logs.tgz" logs' EXIT
export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# NCCL (loaded at run time by --tp on cuda, through the loader's own search): which one it finds.
nccl=$(ldconfig -p | awk '/libnccl\.so\.2 /{print $NF; exit}')
export EMBER_FIXTURES="$fixtures"
# The tests read their reference data (tests/reference, tests/chat_templates) from this checkout.
export EMBER_SOURCE_DIR="$(pwd)"
ember="$bin/ember"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
if ldd "$ember" | grep -q "not found"; then
  ldd "$ember" | grep "not found"
  exit 1
fi
summary=()

has() { [[ " $stages " == *" $1 "* ]]; }

if has matvec || has matvec-t1; then
  # The decode matvec kernels alone (bench/cuda_matvec_bench.cpp): GB/s per product of an 8B and a
  # SmolLM2 decode step against the read probe, for 1, 2 and 4 rows per warp and the default; then
  # (matvec, not matvec-t1) with the early loads off, and with 2, 4 and 8 tokens.
  timeout 120 "$bin/ember_cuda_matvec_bench" >"$out/matvec_t1.txt" 2>&1
  summary+=("matvec bench (1 token): exit $?")
  if has matvec; then
    EMBER_CUDA_MATVEC_EARLY=0 timeout 120 "$bin/ember_cuda_matvec_bench" --shape 8b \
      >"$out/matvec_t1_late.txt" 2>&1
    summary+=("matvec bench (1 token, EMBER_CUDA_MATVEC_EARLY=0): exit $?")
    for t in 2 4 8; do
      timeout 120 "$bin/ember_cuda_matvec_bench" --tokens $t --shape 8b \
        >"$out/matvec_8b_t$t.txt" 2>&1
      summary+=("matvec bench ($t tokens, 8B): exit $?")
    done
  fi
  grep -hE "probe|all\*\*|DIFFERS" "$out"/matvec_*.txt
fi

if has matvec-ncu; then
  # Nsight Compute on one launch of the 8B gate/up and O products in bf16, one and the default rows
  # per warp: memory throughput, occupancy and what the warps wait on.
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for product in gate_up o; do
    for r in 1 0; do
      timeout 60 "$ncu" --clock-control none -k regex:matvec_kernel --launch-skip 3 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section MemoryWorkloadAnalysis \
        "$bin/ember_cuda_matvec_bench" --shape 8b --dtype bf16 --product $product \
        --rows-per-warp $r --reps 2 >"$out/ncu_${product}_$r.txt" 2>&1
      summary+=("ncu $product rows/warp $r: exit $?: $(grep -E "DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per" "$out/ncu_${product}_$r.txt" | tr -s ' ' | tr '\n' ';')")
    done
  done
fi

if has matvec-ab; then
  # Decode with the matvec kernels as before (one row per warp, no early loads:
  # EMBER_CUDA_MATVEC_ROWS=1 EMBER_CUDA_MATVEC_EARLY=0), with the defaults, and with the early
  # loads alone off, alternating.
  declare -A mv_env=([old]="EMBER_CUDA_MATVEC_ROWS=1 EMBER_CUDA_MATVEC_EARLY=0" [new]=""
    [late]="EMBER_CUDA_MATVEC_EARLY=0")
  mvab() {  # label, variant, ember bench arguments
    local label=$1 v=$2
    shift 2
    env ${mv_env[$v]} timeout 100 "$ember" bench --backend cuda --probe "$@" \
      >"$out/mvab_${label}_$v.txt" 2>&1
    summary+=("$label, matvec $v: $(grep -E '^\| tg' "$out/mvab_${label}_$v.txt" | tr -s ' ') $(grep -o 'decode / probe [0-9]*%' "$out/mvab_${label}_$v.txt")")
  }
  smol=(-m "$fixtures/models/smollm2-135m-instruct/config.json" --dummy -p 0 -n 128 -r 3)
  l8b=(-m bench/configs/llama-8b-shaped/config.json --dummy -p 0 -r 3 --kv-dtype f16)
  for v in old new; do mvab smol-bf16 $v "${smol[@]}" --dtype bf16; done
  for v in old new; do mvab 8b-bf16 $v "${l8b[@]}" --dtype bf16 -n 64; done
  for v in old new; do mvab 8b-q8_0 $v "${l8b[@]}" --dtype q8_0 -n 64; done
  for v in old new; do mvab 8b-q4_0 $v "${l8b[@]}" --dtype q4_0 -n 64; done
  for v in old new; do mvab 8b-bf16-b4 $v "${l8b[@]}" --dtype bf16 -n 32 -b 4; done
fi

if has nccl; then
  # Tensor parallelism's partial sums on the GPU (NCCL, loaded at run time): one GPU holds one
  # rank, so NCCL's single-rank path: a device buffer and stories260K through --tp's hooks.
  EMBER_CUDA_GRAPH_STATS=1 timeout 120 "$bin/ember_tests" --gtest_filter='DeviceAllReduce.*' \
    >"$out/nccl.log" 2>&1
  rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|Failure|skipped|error|graphs:|all_reduce" "$out/nccl.log" |
    head -30
  summary+=("nccl ($nccl): exit $rc, $(grep -c '^\[       OK' "$out/nccl.log") ok, $(grep -c '^\[  SKIPPED' "$out/nccl.log") skipped")
fi

if has tests; then
  # Backend-parametrized tests whose fixtures are present (the rest need ../shared in full).
  filter='*BackendOps*:BackendParity*:*FamilyReference*_cuda:*FamilyZoo*_cuda:*MoeZoo*_cuda'
  filter+=':DeviceAllReduce.*'
  # QuantZoo presets by index: q8_0, q4_k_m, q6_k (each also runs cpu and reference).
  for i in 3 13 16; do filter+=":*QuantZoo.MatchesExact*/$i"; done
  timeout 240 "$bin/ember_tests" --gtest_filter="$filter" >"$out/tests.log" 2>&1
  rc=$?
  grep -E "^\[ (parity|family|quant-zoo) \]|FAILED|SKIPPED \]|PASSED" "$out/tests.log" | head -80
  # The tensor-core prefill attention's f16 rounding against the f32 path (gemma2: head_dim 64).
  EMBER_CUDA_ATTENTION_TILES=0 timeout 60 "$bin/ember_tests" \
    --gtest_filter='*FamilyZoo*gemma2_cuda' >"$out/tests_tiles_off.log" 2>&1
  summary+=("FamilyZoo gemma2 on cuda without the tensor-core tiles: exit $?: $(grep -E '^\[ family' "$out/tests_tiles_off.log")")
  summary+=("tests: exit $rc, $(grep -c '^\[       OK' "$out/tests.log") ok, $(grep -c '^\[  FAILED' "$out/tests.log") failed lines")
fi

if has greedy; then
  # stories260K's greedy text, and the families whose cuda path is new: Gemma 2's sliding layers
  # in a pool of their own (two block tables per sequence), OLMoE's and Qwen2-MoE's experts.
  for model in stories260K/stories260K.gguf family-zoo/gemma2.gguf moe-zoo/olmoe.gguf \
    moe-zoo/qwen2moe.gguf; do
    name=$(basename "$model" .gguf)
    [[ -f "$fixtures/models/$model" ]] || continue
    for b in cpu cuda; do
      timeout 60 "$ember" run -m "$fixtures/models/$model" --backend "$b" --temp 0 -n 120 \
        -p "Once upon a time" >"$out/greedy_${name}_$b.txt" 2>"$out/greedy_${name}_$b.err"
    done
    # Speculation (prompt lookup, 3 guesses): verify steps of several tokens per sequence.
    timeout 60 "$ember" run -m "$fixtures/models/$model" --backend cuda --temp 0 -n 120 \
      --lookup 3 -p "Once upon a time" >"$out/greedy_${name}_lookup.txt" 2>"$out/greedy_${name}_lookup.err"
    if cmp -s "$out/greedy_${name}_cpu.txt" "$out/greedy_${name}_lookup.txt"; then
      summary+=("greedy $name: cuda --lookup 3 text identical to cpu")
    else
      summary+=("greedy $name: cuda --lookup 3 text DIFFERS from cpu")
    fi
    if cmp -s "$out/greedy_${name}_cpu.txt" "$out/greedy_${name}_cuda.txt"; then
      summary+=("greedy $name: cuda text identical to cpu ($(wc -c <"$out/greedy_${name}_cuda.txt") bytes)")
    else
      summary+=("greedy $name: cuda text DIFFERS from cpu")
      tail -3 "$out/greedy_${name}_cuda.err"
      diff "$out/greedy_${name}_cpu.txt" "$out/greedy_${name}_cuda.txt" | head -5
    fi
  done
fi

bench() {  # name, then ember bench arguments
  local name=$1
  shift
  timeout 150 "$ember" bench --backend cuda --probe "$@" >"$out/bench_$name.txt" 2>&1
  cat "$out/bench_$name.txt"
  summary+=("$name: $(grep -E '^\| (pp|tg)' "$out/bench_$name.txt" | tr -s ' ' | tr '\n' ' ')")
  summary+=("$name: $(grep -o 'decode / probe [0-9]*%' "$out/bench_$name.txt")")
}

smol="$fixtures/models/smollm2-135m-instruct/config.json"
llama8b="bench/configs/llama-8b-shaped/config.json"
has bench-small && bench smollm2-bf16 -m "$smol" --dummy --dtype bf16 -p 512 -n 128 -r 3
has bench-8b && bench llama8b-bf16 -m "$llama8b" --dummy --dtype bf16 -p 4096 -n 64 -r 3 --kv-dtype f16
has bench-batch && bench llama8b-bf16-b64 -m "$llama8b" --dummy --dtype bf16 -p 0 -n 32 -b 64 -r 2 --kv-dtype f16

if has split-k; then
  # Decode at long contexts with split-K attention and without (EMBER_CUDA_SPLIT_K=0), alternating.
  for ctx in 8192; do
    for sk in 1 0; do
      EMBER_CUDA_SPLIT_K=$sk timeout 150 "$ember" bench --backend cuda -m "$llama8b" --dummy \
        --dtype bf16 -p 0 -n 64 -r 3 --decode-context $ctx --kv-dtype f16 \
        >"$out/splitk_8b_ctx${ctx}_$sk.txt" 2>&1
    done
    for sk in 1 0; do
      summary+=("8B decode at context $ctx, split-K $sk: $(grep -E '^\| tg' "$out/splitk_8b_ctx${ctx}_$sk.txt" | tr -s ' ' | tr '\n' ' ')")
    done
  done
  for sk in 1 0; do
    EMBER_CUDA_SPLIT_K=$sk timeout 100 "$ember" bench --backend cuda -m "$smol" --dummy \
      --dtype bf16 -p 0 -n 128 -r 3 --decode-context 4096 >"$out/splitk_smol_$sk.txt" 2>&1
    summary+=("SmolLM2 decode at context 4096, split-K $sk: $(grep -E '^\| tg' "$out/splitk_smol_$sk.txt" | tr -s ' ' | tr '\n' ' ')")
  done
fi

if has gqa-ab; then
  # Decode attention with a block per GQA group (each K/V row read once for the group) and with a
  # block per query head (EMBER_CUDA_GQA_BLOCKS=0), at long contexts.
  for gb in 1 0; do
    EMBER_CUDA_GQA_BLOCKS=$gb timeout 150 "$ember" bench --backend cuda -m "$llama8b" --dummy \
      --dtype bf16 -p 0 -n 64 -r 3 --decode-context 8192 --kv-dtype f16 >"$out/gqa_8b_$gb.txt" 2>&1
    summary+=("8B decode at context 8192, EMBER_CUDA_GQA_BLOCKS=$gb: $(grep -E '^\| tg' "$out/gqa_8b_$gb.txt" | tr -s ' ' | tr '\n' ' ')")
    EMBER_CUDA_GQA_BLOCKS=$gb timeout 100 "$ember" bench --backend cuda -m "$smol" --dummy \
      --dtype bf16 -p 0 -n 128 -r 3 --decode-context 4096 >"$out/gqa_smol_$gb.txt" 2>&1
    summary+=("SmolLM2 decode at context 4096, EMBER_CUDA_GQA_BLOCKS=$gb: $(grep -E '^\| tg' "$out/gqa_smol_$gb.txt" | tr -s ' ' | tr '\n' ' ')")
  done
fi

if has fuse-ab; then
  # The decode fusions (norm into the next matvec, residual add into the previous) on and off,
  # alternating.
  for f in 1 0 1 0; do
    EMBER_CUDA_FUSE=$f timeout 60 "$ember" bench --backend cuda -m "$smol" --dummy --dtype bf16 \
      -p 0 -n 128 -r 3 >"$out/fuse_smollm2_$f.txt" 2>&1
    summary+=("SmolLM2 decode, EMBER_CUDA_FUSE=$f: $(grep -E '^\| tg' "$out/fuse_smollm2_$f.txt" | tr -s ' ' | tr '\n' ' ')")
  done
fi

if has pdl-ab; then
  # Programmatic dependent launches: none, the matvec kernels (the default) and every kernel,
  # alternating.
  for round in 1 2; do
    for p in 0 default all; do
      env $([[ $p != default ]] && echo EMBER_CUDA_PDL=$p) timeout 60 "$ember" bench --backend cuda \
        -m "$smol" --dummy --dtype bf16 -p 0 -n 128 -r 3 >"$out/pdl_smol_${p}_$round.txt" 2>&1
      summary+=("SmolLM2 decode, EMBER_CUDA_PDL=$p: $(grep -E '^\| tg' "$out/pdl_smol_${p}_$round.txt" | tr -s ' ')")
    done
  done
  for p in 0 default all; do
    env $([[ $p != default ]] && echo EMBER_CUDA_PDL=$p) timeout 100 "$ember" bench --backend cuda \
      -m "$llama8b" --dummy --dtype bf16 -p 0 -n 64 -r 3 --kv-dtype f16 >"$out/pdl_8b_$p.txt" 2>&1
    summary+=("8B decode, EMBER_CUDA_PDL=$p: $(grep -E '^\| tg' "$out/pdl_8b_$p.txt" | tr -s ' ')")
  done
fi

if has profile; then
  # GPU time per op (each launch timed alone) for decode steps, against the wall time bench
  # reports: how much of a small model's step is the GPU's and how much the host's.
  EMBER_CUDA_PROFILE=1 timeout 100 "$ember" bench --backend cuda -m "$smol" --dummy --dtype bf16 \
    -p 0 -n 64 -r 1 >"$out/profile_smollm2_decode.txt" 2>&1
  EMBER_CUDA_PROFILE=1 timeout 100 "$ember" bench --backend cuda -m "$llama8b" --dummy \
    --dtype bf16 -p 0 -n 16 -r 1 --kv-dtype f16 >"$out/profile_8b_decode.txt" 2>&1
  tail -n 16 "$out/profile_8b_decode.txt"
  EMBER_CUDA_GRAPH_STATS=1 timeout 100 "$ember" bench --backend cuda -m "$smol" --dummy \
    --dtype bf16 -p 0 -n 128 -r 3 >"$out/graphs_smollm2.txt" 2>&1
  EMBER_CUDA_FUSE=0 timeout 100 "$ember" bench --backend cuda -m "$smol" --dummy --dtype bf16 \
    -p 0 -n 128 -r 3 >"$out/nofuse_smollm2.txt" 2>&1
  tail -n 25 "$out/profile_smollm2_decode.txt" "$out/graphs_smollm2.txt" "$out/nofuse_smollm2.txt"
  summary+=("SmolLM2 decode without fusions (EMBER_CUDA_FUSE=0): $(grep -E '^\| tg' "$out/nofuse_smollm2.txt" | tr -s ' ' | tr '\n' ' ')")
fi

if has server; then
  # The server load tests (32 concurrent streams, prefix cache, preemption; every KV block back
  # at the end) with every server they start on the GPU.
  EMBER_BINARY="$ember" EMBER_TEST_SERVE_ARGS="--backend cuda" timeout 240 \
    "$bin/ember_tests" --gtest_filter='ServerLoad.*' >"$out/server.log" 2>&1
  rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" "$out/server.log"
  summary+=("server load tests on cuda: exit $rc")
fi

echo "=== summary ==="
printf '%s\n' "${summary[@]}"
