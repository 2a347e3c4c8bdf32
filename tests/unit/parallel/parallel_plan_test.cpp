// The parallel planner (parallel/parallel_plan.h): the guide's worked KV examples split over
// ranks, weights per rank, the shape checks, the link syntax, and its time model on a case small
// enough to work out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/core/error.h"
#include "ember/parallel/parallel_plan.h"

namespace ember {
namespace {

// An 80-layer model with d_model 8,192 (64 heads of 128, d_ffn 28,672, vocab 128,256), f16 KV:
// bf16 weights of a Llama-3-70B shape, 1 GB of layer norms left out.
ParallelPlanInput seventy_b(int64_t n_kv_heads, int64_t ctx, int tp, int pp) {
  ParallelPlanInput in;
  in.model.n_layers = 80;
  in.model.n_heads = 64;
  in.model.n_kv_heads = n_kv_heads;
  in.model.head_dim = 128;
  in.model.ctx = ctx;
  in.model.kv_dtype = DType::F16;
  in.d_model = 8192;
  in.d_ffn = 28672;
  in.vocab = 128256;
  in.layer_bytes = 80LL * 2 * (8192LL * 8192 * 2 + 8192LL * 1024 * 2 + 3 * 8192LL * 28672);
  in.embed_bytes = 128256LL * 8192 * 2;
  in.lm_head_bytes = in.embed_bytes;
  in.tp = tp;
  in.pp = pp;
  return in;
}

TEST(ParallelPlan, TheGuidesLongSequenceSplitsItsKvOverTheRanks) {
  // One 100,000-token sequence of the multi-head 80-layer model: 262 GB of KV ("~250 GB"); over
  // 8 tensor ranks each holds 8 of the 64 heads: 32.8 GB; over 4 stages each 20 layers: 65.5 GB.
  ParallelPlan tp8 = plan_parallel(seventy_b(64, 100'000, 8, 1));
  EXPECT_EQ(tp8.kv_heads_per_rank, 8);
  EXPECT_DOUBLE_EQ(tp8.stages[0].kv_bytes_per_sequence_per_rank, 262'144'000'000.0 / 8);
  ParallelPlan pp4 = plan_parallel(seventy_b(64, 100'000, 1, 4));
  ASSERT_EQ(pp4.stages.size(), 4u);
  for (const StagePlan& s : pp4.stages) {
    EXPECT_EQ(s.n_layers, 20);
    EXPECT_DOUBLE_EQ(s.kv_bytes_per_sequence_per_rank, 262'144'000'000.0 / 4);
  }
  EXPECT_EQ(pp4.stages[3].first_layer, 60);
  // Llama-3's 8 KV heads at 32K: 10.7 GB per sequence, 1.34 GB per rank at tp 8; at tp 16 a KV
  // head lives on two ranks, so a rank holds one head, as at tp 8.
  ParallelPlan gqa = plan_parallel(seventy_b(8, 32'768, 8, 1));
  EXPECT_DOUBLE_EQ(gqa.stages[0].kv_bytes_per_sequence_per_rank, 32'768.0 * 80 * 2 * 128 * 2);
  ParallelPlan replicated = plan_parallel(seventy_b(8, 32'768, 16, 1));
  EXPECT_TRUE(replicated.kv_heads_replicated);
  EXPECT_EQ(replicated.kv_heads_per_rank, 1);
  EXPECT_DOUBLE_EQ(replicated.stages[0].kv_bytes_per_sequence_per_rank,
                   gqa.stages[0].kv_bytes_per_sequence_per_rank);
}

TEST(ParallelPlan, WeightsPerRankAndTheirCommunication) {
  const ParallelPlanInput in = seventy_b(8, 8192, 4, 2);
  const ParallelPlan p = plan_parallel(in);
  const double layers_half = static_cast<double>(in.layer_bytes) / 2 / 4;
  // The first stage holds the embedding's quarter, the last the lm_head's.
  EXPECT_DOUBLE_EQ(p.stages[0].weight_bytes_per_rank, layers_half + in.embed_bytes / 4.0);
  EXPECT_DOUBLE_EQ(p.stages[1].weight_bytes_per_rank, layers_half + in.lm_head_bytes / 4.0);
  // Two all-reduces of d_model f32 per layer; a ring of 4 sends 2 x 3/4 of each per rank.
  EXPECT_EQ(p.stages[0].all_reduces_per_step, 80);
  EXPECT_EQ(p.all_reduces_per_step, 160);
  EXPECT_DOUBLE_EQ(p.all_reduce_bytes_per_token, 32768.0);
  EXPECT_DOUBLE_EQ(p.sent_bytes_per_token_per_rank, 80 * 1.5 * 32768.0 + 32768.0);
  // A tied table on one stage is held once; on two, the last stage keeps its own copy.
  ParallelPlanInput tied = seventy_b(8, 8192, 2, 1);
  tied.tied_embeddings = true;
  tied.lm_head_bytes = 0;
  EXPECT_DOUBLE_EQ(plan_parallel(tied).stages[0].weight_bytes_per_rank,
                   tied.layer_bytes / 2.0 + tied.embed_bytes / 2.0);
  tied.pp = 2;
  EXPECT_DOUBLE_EQ(plan_parallel(tied).stages[1].weight_bytes_per_rank,
                   tied.layer_bytes / 4.0 + tied.embed_bytes / 2.0);
}

// Two layers, d_model 1,024, tp 2 over a 1 GB/s link with 1 us latency, each rank streaming
// 1 MB per step at 1 GB/s (1 ms): four all-reduces of 4 KiB (2 us + 4.096 us each) and the
// sampled token's all-gather (1 us + 4 ns).
TEST(ParallelPlan, TheTimeModelByHand) {
  ParallelPlanInput in;
  in.model.n_layers = 2;
  in.model.n_heads = 8;
  in.model.n_kv_heads = 8;
  in.model.head_dim = 128;
  in.model.ctx = 1;
  in.model.batch = 1;
  in.model.kv_dtype = DType::F16;
  in.model.bandwidth_bytes_per_s = 1e9;
  in.d_model = 1024;
  in.d_ffn = 4096;
  in.layer_bytes = 2'000'000 - 2 * 2 * 1024 * 2;  // + a rank's half of the 1-token KV: 1 MB
  in.vocab = 1000;
  in.tp = 2;
  in.link = {1e9, 1e-6};
  const ParallelPlan p = plan_parallel(in);
  // 4 all-reduces of 4 KiB, then the logits' gather: half of 4,000 bytes from the other rank.
  const double comm = 4 * (2e-6 + 4.096e-6) + (1e-6 + 2e-6);
  EXPECT_NEAR(*p.decode_tokens_per_s_batch1, 1.0 / (1e-3 + comm), 1e-6);
  EXPECT_NEAR(*p.comm_share_batch1, comm / (1e-3 + comm), 1e-12);
  // OLMoE's whole-projection Q/K norms: one more all-reduce per layer, of 2 floats per token
  // (2 us + 8 ns each).
  in.qk_norm_across_ranks = true;
  const ParallelPlan o = plan_parallel(in);
  EXPECT_EQ(o.all_reduces_per_step, 6);
  EXPECT_NEAR(*o.decode_tokens_per_s_batch1, 1.0 / (1e-3 + comm + 2 * (2e-6 + 8e-9)), 1e-6);
  EXPECT_DOUBLE_EQ(o.sent_bytes_per_token_per_rank, p.sent_bytes_per_token_per_rank + 2 * 8.0);
  in.qk_norm_across_ranks = false;
  // Pipelined over 2 stages instead: batch 1 runs them in turn (1 ms of memory in all) plus the
  // hand-off and the logits' way back (4,000 bytes).
  in.tp = 1;
  in.pp = 2;
  in.layer_bytes = 1'000'000 - 2 * 2 * 1024 * 2;  // with its 1-token KV: 1 MB in all
  const ParallelPlan q = plan_parallel(in);
  EXPECT_NEAR(1.0 / *q.decode_tokens_per_s_batch1, 1e-3 + (1e-6 + 4.096e-6) + (1e-6 + 4e-6), 1e-12);
}

TEST(ParallelPlan, ShapesThatDoNotSplitAreNamedErrors) {
  auto message = [](const ParallelPlanInput& in) {
    try {
      plan_parallel(in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(seventy_b(8, 8192, 3, 1)).find("--tp 3 does not divide the 64 attention heads"),
            std::string::npos);
  ParallelPlanInput odd_kv = seventy_b(8, 8192, 2, 1);
  odd_kv.model.n_kv_heads = 6;
  odd_kv.model.n_heads = 12;
  odd_kv.tp = 4;
  EXPECT_NE(message(odd_kv).find("neither divides the 6 KV heads"), std::string::npos);
  EXPECT_NE(message(seventy_b(8, 8192, 1, 81)).find("--pp 81 is more stages than the 80 layers"),
            std::string::npos);
  EXPECT_NE(message(seventy_b(8, 8192, 0, 1)).find("--tp must be at least 1"), std::string::npos);
}

TEST(ParallelPlan, LinksAndBandwidthsAsUsersWriteThem) {
  const LinkSpec a = parse_link("25GB/s,5us");
  EXPECT_DOUBLE_EQ(a.bytes_per_s, 25e9);
  EXPECT_DOUBLE_EQ(a.latency_s, 5e-6);
  const LinkSpec b = parse_link("12.5GiB/s,800ns");
  EXPECT_DOUBLE_EQ(b.bytes_per_s, 12.5 * 1073741824.0);
  EXPECT_DOUBLE_EQ(b.latency_s, 800e-9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("200GB/s", "--bandwidth"), 200e9);
  for (const char* bad : {"", "25GB/s", "25,5us", "25GB/s,5", "GB/s,5us", "-1GB/s,5us",
                          "25Gb/s,5us", "25GB/s,5 us"}) {
    EXPECT_THROW(parse_link(bad), Error) << bad;
  }
  EXPECT_THROW(parse_bandwidth("fast", "--bandwidth"), Error);
}

}  // namespace
}  // namespace ember
