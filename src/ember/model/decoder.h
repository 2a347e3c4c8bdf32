// The sublayers every family's forward pass is built from, on the backend's ops: token (and
// position) embedding, the attention sublayer (Q/K/V, biases, QK norms, RoPE, KV store, windowed
// attention, output projection), the MLP sublayer (SwiGLU, GeGLU or GPT-2's GELU, biases), the
// family's norm and the logits head (final norm, lm_head, soft-cap). Family files (llama.cpp,
// gemma.cpp, gpt2.cpp) say how a block wires them.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "ember/model/forward_observer.h"
#include "ember/model/model.h"
#include "ember/model/moe_routing.h"

namespace ember {

class DecoderModel : public Model {
 public:
  // A step's routed experts run together (routed_experts_together) up to this many token-expert
  // rows (T * k); past it, one by one (their buffers would grow with the prompt).
  static constexpr int64_t kGroupedExpertRows = 1024;

 protected:
  explicit DecoderModel(const ModelWeights& weights);

  // Grows the per-step buffers for T tokens.
  void reserve(int64_t T);
  // x = embed[token] * embed_scale (+ wpe[position]).
  void embed(const Batch& batch);
  // y = norm(x) with the family's norm (RMSNorm or LayerNorm with `bias`), [rows, d_model].
  void norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows);
  // tmp = W_O attention(xn) (+ bias) for `layer`.
  void attention(int64_t layer, const LayerWeights& lw, const Batch& batch, KvCache& cache);
  // tmp = W_down act(xn) (+ bias): SwiGLU, GeGLU or GELU; or the mixture of experts (moe_mlp).
  void mlp(int64_t layer, const LayerWeights& lw, int64_t T);
  // tmp = sum over each token's k experts of weight * expert(xn) (+ the gated shared expert):
  // the step's tokens grouped by expert, each active expert run once on its tokens.
  void moe_mlp(int64_t layer, const LayerWeights& lw, int64_t T);
  // The routed experts' part of tmp: one matmul call per active expert and projection (prefill),
  // or every active expert in one matmul_groups call per projection (up to kGroupedExpertRows
  // token-expert rows: decode, batched decode, verification, short prompts).
  void routed_experts_one_by_one(const LayerWeights& lw);
  void routed_experts_together(const LayerWeights& lw, int64_t T);
  // OLMoE's whole-projection Q/K RMSNorms under --tp: this rank holds some heads of each token's
  // Q [T, q_dim] and K [T, kv_dim]; the sums of squares are all-reduced (2T floats) so that each
  // rank scales its part by the whole projection's RMS.
  void whole_qk_norm_across_ranks(const LayerWeights& lw, int64_t T);
  // Final norm, lm_head and soft-cap for the batch's logit rows.
  std::span<const float> logits(const Batch& batch);
  // x += tmp [T, d_model]: the residual add after `sublayer` of `layer`. With an observer, reports
  // tmp and x (and after the MLP, the logit lens of x): decoder_observe.cpp.
  void add_residual(int64_t layer, Sublayer sublayer, int64_t T);

  // backend_.matmul of x [T, K] by ws into ys; with an observer, timed as `name` with its FLOPs
  // and bytes (weights, input, outputs).
  void matmul(const char* name, const float* x, int64_t T,
              std::initializer_list<const WeightMatrix*> ws, std::initializer_list<float*> ys) {
    if (observer_ == nullptr) return backend_.matmul(x, T, ws, ys);
    observed_matmul(name, x, T, ws, ys);
  }
  // backend_.matmul_groups; with an observer, timed as one `name` op with every group's work.
  void matmul_groups(const char* name, std::span<const MatmulGroup> groups);
  void observed_matmul(const char* name, const float* x, int64_t T,
                       std::initializer_list<const WeightMatrix*> ws,
                       std::initializer_list<float*> ys);
  // Tensor parallelism: tmp [T, d_model] holds this shard's part of a sublayer's output; adds
  // the other shards' (ModelWeights::reduce_partial_sums). Nothing in one process.
  void reduce_partial_sums(int64_t T) {
    if (weights_.reduce_partial_sums)
      weights_.reduce_partial_sums(tmp_.data(), T * config_.d_model);
  }
  // gate = silu(gate) * up, [rows, n]; timed with an observer.
  void silu_mul(float* gate, const float* up, int64_t rows, int64_t n);
  // Runs fn; with an observer, reports make_record() with fn's wall time (the record is only made
  // when observed: without an observer this is fn and one pointer test).
  template <class Fn, class MakeRecord>
  void timed(Fn&& fn, MakeRecord&& make_record) {
    if (observer_ == nullptr) {
      fn();
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    fn();
    OpRecord record = make_record();
    record.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    observer_->op(record);
  }
  // The observer's views of the embedding (begin_step, residual -1, its logit lens), of the
  // attention sublayer's inputs and output, and of the residual after a layer decoded as logits.
  void observe_embedding(const Batch& batch);
  void observe_attention_inputs(int64_t layer, int64_t T, const AttentionScores& scores);
  void observe_logit_lens(int64_t layer, int64_t T);
  // The attention op's arithmetic and the K/V bytes it reads at least (each sequence's keys once).
  OpRecord attention_record(const Batch& batch, const KvStorage& kv,
                            const AttentionScores& scores) const;

 public:
  std::span<const int64_t> expert_load() const override { return expert_load_; }
  std::span<const float> hidden_states() const override { return hidden_states_; }
  void set_observer(ForwardObserver* observer) override { observer_ = observer; }

 protected:
  const ModelWeights& weights_;
  const ModelConfig& config_;
  Backend& backend_;
  // Per-step activations in the backend's memory, grown as needed: x/xn/tmp [T, d_model],
  // q/attn [T, q_dim], k/v [T, kv_dim], gate/up [T, d_ffn]; final [R, d_model], logits [R, vocab].
  Activations x_, xn_, tmp_, q_, k_, v_, attn_, gate_, up_, final_, logits_;
  std::vector<float> host_logits_;      // staging when the backend's memory is not host memory
  std::vector<float> host_received_;    // pipeline stages: hidden states handed on or received
  std::vector<float> gathered_logits_;  // tensor parallelism: every rank's vocabulary rows
  // batch.hidden_rows after the final norm [H, d_model], and their host copy.
  Activations hidden_;
  std::vector<float> host_hidden_;
  std::span<const float> hidden_states_;
  // Mixture of experts: router logits [T, n_experts], the shared expert's gate logits [T], the
  // experts' tokens gathered [n, d_model] and their outputs [n, d_model] (one expert's, or every
  // active expert's one after another); host copies and routes; the grouped calls' groups.
  Activations router_, shared_gate_, expert_x_, expert_out_;
  std::vector<MatmulGroup> gate_up_groups_, down_groups_;
  std::vector<float> host_router_, host_shared_gate_;
  ExpertRoutes routes_;
  // whole_qk_norm_across_ranks: host copies of Q and K and of their norm weights, the per-token
  // sums of squares [2T], the normed part before it goes back.
  std::vector<float> host_qk_[2], host_norm_[2], qk_sums_, normed_qk_;
  std::vector<int64_t> expert_load_;  // Model::expert_load()
  // ember trace (forward_observer.h); null: nothing observed. Host staging for its views.
  ForwardObserver* observer_ = nullptr;
  const Batch* observed_batch_ = nullptr;  // the step being observed (its observed_sequence)
  std::vector<float> observed_[3];
  Activations lens_x_, lens_logits_;  // the logit lens: normed residual [T, d_model], [T, vocab]
};

}  // namespace ember
