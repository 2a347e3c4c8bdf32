// CPU kernel micro-benchmarks at SmolLM2-135M shapes (d_model 576, d_ffn 1536, vocab 49152,
// 9 heads / 3 kv heads, head_dim 64), single-threaded, on the ISA the dispatcher picks (set
// EMBER_ISA=scalar|avx2 to compare).
//
// matmul reports weight bytes/s (the decode bound: T = 1 reads every weight once) and FLOP/s
// (2 * T * N * K; the prefill bound at T = 64). attention reports K/V bytes/s at ctx 512.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ember/backend/cpu/amx_weight_tiles.h"
#include "ember/backend/cpu/kernels.h"
#include "ember/backend/cpu/weight_layout.h"
#include "ember/backend/kv_channel_blocks.h"
#include "ember/backend/kv_row_format.h"
#include "ember/core/aligned_vector.h"
#include "ember/core/dtype.h"
#include "ember/core/half.h"
#include "ember/core/huge_pages.h"
#include "ember/core/quantize.h"

namespace {

using ember::DType;
namespace cpu = ember::cpu;

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// cpu::matmul of T tokens on wm, reporting weight bytes/s and FLOP/s.
void run_matmul(benchmark::State& state, const cpu::WeightMatrix& wm, int64_t T) {
  const int64_t K = wm.n_cols, N = wm.n_rows;
  const auto x = random_floats(T * K, 2);
  std::vector<float> y(static_cast<size_t>(T * N));
  for (auto _ : state) {
    cpu::matmul(x.data(), T, wm, y.data(), N, 0, N);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["bytes/s"] = benchmark::Counter(iters * static_cast<double>(wm.row_bytes * N),
                                                 benchmark::Counter::kIsRate);
  state.counters["FLOP/s"] =
      benchmark::Counter(iters * 2.0 * static_cast<double>(T * N * K), benchmark::Counter::kIsRate);
}

// args: dtype, K, N, T, interleaved (q8_0/q4_0: the Interleaved8 layout the loader makes).
void BM_Matmul(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t K = state.range(1), N = state.range(2), T = state.range(3);
  const auto layout =
      state.range(4) != 0 ? cpu::WeightLayout::Interleaved8 : cpu::WeightLayout::Rows;
  const int64_t row_bytes = ember::dtype_row_bytes(dtype, K);
  std::vector<uint8_t> w(static_cast<size_t>(cpu::weight_matrix_bytes(dtype, N, K, layout)));
  {
    const auto row = random_floats(K, 1);  // one row repeated: contents do not matter for speed
    for (int64_t n = 0; n < N; ++n) convert_row(row.data(), dtype, &w[n * row_bytes], K);
  }
  cpu::WeightMatrix wm{dtype, w.data(), N, K, row_bytes};
  if (layout == cpu::WeightLayout::Interleaved8) wm = cpu::interleave_rows(wm, w.data());
  run_matmul(state, wm, T);
  state.SetLabel(std::string(ember::dtype_name(dtype)) +
                 (layout == cpu::WeightLayout::Interleaved8 ? " interleaved " : " ") +
                 cpu::isa_name(cpu::active_isa()));
}

void MatmulArgs(benchmark::internal::Benchmark* b) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    for (auto [K, N] : {std::pair<int64_t, int64_t>{576, 1536}, {1536, 576}, {576, 49152}}) {
      for (int64_t T : {1, 4, 5, 6, 8, 32, 64}) {  // 5, 6: speculative verifying steps; 8: batch 8
        b->Args({static_cast<int64_t>(d), K, N, T, 0});
        if (ember::dtype_is_quantized(d)) b->Args({static_cast<int64_t>(d), K, N, T, 1});
      }
    }
  }
  b->ArgNames({"dtype", "K", "N", "T", "interleaved"});
}
BENCHMARK(BM_Matmul)->Apply(MatmulArgs)->Unit(benchmark::kMicrosecond);

// A mixture's batched decode (issue #31): T tokens through each of 96 experts' gate+up matrix
// (2,048 x 2,048: OLMoE-1B-7B's two 1,024-row projections side by side) in the Interleaved8 layout,
// 420 MB of q8_0 in huge pages: each expert is read from DRAM, as a decode step of 32 sequences
// reads nearly every expert of a layer for a few tokens each. args: dtype, T.
void BM_MatmulExperts(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t T = state.range(1), K = 2048, N = 2048, n_experts = 96;
  const auto layout = cpu::WeightLayout::Interleaved8;
  const int64_t row_bytes = ember::dtype_row_bytes(dtype, K);
  const int64_t bytes = cpu::weight_matrix_bytes(dtype, N, K, layout);
  const ember::HugePageBuffer pool(static_cast<size_t>(n_experts * bytes), /*prefault=*/true);
  std::vector<cpu::WeightMatrix> experts;
  {
    const auto row = random_floats(K, 1);  // contents do not matter for speed
    for (int64_t e = 0; e < n_experts; ++e) {
      uint8_t* w = pool.data() + e * bytes;
      for (int64_t n = 0; n < N; ++n) convert_row(row.data(), dtype, w + n * row_bytes, K);
      experts.push_back(cpu::interleave_rows(cpu::WeightMatrix{dtype, w, N, K, row_bytes}, w));
    }
  }
  const auto x = random_floats(T * K, 2);
  std::vector<float> y(static_cast<size_t>(T * N));
  for (auto _ : state) {
    for (const cpu::WeightMatrix& w : experts) {
      cpu::matmul(x.data(), T, w, y.data(), N, 0, N);
      benchmark::DoNotOptimize(y.data());
    }
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * n_experts * bytes), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(ember::dtype_name(dtype)) + " " + cpu::isa_name(cpu::active_isa()));
}
BENCHMARK(BM_MatmulExperts)
    ->ArgNames({"dtype", "T"})
    ->ArgsProduct({{static_cast<int64_t>(DType::Q8_0), static_cast<int64_t>(DType::Q4_0)},
                   {1, 2, 4, 8}})
    ->Unit(benchmark::kMillisecond);

// The prefill shapes on the AMX set (run with EMBER_ISA=avx512 to compare): bf16 in the AmxTiles
// layout the loader makes there, q8_0 / q4_0 in Interleaved8 (widened to bf16 tiles per block).
// args: dtype, K, N, T.
void BM_MatmulPrefill(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t K = state.range(1), N = state.range(2), T = state.range(3);
  const int64_t row_bytes = ember::dtype_row_bytes(dtype, K);
  const bool tiles = dtype == DType::BF16 && cpu::active_isa() == cpu::Isa::Amx;
  const auto layout =
      ember::dtype_is_quantized(dtype) ? cpu::WeightLayout::Interleaved8 : cpu::WeightLayout::Rows;
  std::vector<uint8_t> w(static_cast<size_t>(cpu::weight_matrix_bytes(dtype, N, K, layout)));
  const auto values = random_floats(N * K, 1);
  for (int64_t n = 0; n < N; ++n) convert_row(&values[n * K], dtype, &w[n * row_bytes], K);
  cpu::WeightMatrix wm{dtype, w.data(), N, K, row_bytes};
  if (layout == cpu::WeightLayout::Interleaved8) wm = cpu::interleave_rows(wm, w.data());
  ember::AlignedVector<uint8_t> packed;  // 64-byte aligned, as the loader's arena
  if (tiles) {
    packed.resize(static_cast<size_t>(cpu::amx_tiles_bytes(N, K)));
    wm = cpu::pack_amx_tiles(wm, packed.data());
  }
  const int64_t floats = cpu::prepared_activation_floats(dtype, T, K);
  ember::AlignedVector<float> xp(static_cast<size_t>(floats));
  const auto x = random_floats(T * K, 2);
  cpu::prepare_activations(dtype, x.data(), T, K, 0, T, xp.data());
  ember::AlignedVector<float> y(static_cast<size_t>(T * N));
  for (auto _ : state) {
    cpu::matmul_prepared(xp.data(), T, wm, y.data(), N, 0, N);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2.0 * static_cast<double>(T * N * K),
      benchmark::Counter::kIsRate);
  state.SetLabel(std::string(ember::dtype_name(dtype)) + " " + cpu::isa_name(cpu::active_isa()));
}

void MatmulPrefillArgs(benchmark::internal::Benchmark* b) {
  for (DType d : {DType::BF16, DType::Q8_0, DType::Q4_0}) {
    for (auto [K, N] : {std::pair<int64_t, int64_t>{576, 1536}, {1536, 576}, {576, 576}}) {
      for (int64_t T : {32, 256, 512}) b->Args({static_cast<int64_t>(d), K, N, T});
    }
    // Gemma-2-2B's MLP: down_proj's K = 9,216 makes 128 tokens' activations larger than a core's
    // L2.
    for (auto [K, N] : {std::pair<int64_t, int64_t>{2304, 9216}, {9216, 2304}}) {
      b->Args({static_cast<int64_t>(d), K, N, 128});
    }
  }
  b->ArgNames({"dtype", "K", "N", "T"});
}
BENCHMARK(BM_MatmulPrefill)->Apply(MatmulPrefillArgs)->Unit(benchmark::kMicrosecond);

// The block types beyond q8_0/q4_0 (core/quant_blocks.h), Rows layout. Their weights are random
// bytes (any bits are valid quants) with each block's f16 scale fields set to values in
// [-0.05, 0.05]: byte offsets of those fields per type.
std::vector<int> half_fields(DType dtype) {
  switch (dtype) {
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q8_1:
    case DType::Q4_K:
    case DType::Q5_K:
      return {0, 2};  // d, m (q8_1: d, s; q4_k / q5_k: d, dmin)
    case DType::Q2_K:
      return {80, 82};
    case DType::Q3_K:
      return {108};
    case DType::Q6_K:
      return {208};
    default:
      return {0};  // q5_0, iq4_nl, iq4_xs: d
  }
}

std::vector<uint8_t> random_blocks(DType dtype, int64_t N, int64_t K) {
  std::vector<uint8_t> w(static_cast<size_t>(N * ember::dtype_row_bytes(dtype, K)));
  std::mt19937 rng(1);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (size_t at = 0; at < w.size(); at += static_cast<size_t>(ember::dtype_block_bytes(dtype))) {
    for (int off : half_fields(dtype)) {
      const uint16_t h = ember::f32_to_f16(scale(rng));
      std::memcpy(&w[at + static_cast<size_t>(off)], &h, 2);
    }
  }
  return w;
}

// args: dtype, K, N, T, interleaved. Rows layout: T = 1 is decode (row dots on 8-bit
// activations), T = 64 prefill (the f32 GEMM on dequantized panels). Interleaved (q5_0, iq4_nl:
// the layout the loader makes): the integer tiles at every T.
void BM_MatmulBlockTypes(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t K = state.range(1), N = state.range(2), T = state.range(3);
  const bool interleaved = state.range(4) != 0;
  auto w = random_blocks(dtype, N, K);
  cpu::WeightMatrix wm{dtype, w.data(), N, K, ember::dtype_row_bytes(dtype, K)};
  if (interleaved) {
    w.resize(static_cast<size_t>(
        cpu::weight_matrix_bytes(dtype, N, K, cpu::WeightLayout::Interleaved8)));
    wm.data = w.data();
    wm = cpu::interleave_rows(wm, w.data());
  }
  run_matmul(state, wm, T);
  state.SetLabel(std::string(ember::dtype_name(dtype)) + (interleaved ? " interleaved " : " ") +
                 cpu::isa_name(cpu::active_isa()));
}

// The SmolLM2 FFN shapes (K x N) 576 x 1536 and 1536 x 576. Super-block types (256 values per
// block) cannot have K = 576; they run 768 x 1536 instead.
void MatmulBlockTypesArgs(benchmark::internal::Benchmark* b) {
  for (DType d : {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_1, DType::Q2_K, DType::Q3_K,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS}) {
    const int64_t k_small = ember::dtype_block_elems(d) == 256 ? 768 : 576;
    for (auto [K, N] : {std::pair<int64_t, int64_t>{k_small, 1536}, {1536, 576}}) {
      for (int64_t T : {1, 64}) {
        b->Args({static_cast<int64_t>(d), K, N, T, 0});
        if (cpu::has_interleaved_layout(d)) b->Args({static_cast<int64_t>(d), K, N, T, 1});
      }
    }
  }
  b->ArgNames({"dtype", "K", "N", "T", "interleaved"});
}
BENCHMARK(BM_MatmulBlockTypes)->Apply(MatmulBlockTypesArgs)->Unit(benchmark::kMicrosecond);

// One decode token of SmolLM2 attention over a ctx-token context in shuffled 16-token blocks, from
// an f32 or an f16 KV cache.
// The KV dtypes the attention benchmarks take as their "kv" argument.
constexpr DType kKvDtypes[] = {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::BF16};

// n_rows rows of hd values (random, from `seed`) stored as `dtype` rows (kv_row_format.h).
std::vector<uint8_t> kv_rows(int64_t n_rows, int64_t hd, DType dtype, uint32_t seed) {
  const auto values = random_floats(n_rows * hd, seed);
  const int64_t row_bytes = kv_row_bytes(dtype, hd);
  std::vector<uint8_t> rows(static_cast<size_t>(n_rows * row_bytes));
  for (int64_t r = 0; r < n_rows; ++r) {
    cpu::store_kv(values.data() + r * hd, hd, dtype, rows.data() + r * row_bytes);
  }
  return rows;
}

cpu::PagedKv paged_kv(DType dtype, int64_t bs, int64_t n_kv, int64_t hd) {
  cpu::PagedKv kv;
  kv.k_dtype = kv.v_dtype = dtype;
  kv.k_row_bytes = kv.v_row_bytes = kv_row_bytes(dtype, hd);
  kv.block_size = bs;
  kv.n_kv_heads = n_kv;
  kv.head_dim = hd;
  return kv;
}

// kv argument 5 (kKvChannel): a q4_0 cache whose K is stored per channel (kv_channel_blocks.h).
constexpr int64_t kKvChannel = static_cast<int64_t>(std::size(kKvDtypes));

// Per-channel K for n_blocks blocks of n_kv heads: sealed regions (every block's) and exact f16
// rows (what a query reads from its own block).
struct ChannelK {
  std::vector<uint8_t> regions;
  std::vector<uint16_t> exact;
  std::vector<const uint16_t*> exact_of_block;
};

ChannelK channel_k(int64_t n_blocks, int64_t n_kv, int64_t hd, int64_t bs, uint32_t seed) {
  ChannelK c;
  const auto values = random_floats(n_blocks * n_kv * bs * hd, seed);
  c.exact.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) c.exact[i] = ember::f32_to_f16(values[i]);
  const int64_t region = bs * ember::kv_channel_row_bytes(hd, bs), rows = bs * hd;
  c.regions.resize(static_cast<size_t>(n_blocks * n_kv * region));
  for (int64_t r = 0; r < n_blocks * n_kv; ++r) {
    ember::kv_channel_quantize(c.exact.data() + r * rows, hd, bs, c.regions.data() + r * region);
  }
  for (int64_t b = 0; b < n_blocks; ++b)
    c.exact_of_block.push_back(c.exact.data() + b * n_kv * rows);
  return c;
}

void attention_bench(benchmark::State& state, int64_t n_heads, int64_t n_kv, int64_t hd) {
  const int64_t ctx = state.range(0), bs = 16;
  const bool channel = state.range(1) == kKvChannel;
  const DType dtype = channel ? DType::Q4_0 : kKvDtypes[state.range(1)];
  const int64_t n_blocks = (ctx + bs - 1) / bs;
  const auto k = kv_rows(n_blocks * bs * n_kv, hd, dtype, 3);
  const auto v = kv_rows(n_blocks * bs * n_kv, hd, dtype, 4);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(5));
  cpu::PagedKv kv = paged_kv(dtype, bs, n_kv, hd);
  kv.k_pool = k.data();
  kv.v_pool = v.data();
  const ChannelK ck = channel ? channel_k(n_blocks, n_kv, hd, bs, 3) : ChannelK{};
  if (channel) {
    kv.k_channel = true;
    kv.k_row_bytes = ember::kv_channel_row_bytes(hd, bs);
    kv.k_pool = ck.regions.data();
    kv.k_exact = ck.exact_of_block.data();
  }
  const auto q = random_floats(n_heads * hd, 6);
  std::vector<float> out(static_cast<size_t>(n_heads * hd));
  for (auto _ : state) {
    cpu::attention(q.data(), n_heads, kv, table.data(), ctx, 0.125f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["bytes/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2.0 * ctx * n_kv * kv.k_row_bytes,
      benchmark::Counter::kIsRate);
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())) + " " + dtype_name(dtype) +
                 (channel ? " K per channel" : ""));
}
// SmolLM2's attention: 9 query heads over 3 kv heads (GQA groups of 3), head_dim 64.
void BM_Attention(benchmark::State& state) {
  attention_bench(state, 9, 3, 64);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"ctx", "kv"})
    ->ArgsProduct({{512, 8192, 65536}, {0, 1, 2, 3, 4, 5}})  // 65536: 100 MB of f32 K/V, from DRAM
    ->Unit(benchmark::kMicrosecond);

// Llama-3-8B's groups of 4 and Llama-3-70B's of 8 (2 kv heads' worth of their query heads),
// head_dim 128: grouped on AVX-512 (8 as two passes of 4), 2 at a time on AVX2.
void BM_AttentionGroups(benchmark::State& state) {
  attention_bench(state, 2 * state.range(2), 2, 128);
}
BENCHMARK(BM_AttentionGroups)
    ->ArgNames({"ctx", "kv", "group"})
    ->ArgsProduct({{8192}, {1, 2, 3, 5}, {4, 8}})
    ->Unit(benchmark::kMicrosecond);

// A batched decode step's attention: 32 sequences of `ctx` tokens, one decode token each, over all
// 30 SmolLM2 layers (283 MB of f32 K/V at ctx 192: from DRAM, as in the engine), each sequence's
// blocks scattered over the pool; the next sequence's first blocks are hinted as the engine does.
void BM_AttentionBatch(benchmark::State& state) {
  const int64_t ctx = state.range(0), n_heads = 9, n_kv = 3, hd = 64, bs = 16;
  const int64_t n_seqs = 32, n_layers = state.range(3);
  const bool channel = state.range(1) == kKvChannel;
  const DType dtype = channel ? DType::Q4_0 : kKvDtypes[state.range(1)];
  const bool hint = state.range(2) != 0;
  const int64_t seq_blocks = (ctx + bs - 1) / bs, n_blocks = n_seqs * seq_blocks;
  const int64_t layer_rows = n_blocks * bs * n_kv;
  cpu::PagedKv kv = paged_kv(dtype, bs, n_kv, hd);
  // Per-channel K (kv argument 5): sealed regions, k_row_bytes apart per row; a query reads its own
  // block's exact f16 rows, here those of the first block's for every block (contents do not
  // matter for speed).
  ChannelK ck;
  if (channel) {
    ck = channel_k(1, n_kv, hd, bs, 3);
    ck.exact_of_block.assign(static_cast<size_t>(n_blocks), ck.exact.data());
    kv.k_channel = true;
    kv.k_row_bytes = ember::kv_channel_row_bytes(hd, bs);
    kv.k_exact = ck.exact_of_block.data();
  }
  const int64_t k_layer_bytes = layer_rows * kv.k_row_bytes,
                v_layer_bytes = layer_rows * kv.v_row_bytes;
  // In huge pages, as the engine's pool (host_kv_storage.h): a block per 4 KiB page would add a
  // TLB miss to every block read.
  const ember::HugePageBuffer k(static_cast<size_t>(n_layers * k_layer_bytes), /*prefault=*/true),
      v(static_cast<size_t>(n_layers * v_layer_bytes), /*prefault=*/true);
  {
    const auto rows = kv_rows(layer_rows, hd, dtype, 3);
    for (int64_t l = 0; l < n_layers; ++l) {
      std::memcpy(v.data() + l * v_layer_bytes, rows.data(), rows.size());
      if (!channel) {
        std::memcpy(k.data() + l * k_layer_bytes, rows.data(), rows.size());
        continue;
      }
      const int64_t region = bs * kv.k_row_bytes;  // one block of one kv head
      for (int64_t r = 0; r < n_blocks * n_kv; ++r) {
        std::memcpy(k.data() + l * k_layer_bytes + r * region,
                    ck.regions.data() + (r % n_kv) * region, static_cast<size_t>(region));
      }
    }
  }
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(5));
  const auto q = random_floats(n_seqs * n_heads * hd, 6);
  std::vector<float> out(static_cast<size_t>(n_seqs * n_heads * hd));
  for (auto _ : state) {
    for (int64_t l = 0; l < n_layers; ++l) {
      kv.k_pool = k.data() + l * k_layer_bytes;
      kv.v_pool = v.data() + l * v_layer_bytes;
      for (int64_t s = 0; s < n_seqs; ++s) {
        if (hint && s + 1 < n_seqs) {
          cpu::prefetch_kv_context(kv, table.data() + (s + 1) * seq_blocks, ctx, 0);
        }
        cpu::attention_tokens(q.data() + s * n_heads * hd, 1, 0, n_heads, kv,
                              table.data() + s * seq_blocks, ctx, 0.125f,
                              out.data() + s * n_heads * hd, 0, 0, n_kv);
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["bytes/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * n_layers * n_seqs * ctx * n_kv *
                             (kv.k_row_bytes + kv.v_row_bytes),
                         benchmark::Counter::kIsRate);
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())) + " " + dtype_name(dtype) +
                 (channel ? " K per channel" : ""));
}
BENCHMARK(BM_AttentionBatch)
    ->ArgNames({"ctx", "kv", "hint", "layers"})
    ->Args({192, 0, 0, 30})
    ->Args({192, 0, 0, 1})
    ->Args({192, 1, 0, 1})
    ->Args({192, 0, 1, 30})
    ->Args({192, 1, 0, 30})
    ->Args({192, 1, 1, 30})
    ->Args({192, 2, 1, 30})
    ->Args({192, 3, 1, 30})
    // Long contexts from DRAM (0.4-0.8 GB): f16, q8_0, q4_0 take the same time there.
    ->Args({8192, 1, 1, 2})
    ->Args({8192, 2, 1, 2})
    ->Args({8192, 3, 1, 2})
    ->Args({8192, 5, 1, 2})  // q4_0 with K per channel, the q4_0 default
    ->Unit(benchmark::kMillisecond);

// The elementwise kernels of one layer at T = 64 tokens.
void BM_RmsnormRopeSilu(benchmark::State& state) {
  const int64_t T = 64, D = 576, F = 1536;
  auto x = random_floats(T * D, 7);
  const auto w = random_floats(D, 8);
  const auto g = random_floats(T * F, 9), u = random_floats(T * F, 10);
  std::vector<float> y(x.size()), h(g.size());
  std::vector<int32_t> pos(T);
  std::iota(pos.begin(), pos.end(), 100);
  std::vector<float> inv_freq(32);
  for (int i = 0; i < 32; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / 64.0f);
  for (auto _ : state) {
    cpu::rmsnorm(x.data(), w.data(), y.data(), T, D, 1e-5f);
    cpu::rope(y.data(), T, 9, 64, 64, pos.data(), inv_freq.data());
    cpu::silu_mul(g.data(), u.data(), h.data(), T * F);
    benchmark::DoNotOptimize(h.data());
  }
  state.SetLabel(cpu::isa_name(cpu::active_isa()));
}
BENCHMARK(BM_RmsnormRopeSilu)->Unit(benchmark::kMicrosecond);

}  // namespace
