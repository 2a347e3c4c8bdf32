// Per-channel K blocks: how a q4_0 K cache stores K by default (KvShape::k_channel_scales; KIVI,
// Liu et al. 2024). K has outlier channels (a few of head_dim much larger than the rest, the same
// ones at every token), so one scale per token's row (q4_0's groups along head_dim) leaves the
// small channels almost no levels; one scale per channel across the tokens of a block fits each.
//
// A block's tokens arrive one step at a time, and a channel's scale depends on all of them, so a
// block is quantized once, when it is sealed (its sequence has moved past it): until then its rows
// are kept exact (f16, KIVI's full-precision residual), and a query reads its own block's keys from
// those exact rows and every earlier block's from the quantized ones. What a query sees therefore
// depends only on its position, not on how the steps were cut (prefill chunks, decode, speculative
// verification): the backends' attention follows that rule and HostKvStorage keeps the books.
//
// One (block, kv head) region of block_size rows of head_dim values, kv_channel_row_bytes() per row
// on average:
//   f16 scale[head_dim], f16 min[head_dim], then the codes as head_dim / 8 columns of block_size
//   4-byte words, padding. Word (j, r) at byte 4 (j block_size + r) of the codes holds row r's
//   channels 4j..4j+3 in its bytes' low nibbles and channels head_dim / 2 + 4j.. in their high
//   ones (kv_channel_code). value = fma(scale[c], code, min[c]) in f32, code in [0, 15]
//   (asymmetric: a channel's range, not its largest magnitude, is cut in 15 steps).
// Columns, not rows: a 512-bit load of one column is 16 keys' codes for 8 channels, the operand of
// one vpdpbusd per query part (kv_channel_query.h scores the keys in integers, keys in lanes).
// On stories260K (head_dim 8) this is what brings a 4-bit K cache's mean KL from 0.42 to ~1e-3.
#pragma once

#include <cstdint>
#include <string>

#include "ember/core/dtype.h"

namespace ember {

// Tokens per KV block where none is asked for (the commands' --block-size default): a
// per-channel block pays its query fold once per block, so longer blocks cost less per key
// (engine/model_runner.h: default_kv_block_size).
inline constexpr int64_t kChannelKBlockTokens = 64;

// Average bytes of one row (the region is block_size times this): head_dim / 2 codes plus the
// block's 4 * head_dim bytes of scales and minimums spread over its rows, rounded up to even.
int64_t kv_channel_row_bytes(int64_t head_dim, int64_t block_size);
// Why a K cache of `k_dtype` cannot use per-channel blocks of this shape ("" when it can): only
// q4_0 K, head_dim a multiple of 8 and at most 512, at least 2 tokens per block.
std::string kv_channel_problem(DType k_dtype, int64_t head_dim, int64_t block_size);
// Blocks of a pool of n_blocks whose exact K rows (f16) a storage keeps beyond those written in the
// last two steps (the least recently written go first).
inline int64_t kv_channel_exact_blocks_cap(int64_t n_blocks) {
  return 64 + n_blocks / 64;
}

// Seals one region: the exact rows [block_size, head_dim] (f16) quantized per channel.
void kv_channel_quantize(const uint16_t* rows, int64_t head_dim, int64_t block_size,
                         uint8_t* region);
// Row `slot` of a sealed region back to f32: out [head_dim].
void kv_channel_read_row(const uint8_t* region, int64_t slot, int64_t head_dim, int64_t block_size,
                         float* out);

// The codes of a region (after the scales and minimums).
inline const uint8_t* kv_channel_codes(const uint8_t* region, int64_t head_dim) {
  return region + 4 * head_dim;
}
// Row `slot`'s code of channel c in a region of block_size rows.
inline int kv_channel_code(const uint8_t* region, int64_t slot, int64_t c, int64_t head_dim,
                           int64_t block_size) {
  const int64_t half = head_dim / 2, lane = c % half;
  const uint8_t byte =
      kv_channel_codes(region, head_dim)[4 * (lane / 4 * block_size + slot) + lane % 4];
  return c < half ? byte & 0x0F : byte >> 4;
}

}  // namespace ember
