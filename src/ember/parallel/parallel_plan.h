// The plan of a model split over processes (#32): tensor parallelism over `tp` ranks (Megatron:
// Q/K/V and gate/up by output rows, O and down by input columns, one all-reduce after each; the
// embedding and lm_head by vocabulary, the logits gathered over the ranks) and
// pipeline parallelism over `pp` stages of consecutive layers. For each stage: the weights and KV
// one rank holds; per decode step: the all-reduces and bytes each rank sends; and the decode
// tokens/s that memory bandwidth and the link allow, so a deployment can be planned on paper.
//
// Time of a decode step (memory-bound, as decode is): each rank streams its weights and its
// sequences' KV at `rank_bandwidth`; an all-reduce of S bytes over a ring of N ranks costs
// 2 (N - 1) latency + 2 (N - 1) / N S / link bandwidth; a stage hands B x d_model f32 to the
// next in latency + bytes / bandwidth, and the last stage sends each sequence's logits (vocab f32)
// to every rank before it, as ember does. Batch 1 runs the stages one after another. A batch of B
// runs as pp micro-batches of B / pp in flight (the stages overlap), so each stage reads its
// weights pp times per B tokens: pipelining buys memory per rank, not decode speed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ember/kv/capacity_plan.h"

namespace ember {

struct LinkSpec {
  double bytes_per_s = 25e9;
  double latency_s = 5e-6;
};

// "25GB/s,5us" (bandwidth: B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s; latency: ns, us, ms, s).
// Throws ember::Error naming --link and the accepted form.
LinkSpec parse_link(const std::string& text);
// "200GB/s" and the like; throws naming `option`.
double parse_bandwidth(const std::string& text, const std::string& option);

struct ParallelPlanInput {
  CapacityPlanInput model;  // shape, ctx, batch, KV dtype, window, memory per rank, bandwidth
  int64_t d_model = 0, d_ffn = 0, vocab = 0;
  int64_t layer_bytes = 0;       // every layer's matrices (split by tp)
  int64_t layer_norm_bytes = 0;  // every layer's norms and other vectors (on every tp rank)
  int64_t embed_bytes = 0;       // the token table (split by vocabulary, on the first stage)
  int64_t lm_head_bytes = 0;     // a separate lm_head (last stage); 0 when tied to the embedding
  int64_t other_bytes = 0;       // final norm, positions: on every rank of their stage
  bool tied_embeddings = false;
  // OLMoE's whole-projection Q/K norms: a third all-reduce per layer (2 floats per token).
  bool qk_norm_across_ranks = false;
  int tp = 1, pp = 1;
  LinkSpec link;
};

struct StagePlan {
  int64_t first_layer = 0, n_layers = 0;
  double weight_bytes_per_rank = 0;
  double kv_bytes_per_token_per_rank = 0;
  double kv_bytes_per_sequence_per_rank = 0;  // at the resident context
  int64_t all_reduces_per_step = 0;           // tp: two per layer (three for OLMoE)
  double step_seconds_batch1 = 0;             // memory + this stage's all-reduces, one sequence
};

struct ParallelPlan {
  std::vector<StagePlan> stages;
  int64_t kv_heads_per_rank = 0;
  bool kv_heads_replicated = false;           // tp > n_kv_heads: each KV head on tp / n_kv ranks
  double all_reduce_bytes_per_token = 0;      // one all-reduce's payload per token: d_model x 4
  int64_t all_reduces_per_step = 0;           // over all stages
  double sent_bytes_per_token_per_rank = 0;   // tp ring traffic + a stage hand-off
  double handoff_bytes_per_token = 0;         // pp: d_model x 4 per stage boundary
  std::optional<int64_t> sequences_that_fit;  // per rank's --mem, the tightest stage
  // With a bandwidth: predicted decode, and the communication's share of a batch-1 step.
  std::optional<double> decode_tokens_per_s_batch1, decode_tokens_per_s_batch;
  std::optional<double> comm_share_batch1;
};

// Checks tp and pp against the shape (tp divides the heads and d_ffn, and the KV heads or is a
// multiple of them; pp <= layers); throws ember::Error naming --tp or --pp.
void check_parallel_shape(const ParallelPlanInput& in);

ParallelPlan plan_parallel(const ParallelPlanInput& in);

}  // namespace ember
