// The capacity planner against the field guide's worked examples, and its memory and bandwidth
// arithmetic.
#include <gtest/gtest.h>

#include "ember/core/error.h"
#include "ember/kv/capacity_plan.h"

namespace ember {
namespace {

// An 80-layer model with d_model 8,192: 64 heads of 128.
CapacityPlanInput seventy_b(int64_t n_kv_heads, int64_t ctx) {
  CapacityPlanInput in;
  in.n_layers = 80;
  in.n_heads = 64;
  in.n_kv_heads = n_kv_heads;
  in.head_dim = 128;
  in.ctx = ctx;
  in.kv_dtype = DType::F16;
  return in;
}

TEST(CapacityPlan, MultiHeadKvAt100kTokensIsAbout250GB) {
  // 100,000 x 80 x 2 x 8,192 x 2 B = 262,144,000,000 B ("~250 GB" in the guide: 244 GiB).
  const CapacityPlan p = plan_capacity(seventy_b(64, 100'000));
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_token, 80.0 * 2 * 8192 * 2);
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_sequence, 262'144'000'000.0);
  EXPECT_DOUBLE_EQ(p.kv_bytes_total_mha, p.kv_bytes_total);  // MHA already
}

TEST(CapacityPlan, GroupedKvOfLlama3At32kIsTenGBNotEightyFour) {
  // Llama-3-70B's 8 KV heads x 128 at 32K tokens: 32,768 x 80 x 2 x 1,024 x 2 B = 10.7 GB; the
  // guide's 84 GB is the multi-head figure (32,000 x 80 x 2 x 8,192 x 2 B = 83.9 GB).
  const CapacityPlan p = plan_capacity(seventy_b(8, 32'768));
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_sequence, 10'737'418'240.0);
  EXPECT_DOUBLE_EQ(p.kv_bytes_total_mha, 8 * 10'737'418'240.0);
  EXPECT_DOUBLE_EQ(plan_capacity(seventy_b(64, 32'000)).kv_bytes_per_sequence, 83'886'080'000.0);
}

TEST(CapacityPlan, SequencesThatFitAndTheDecodeCeiling) {
  CapacityPlanInput in = seventy_b(8, 8192);                   // 2.68 GB of f16 KV per sequence
  in.weight_bytes = in.decode_weight_bytes = 140'000'000'000;  // 70B in bf16
  in.batch = 4;
  in.memory_bytes = 160'000'000'000;
  in.bandwidth_bytes_per_s = 400e9;
  const CapacityPlan p = plan_capacity(in);
  EXPECT_EQ(*p.sequences_that_fit, 7);  // 20 GB / 2.684 GB
  EXPECT_NEAR(*p.decode_tokens_per_s_batch1, 400e9 / (140e9 + 2'684'354'560.0), 1e-9);
  EXPECT_NEAR(*p.decode_tokens_per_s_batch, 4 * 400e9 / (140e9 + 4 * 2'684'354'560.0), 1e-9);
  // Weights alone past the memory: nothing fits.
  in.memory_bytes = 100'000'000'000;
  EXPECT_EQ(*plan_capacity(in).sequences_that_fit, 0);
}

TEST(CapacityPlan, KvDtypesAndWindows) {
  CapacityPlanInput in = seventy_b(8, 4096);
  in.kv_dtype = DType::Q8_0;
  EXPECT_DOUBLE_EQ(plan_capacity(in).kv_bytes_per_token, 80.0 * 2 * 1024 * 34 / 32);
  in.kv_dtype = DType::Q4_0;  // K per channel: 64 code bytes + 512 / 16 of scales per 128 values
  EXPECT_DOUBLE_EQ(plan_capacity(in).kv_bytes_per_token, 80.0 * 1024 * (96.0 / 128 + 18.0 / 32));
  in.k_channel_scales = false;  // q4_0's groups for K too
  EXPECT_DOUBLE_EQ(plan_capacity(in).kv_bytes_per_token, 80.0 * 2 * 1024 * 18 / 32);
  in.kv_dtype = DType::F32;
  in.sliding_window = 1024;  // every layer windowed: a sequence holds the window only
  EXPECT_EQ(plan_capacity(in).resident_tokens, 1024);
  in.kv_dtype = DType::Q4_K;
  EXPECT_THROW(plan_capacity(in), Error);
}

// Gemma-2-2B's shape (26 layers, 4 KV heads of 256, window 4096 on every other layer): at 8,192
// tokens the 13 sliding layers hold 4,096 positions, the 13 global ones 8,192.
TEST(CapacityPlan, InterleavedWindowLayersHoldOnlyTheirWindow) {
  ModelConfig c;
  c.n_layers = 26;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 256;
  c.sliding_window = 4096;
  c.sliding_window_pattern = 2;
  const CapacityPlanInput in = capacity_input(c, 8192, 2, DType::F16);
  EXPECT_EQ(in.window_layers, 13);
  EXPECT_EQ(in.layer_window, 4096);
  EXPECT_EQ(in.sliding_window, 0);
  const CapacityPlan p = plan_capacity(in);
  const double per_layer_token = 2.0 * 4 * 256 * 2;  // K + V of 4 heads of 256 in f16
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_token, 26 * per_layer_token);
  EXPECT_EQ(p.resident_tokens, 8192);
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_sequence, per_layer_token * (13 * 8192 + 13 * 4096));
  EXPECT_DOUBLE_EQ(p.kv_bytes_total, 2 * p.kv_bytes_per_sequence);
  // Below the window every layer holds the whole context.
  EXPECT_DOUBLE_EQ(plan_capacity(capacity_input(c, 2048, 1, DType::F16)).kv_bytes_per_sequence,
                   per_layer_token * 26 * 2048);
}

TEST(CapacityPlan, ByteSizes) {
  EXPECT_EQ(parse_byte_size("24GiB"), 24LL << 30);
  EXPECT_EQ(parse_byte_size("512MiB"), 512LL << 20);
  EXPECT_EQ(parse_byte_size("1.5GB"), 1'500'000'000);
  EXPECT_EQ(parse_byte_size("4096"), 4096);
  EXPECT_EQ(parse_byte_size("2tb"), 2'000'000'000'000);
  for (const char* bad : {"", "GB", "12XB", "1.2.3G", "-5G"}) {
    EXPECT_THROW(parse_byte_size(bad), Error) << bad;
  }
  EXPECT_EQ(format_bytes(262'144'000'000.0), "262.1 GB (244.1 GiB)");
}

}  // namespace
}  // namespace ember
