// PagedKv::read_k (kernels.h): one key as f32, for the row-at-a-time readers (the scalar kernels,
// the reference backend).
#include <algorithm>

#include "ember/backend/cpu/kernels.h"
#include "ember/backend/kv_channel_blocks.h"
#include "ember/backend/kv_row_format.h"
#include "ember/core/half.h"

namespace ember::cpu {

const float* PagedKv::read_k(int64_t block, int64_t pos, int64_t query_pos, int64_t kv_head,
                             float* out) const {
  const int64_t slot = pos % block_size;
  if (!k_channel) {
    const uint8_t* row = k_row(row_index(block, slot, kv_head));
    if (k_dtype == DType::F32) return reinterpret_cast<const float*>(row);
    kv_read_row(row, head_dim, k_dtype, out);
    return out;
  }
  if (pos / block_size == query_pos / block_size) {
    const uint16_t* exact = k_exact_rows(block, kv_head) + slot * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) out[d] = f16_to_f32(exact[d]);
    return out;
  }
  kv_channel_read_row(k_region(block, kv_head), slot, head_dim, block_size, out);
  return out;
}

}  // namespace ember::cpu
