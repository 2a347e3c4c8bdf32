// Run-time dispatch of the CPU kernels. The ISA is chosen once from CPUID (and EMBER_ISA), then
// every call goes through one table of function pointers. force_isa() swaps the table, for tests.
// No -march flags are needed for the build: each ISA's code carries function-level target
// attributes and is only reached through this dispatcher after the CPU check.
#include "ember/backend/cpu/kernels.h"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "ember/backend/cpu/amx_kernels.h"
#include "ember/backend/cpu/amx_support.h"
#include "ember/backend/cpu/amx_weight_tiles.h"
#include "ember/backend/cpu/kernels_isa.h"
#include "ember/backend/cpu/weight_layout.h"
#include "ember/core/aligned_vector.h"
#include "ember/core/half.h"

namespace ember::cpu {
namespace {

constexpr KernelTable kScalarTable = {
    Isa::Scalar,
    scalar::matmul,
    scalar::rmsnorm,
    scalar::rope,
    scalar::softmax,
    scalar::silu_mul,
    scalar::gelu_mul,
    scalar::add_inplace,
    scalar::store_kv,
    scalar::dequantize_row,
    scalar::attention_tokens,
    scalar::attention_segment,
    scalar::quantize_activations,
    scalar::matmul_q8,
    scalar::prepared_activation_floats,
    scalar::prepare_activations,
    scalar::matmul_prepared,
};

constexpr KernelTable kAvx2Table = {
    Isa::Avx2,
    avx2::matmul,
    avx2::rmsnorm,
    avx2::rope,
    avx2::softmax,
    avx2::silu_mul,
    avx2::gelu_mul,
    avx2::add_inplace,
    avx2::store_kv,
    avx2::dequantize_row,
    avx2::attention_tokens,
    avx2::attention_segment,
    avx2::quantize_activations,
    avx2::matmul_q8,
    avx2::prepared_activation_floats,
    avx2::prepare_activations,
    avx2::matmul_prepared,
};

// AVX-512 bf16 and int8 matmuls and attention steps, the AVX2 kernels for the rest (they run on
// any AVX-512 CPU).
constexpr KernelTable kAvx512Table = {
    Isa::Avx512,
    avx512::matmul,
    avx2::rmsnorm,
    avx2::rope,
    avx2::softmax,
    avx2::silu_mul,
    avx2::gelu_mul,
    avx2::add_inplace,
    avx2::store_kv,
    avx2::dequantize_row,
    avx512::attention_tokens,
    avx512::attention_segment,
    avx2::quantize_activations,
    avx512::matmul_q8,
    avx512::prepared_activation_floats,
    avx512::prepare_activations,
    avx512::matmul_prepared,
};

// The AVX-512 set with the matmuls on AMX tiles (amx_kernels.h).
constexpr KernelTable kAmxTable = {
    Isa::Amx,
    amx::matmul,
    avx2::rmsnorm,
    avx2::rope,
    avx2::softmax,
    amx::silu_mul,
    amx::gelu_mul,
    avx2::add_inplace,
    avx2::store_kv,
    avx2::dequantize_row,
    amx::attention_tokens,
    avx512::attention_segment,
    avx2::quantize_activations,
    avx512::matmul_q8,
    amx::prepared_activation_floats,
    amx::prepare_activations,
    amx::matmul_prepared,
};

// F16C (CPUID.1:ECX bit 29) read directly: clang 14's __builtin_cpu_supports does not know it.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  // Everything EMBER_AVX512_TARGET names: Sapphire Rapids, Cooper Lake, AMD Zen 4 and later.
  // Skylake-X / Ice Lake (no BF16) run the AVX2 set.
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bf16") &&
         __builtin_cpu_supports("avx512vnni");
}

// The table for `wanted`, or the best one below it that this CPU can run. A CPU with AMX tiles that
// cannot use them (no OS support or permission) says why once, forced or not.
const KernelTable* resolve(Isa wanted, bool forced) {
  if (wanted == Isa::Amx) {
    if (cpu_has_avx512() && amx_available()) return &kAmxTable;
    static std::atomic<bool> said{false};
    const bool cpu_has_tiles = cpu_has_amx_tiles();
    if ((forced || cpu_has_tiles) && !said.exchange(true)) {
      std::fprintf(stderr, "ember: AMX unavailable (%s); using %s kernels\n",
                   cpu_has_avx512() ? amx_unavailable_reason().c_str() : "this CPU lacks AVX-512",
                   cpu_has_avx512() ? "avx512" : (cpu_has_avx2() ? "avx2" : "scalar"));
    }
    wanted = Isa::Avx512;
    forced = false;
  }
  if (wanted == Isa::Avx512) {
    if (cpu_has_avx512()) return &kAvx512Table;
    if (forced) {
      std::fprintf(stderr,
                   "ember: this CPU lacks AVX-512 (F/BW/VL/DQ/BF16/VNNI); using %s kernels\n",
                   cpu_has_avx2() ? "avx2" : "scalar");
    }
    wanted = Isa::Avx2;
  }
  if (wanted == Isa::Avx2) {
    if (cpu_has_avx2()) return &kAvx2Table;
    if (forced) std::fprintf(stderr, "ember: this CPU lacks AVX2/FMA/F16C; using scalar kernels\n");
  }
  return &kScalarTable;
}

// EMBER_ISA=scalar|avx2|avx512|amx if set (read once), else the best the CPU supports.
const KernelTable* initial_table() {
  const char* env = std::getenv("EMBER_ISA");
  if (env != nullptr && *env != '\0') {
    const std::string_view v(env);
    if (v == "scalar") return resolve(Isa::Scalar, true);
    if (v == "avx2") return resolve(Isa::Avx2, true);
    if (v == "avx512") return resolve(Isa::Avx512, true);
    if (v == "amx") return resolve(Isa::Amx, true);
    std::fprintf(stderr, "ember: unknown EMBER_ISA=%s (want scalar|avx2|avx512|amx); ignoring it\n",
                 env);
  }
  return resolve(Isa::Amx, false);
}

std::atomic<const KernelTable*>& table_slot() {
  static std::atomic<const KernelTable*> slot{initial_table()};
  return slot;
}

inline const KernelTable& table() {
  return *table_slot().load(std::memory_order_relaxed);
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
    case Isa::Amx:
      return "amx";
  }
  return "?";
}

Isa active_isa() {
  return table().isa;
}

void force_isa(Isa isa) {
  table_slot().store(resolve(isa, true), std::memory_order_relaxed);
}

// An AmxTiles matrix (made while the AMX set was active) under another set, which reads only the
// Rows layout: rows [0, row_end) unpacked into a per-thread copy. Slow; only tests that switch the
// kernel set after loading reach it.
namespace {

WeightMatrix rows_copy(const WeightMatrix& w, int64_t row_end) {
  thread_local AlignedVector<uint8_t> rows;
  const auto bytes = static_cast<size_t>(row_end * w.row_bytes);
  if (rows.size() < bytes) rows.resize(bytes);
  for (int64_t r = 0; r < row_end; ++r) rows_layout_row(w, r, rows.data() + r * w.row_bytes);
  WeightMatrix copy = w;
  copy.data = rows.data();
  copy.layout = WeightLayout::Rows;
  return copy;
}

bool needs_rows_copy(const WeightMatrix& w) {
  return w.layout == WeightLayout::AmxTiles && table().isa != Isa::Amx;
}

}  // namespace

MatmulInput matmul_input(const WeightMatrix& w, int64_t T) {
  if (table().isa == Isa::Amx) return amx::matmul_input(w, T);
  if (uses_8bit_activations(w, T)) return MatmulInput::Q8;
  return w.dtype == DType::BF16 ? MatmulInput::Bf16 : MatmulInput::F32;
}

int64_t attention_tile_tokens() {
  return table().isa == Isa::Amx ? 32 : 8;
}

bool matmul_runs_on_tiles(const WeightMatrix& w, int64_t T) {
  return table().isa == Isa::Amx && amx::runs_on_tiles(w, T);
}

void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end) {
  // Each ISA's matmul covers every dtype itself (8-bit activations for quantized weights below
  // kGemmMinTokens included).
  if (needs_rows_copy(w)) {
    return table().matmul(x, T, rows_copy(w, row_end), y, ldy, row_begin, row_end);
  }
  table().matmul(x, T, w, y, ldy, row_begin, row_end);
}

int64_t prepared_activation_floats(DType dtype, int64_t T, int64_t K) {
  return table().prepared_activation_floats(dtype, T, K);
}

void prepare_activations(DType dtype, const float* x, int64_t T, int64_t K, int64_t token_begin,
                         int64_t token_end, float* xp) {
  table().prepare_activations(dtype, x, T, K, token_begin, token_end, xp);
}

void matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t row_begin, int64_t row_end) {
  if (needs_rows_copy(w)) {
    return table().matmul_prepared(xp, T, rows_copy(w, row_end), y, ldy, row_begin, row_end);
  }
  table().matmul_prepared(xp, T, w, y, ldy, row_begin, row_end);
}

void quantize_activations(const float* x, int64_t T, int64_t K, BlockQ8Act* out) {
  table().quantize_activations(x, T, K, out);
}

void matmul_q8(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
               int64_t row_begin, int64_t row_end) {
  table().matmul_q8(xq, T, w, y, ldy, row_begin, row_end);
}

void rmsnorm(const float* x, const float* weight, float* y, int64_t T, int64_t D, float eps) {
  table().rmsnorm(x, weight, y, T, D, eps);
}

void rope(float* x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
          const int32_t* positions, const float* inv_freq) {
  table().rope(x, T, n_heads, head_dim, rope_dim, positions, inv_freq);
}

void softmax(float* x, int64_t n) {
  table().softmax(x, n);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  table().silu_mul(gate, up, out, n);
}

void gelu_mul(const float* gate, const float* up, float* out, int64_t n) {
  table().gelu_mul(gate, up, out, n);
}

void add_inplace(float* y, const float* x, int64_t n) {
  table().add_inplace(y, x, n);
}

void store_kv(const float* x, int64_t n, DType dtype, void* out) {
  table().store_kv(x, n, dtype, out);
}

void dequantize_row(const WeightMatrix& table_w, int64_t row, float* out) {
  if (table_w.layout == WeightLayout::AmxTiles) {  // a tied bf16 embedding packed for the tiles
    thread_local std::vector<uint16_t> values;
    values.resize(static_cast<size_t>(table_w.n_cols));
    amx_tiles_row(table_w, row, reinterpret_cast<uint8_t*>(values.data()));
    for (int64_t k = 0; k < table_w.n_cols; ++k) out[k] = bf16_to_f32(values[k]);
    return;
  }
  table().dequantize_row(table_w, row, out);
}

void attention(const float* q, int64_t n_heads, const PagedKv& kv, const int32_t* block_table,
               int64_t ctx_len, const AttentionScores& scores, float* out) {
  table().attention_tokens(q, 1, 0, n_heads, kv, block_table, ctx_len, scores, out, 0, 0,
                           kv.n_kv_heads);
}

void attention_kv_heads(const float* q, int64_t n_heads, const PagedKv& kv,
                        const int32_t* block_table, int64_t ctx_len, const AttentionScores& scores,
                        float* out, int64_t kv_head_begin, int64_t kv_head_end) {
  table().attention_tokens(q, 1, 0, n_heads, kv, block_table, ctx_len, scores, out, 0,
                           kv_head_begin, kv_head_end);
}

void attention_tokens(const float* q, int64_t nt, int64_t q_stride, int64_t n_heads,
                      const PagedKv& kv, const int32_t* block_table, int64_t ctx0,
                      const AttentionScores& scores, float* out, int64_t out_stride,
                      int64_t kv_head_begin, int64_t kv_head_end) {
  table().attention_tokens(q, nt, q_stride, n_heads, kv, block_table, ctx0, scores, out, out_stride,
                           kv_head_begin, kv_head_end);
}

int64_t attention_segment_keys(int64_t block_size) {
  // A whole number of every kernel's softmax steps (the AVX2 kernel's: whole blocks of at least
  // kAttentionStepMinKeys), at least 1,024 keys: long enough that a segment's fold is noise next to
  // its keys.
  const int64_t step = std::max<int64_t>(1, kAttentionStepMinKeys / block_size) * block_size;
  return (1024 + step - 1) / step * step;
}

void fold_attention_state(float* acc, float* m, float* l, const float* segment_acc, float segment_m,
                          float segment_l, int64_t hd) {
  if (segment_m == -INFINITY) return;  // the segment saw no key (behind a window, past ctx)
  if (*m == -INFINITY) {
    std::copy(segment_acc, segment_acc + hd, acc);
    *m = segment_m;
    *l = segment_l;
    return;
  }
  const float top = std::max(*m, segment_m);
  const float a = std::exp(*m - top), b = std::exp(segment_m - top);
  for (int64_t d = 0; d < hd; ++d) acc[d] = acc[d] * a + segment_acc[d] * b;
  *l = *l * a + segment_l * b;
  *m = top;
}

void attention_segment(const float* q, int64_t n_heads, const PagedKv& kv,
                       const int32_t* block_table, int64_t ctx_len, const AttentionScores& scores,
                       int64_t kv_head_begin, int64_t kv_head_end, int64_t segment,
                       float* partial) {
  table().attention_segment(q, n_heads, kv, block_table, ctx_len, scores, kv_head_begin,
                            kv_head_end, segment, partial);
}

void prefetch_kv_context(const PagedKv& kv, const int32_t* block_table, int64_t ctx_len,
                         int64_t kv_head) {
  const int64_t end = std::min(ctx_len, kPrefetchContextKeys);
  for (int64_t pos = 0; pos < end; pos += kv.block_size) {
    const int64_t rows = std::min(kv.block_size, end - pos);
    const int32_t block = block_table[pos / kv.block_size];
    if (block < 0) continue;  // behind a sliding window, back in the pool
    const int64_t at = kv.row_index(block, 0, kv_head);
    const uint8_t* k = kv.k_row(at);
    const uint8_t* v = kv.v_row(at);
    for (int64_t i = 0; i < rows * kv.k_row_bytes; i += 64) __builtin_prefetch(k + i, 0, 2);
    for (int64_t i = 0; i < rows * kv.v_row_bytes; i += 64) __builtin_prefetch(v + i, 0, 2);
  }
}

}  // namespace ember::cpu
