// What a forward pass shows to an observer (`ember trace`): the attention sublayer's inputs and
// output, each sublayer's contribution to the residual stream, the residual after it, the logit
// lens, and the time of each op group. Everything arrives in host memory (copied out of the
// backend's memory by the model), valid during the call only; an observer copies what it keeps.
//
// A model without an observer pays one pointer test per sublayer; with one, every op is
// synchronous with the host (the copies wait for it), so op times are wall times.
#pragma once

#include <cstdint>
#include <span>

#include "ember/backend/attention_scores.h"
#include "ember/backend/batch.h"

namespace ember {

// The two sublayers of a block, as they add into the residual stream.
enum class Sublayer : uint8_t { Attention, Mlp };

// What an op did: its group, a name within the group ("wq+wk+wv", "w_down", "rmsnorm", ...),
// wall time, and the arithmetic and bytes the op needs at least (weights, activations in and out,
// the K/V rows read): the roofline's coordinates.
// Sampling is the engine's (the observed request's next token from its logits), reported after
// end_step and before the token goes out.
enum class OpGroup : uint8_t { Matmul, Attention, Norm, Elementwise, Sampling };
const char* op_group_name(OpGroup group);

struct OpRecord {
  OpGroup group;
  const char* name;
  double seconds = 0, flops = 0, bytes = 0;
};

class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  // A step's batch, before the embedding.
  virtual void begin_step(const Batch& batch) {}
  // Layer `layer`'s Q [T, n_heads * head_dim] and K, V [T, n_kv_heads * head_dim] as attention
  // reads them (after biases, QK norms and RoPE), with its score rules.
  virtual void attention_inputs(int64_t layer, std::span<const float> q, std::span<const float> k,
                                std::span<const float> v, const AttentionScores& scores) {}
  // Layer `layer`'s attention output before W_O, [T, n_heads * head_dim].
  virtual void attention_output(int64_t layer, std::span<const float> out) {}
  // A sublayer's output as it is added to the residual, and the residual after the add, both
  // [T, d_model]. layer -1, Sublayer::Attention: the embedding (delta and residual alike).
  virtual void residual(int64_t layer, Sublayer sublayer, std::span<const float> delta,
                        std::span<const float> after) {}
  // Whether the model should decode the residual after each layer through the final norm and
  // lm_head (logit_lens below): a full lm_head per layer, so off unless asked.
  virtual bool wants_logit_lens() const { return false; }
  // Logits of the residual after layer `layer` (-1: the embedding), for the observed sequence's
  // rows only (Batch::observed_sequence; every row when -1): [its tokens, vocab].
  virtual void logit_lens(int64_t layer, std::span<const float> logits) {}
  virtual void op(const OpRecord& record) {}
  // The step's logits (the batch's logit rows), after the forward pass.
  virtual void end_step(std::span<const float> logits) {}
};

}  // namespace ember
