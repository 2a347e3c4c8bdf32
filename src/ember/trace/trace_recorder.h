// What `ember trace` records of one request as its steps run (a ForwardObserver on the model):
//
// - the logit lens: for every layer (and the embedding) and selected position, the top-k tokens the
//   residual decodes to through the final norm and lm_head, and the rank and probability there of
//   the token that came next (the next prompt token, or the token generated at that position);
// - attention: per layer and query head, each selected position's weights over its keys, computed
//   from the Q and K the attention op read (after RoPE) with the layer's score rules (scale,
//   soft-cap, window); long rows are summed into at most max_keys bins;
// - the residual stream: per layer and position, the norms of the residual and of the attention
//   and MLP contributions, and the cosine between the residual after this layer and after the
//   one before;
// - per step: wall time, the ops' records (time, FLOPs, bytes per op group and name), and the KV
//   cache's blocks and bytes as the engine reports them after the step.
//
// One request: the step's only sequence, or the one Batch::observed_sequence names (the server
// traces one request among others). Its steps must show every position once, in order (the
// engine computes an observed request's whole prompt); a step that does not (a preempted request
// recomputed) ends the recording with problem() saying why. Callbacks never throw: a trace
// never fails the step it watches.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ember/model/forward_observer.h"
#include "ember/model/model_config.h"

namespace ember {

struct TraceOptions {
  int64_t top_k = 5;       // logit lens entries per (layer, position)
  bool logit_lens = true;  // a full lm_head per layer and step: off for speed
  // Prompt positions with attention rows and logit-lens cells (evenly spaced, the last included;
  // every generated position has them).
  int64_t max_rows = 32;
  int64_t max_keys = 128;  // keys per attention row before they are binned
};

struct LensEntry {
  int32_t token = 0;
  float p = 0;
};

// One (layer, position) of the logit lens.
struct LensCell {
  std::vector<LensEntry> top;  // by probability, highest first
  int32_t next_token = -1;     // the token that came next (-1: none, the last position)
  int64_t next_rank = -1;      // its rank (0: top), -1 when unknown
  float next_p = 0;
};

// One query position's attention weights over its keys [first_key, first_key + n_keys) of one
// head, in bins of bin_size keys (1: every key; the last bin may be shorter).
struct AttentionRow {
  int64_t position = 0, first_key = 0, n_keys = 0, bin_size = 1;
  std::vector<float> weights;
};

struct ResidualStats {
  std::vector<float> residual_norm, attention_norm, mlp_norm, cosine_to_previous;  // [positions]
};

struct TraceOp {
  OpGroup group;
  std::string name;
  int64_t calls = 0;
  double seconds = 0, flops = 0, bytes = 0;
};

struct TraceStep {
  int64_t first_position = 0, n_tokens = 0;
  // The whole batch the step ran (the traced request's tokens and other requests'): op times and
  // FLOPs are the batch's.
  int64_t batch_tokens = 0, batch_sequences = 1;
  double seconds = 0;
  std::vector<TraceOp> ops;  // summed per (group, name), in order of first appearance
  // The KV cache during the step, as the engine holds it.
  int64_t kv_blocks_used = 0, kv_bytes_held = 0, prefix_hit_blocks = 0;
};

class TraceRecorder : public ForwardObserver {
 public:
  TraceRecorder(const ModelConfig& config, const TraceOptions& options);

  // The prompt's length, when it may take several steps (chunked prefill); default: the first
  // step's tokens.
  void set_prompt_tokens(int64_t n) { n_prompt_ = n; }
  // Why the recording stopped early ("" while it is whole).
  const std::string& problem() const { return problem_; }

  // After the last step: `generated` tokens were given out, the last of them `last_token`. The
  // last one given out was sampled from the last step's logits and never ran, unless the request
  // stopped on EOS (not given out): then every token given out ran. It completes the sequence.
  void finish(int64_t generated, int32_t last_token);
  // The KV cache as the engine holds it while a step runs (asked at the end of each forward pass,
  // before the step hands out its tokens and a finished request gives its blocks back).
  struct KvSnapshot {
    int64_t blocks_used = 0, bytes_held = 0, prefix_hit_blocks = 0;
  };
  void set_kv_probe(std::function<KvSnapshot()> probe) { kv_probe_ = std::move(probe); }

  void begin_step(const Batch& batch) override;
  void attention_inputs(int64_t layer, std::span<const float> q, std::span<const float> k,
                        std::span<const float> v, const AttentionScores& scores) override;
  void residual(int64_t layer, Sublayer sublayer, std::span<const float> delta,
                std::span<const float> after) override;
  bool wants_logit_lens() const override { return options_.logit_lens; }
  void logit_lens(int64_t layer, std::span<const float> logits) override;
  void op(const OpRecord& record) override;
  void end_step(std::span<const float> logits) override;

  const ModelConfig& config() const { return config_; }
  const TraceOptions& options() const { return options_; }
  // Every token of the sequence: the prompt, then the generated ones.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t n_prompt() const { return n_prompt_; }
  // [layer + 1][position]: row 0 is the embedding; positions not selected have no top entries.
  const std::vector<std::vector<LensCell>>& lens() const { return lens_; }
  // [layer][head]: the selected positions' rows, in position order.
  const std::vector<std::vector<std::vector<AttentionRow>>>& attention() const {
    return attention_;
  }
  // [layer + 1], row 0 the embedding (its residual norm only).
  const std::vector<ResidualStats>& residuals() const { return residuals_; }
  const std::vector<TraceStep>& steps() const { return steps_; }
  // V rows [position][n_kv_heads * head_dim] of `layer`, as the attention read them (tests
  // rebuild the attention output from them and the weights).
  const std::vector<float>& values(int64_t layer) const { return v_[static_cast<size_t>(layer)]; }

 private:
  bool row_selected(int64_t position) const;
  void stop(std::string why);
  void attention_row(int64_t layer, int64_t head, int64_t position, const float* q,
                     const AttentionScores& scores);
  void settle_lens(int32_t next_token);

  ModelConfig config_;
  TraceOptions options_;
  std::vector<int32_t> tokens_;
  int64_t n_prompt_ = -1;
  int64_t step_first_ = 0, step_tokens_ = 0;
  int64_t row0_ = 0;     // the observed sequence's first row in the step's batch
  bool active_ = false;  // this step is being recorded
  std::string problem_;
  std::vector<std::vector<float>> k_, v_;  // [layer] -> [position][kv_dim]
  std::vector<std::vector<LensCell>> lens_;
  // The step's last position's lens rows (softmaxed), kept until its next token is known.
  std::vector<std::vector<float>> pending_lens_;
  std::vector<std::vector<std::vector<AttentionRow>>> attention_;
  std::vector<ResidualStats> residuals_;
  std::vector<float> previous_residual_;  // the step's residual after the layer before
  std::vector<TraceStep> steps_;
  double step_start_ = 0;
  std::function<KvSnapshot()> kv_probe_;
};

}  // namespace ember
