// The KV-cache capacity planner behind `ember inspect --plan`: from a model's shape, a context, a
// batch, a KV dtype, the memory on hand and the machine's read bandwidth, how many bytes the
// weights and the cache take, how many sequences fit, and the decode ceiling. Per token the cache
// holds K and V of every layer: L x 2 x n_kv_heads x head_dim elements; with grouped KV (GQA) that
// is n_heads / n_kv_heads times less than multi-head attention's, which the plan shows beside it.
// Pure arithmetic: no file, no model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ember/core/dtype.h"
#include "ember/model/model_config.h"

namespace ember {

struct CapacityPlanInput {
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t weight_bytes = 0;         // every tensor as it sits in memory
  int64_t decode_weight_bytes = 0;  // of those, what one decode step reads (all but embeddings)
  int64_t ctx = 0;                  // tokens per sequence
  int64_t batch = 1;                // sequences decoding together
  DType kv_dtype = DType::F16;      // f32, f16, bf16, q8_0, q4_0 (K, and V unless kv_dtype_v)
  std::optional<DType> kv_dtype_v;  // V's dtype when it differs from K's
  // A q4_0 K cache stored per channel in blocks of block_size tokens (the engine's default;
  // backend/kv_channel_blocks.h): 4-bit codes plus a scale and minimum per channel and block.
  // capacity_input gives a q4_0 cache the commands' default block (kChannelKBlockTokens).
  bool k_channel_scales = true;
  int64_t block_size = 16;
  int64_t sliding_window = 0;  // > 0: every layer holds at most this many positions
  // > 0: sliding-window layers interleaved with global ones (Gemma 2/3), kept in a pool of their
  // own: these many layers hold at most layer_window positions, the others the whole context.
  int64_t window_layers = 0;
  int64_t layer_window = 0;
  std::optional<int64_t> memory_bytes;          // --mem: weights + cache must fit
  std::optional<double> bandwidth_bytes_per_s;  // measured read bandwidth
};

struct CapacityPlan {
  double kv_bytes_per_token = 0;      // real shape (GQA as stored)
  double kv_bytes_per_token_mha = 0;  // the same model with n_kv_heads = n_heads
  int64_t resident_tokens = 0;        // per sequence: ctx, or the window when every layer slides
  // resident_tokens x per token; with window_layers, those layers hold only their window.
  double kv_bytes_per_sequence = 0;
  double kv_bytes_total = 0;  // x batch
  double kv_bytes_total_mha = 0;
  std::optional<int64_t> sequences_that_fit;  // with memory_bytes: (mem - weights) / per sequence
  std::optional<double> decode_tokens_per_s_batch1;  // bandwidth / (weights + one sequence's KV)
  std::optional<double> decode_tokens_per_s_batch;   // batch x bandwidth / (weights + batch x KV)
};

// Bytes a KV element takes in `dtype` (q8_0: 34 bytes per 32, q4_0: 18 per 32; a head_dim that is
// not a multiple of 32 stores groups of 16 or 8, backend/kv_row_format.h). Throws ember::Error for
// a dtype the cache cannot hold.
double kv_bytes_per_element(DType dtype);

// The model's part of the input: layers, heads, head_dim and, when every layer slides, its window
// (when some layers slide, how many and their window).
CapacityPlanInput capacity_input(const ModelConfig& config, int64_t ctx, int64_t batch,
                                 DType kv_dtype);

CapacityPlan plan_capacity(const CapacityPlanInput& input);

// "24GiB", "512MiB", "1.5GB", "4096" (bytes): a size as users write it. Throws ember::Error naming
// the text and the accepted forms.
int64_t parse_byte_size(std::string_view text);
// 262144000000 -> "262.1 GB (244.1 GiB)".
std::string format_bytes(double bytes);

}  // namespace ember
