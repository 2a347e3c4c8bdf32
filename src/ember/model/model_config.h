// One configuration struct for every model ember runs, filled from config.json, GGUF metadata or a
// llama2.c header. `architecture` names the family member; the fields below it say what the
// forward pass does differently, so model code reads features, never architecture names:
//   llama/mistral/qwen2/qwen3/phi3: RMSNorm, SwiGLU, RoPE (qwen3: per-head Q/K norms; mistral and
//     phi3: a sliding window; phi3: fused QKV and gate/up split at load, LongRoPE);
//   gemma2/gemma3: (1 + w) RMSNorm, sqrt(d_model) embedding scale, GeGLU, four norms per block,
//     soft-caps (2), interleaved sliding-window layers, query_pre_attn_scalar, QK norms and a local
//     RoPE base (3);
//   gpt2: LayerNorm with bias, GELU MLP without a gate, learned positions, biases everywhere;
//   mixtral (llama with experts), qwen2moe, olmoe: the llama pass with a mixture-of-experts MLP
//     (olmoe: Q/K norms over the whole projections).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember {

enum class RopeScaling : uint8_t { None, Linear, Llama3, Yarn, LongRope, Dynamic };
enum class NormKind : uint8_t { Rms, Layer };
enum class MlpKind : uint8_t { SwiGlu, GeGlu, Gelu };  // Gelu: up -> gelu -> down (GPT-2)

// The architectures ember runs (general.architecture / model_type spellings), for messages.
const char* supported_architectures();

struct ModelConfig {
  std::string architecture = "llama";  // llama qwen2 qwen3 mistral phi3 gemma2 gemma3 gpt2 qwen2moe
                                       // olmoe
  int64_t d_model = 0;                 // hidden_size
  int64_t d_ffn = 0;                   // intermediate_size
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // usually d_model / n_heads (Qwen3, Gemma: independent)
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 2048;
  float rms_norm_eps = 1e-5f;  // the norm's epsilon (LayerNorm's too)
  float rope_theta = 10000.0f;
  int64_t rope_dim = 0;  // rotated dims per head; == head_dim for every model we load today

  RopeScaling rope_scaling = RopeScaling::None;
  // linear / llama3 / yarn factor; llama3 and yarn band parameters.
  float rope_factor = 8.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int64_t rope_original_max_position = 8192;
  float rope_yarn_beta_fast = 32.0f;
  float rope_yarn_beta_slow = 1.0f;
  // Multiplies cos and sin (YaRN, LongRoPE); 0: derived from the scaling type.
  float rope_attention_factor = 0.0f;
  std::vector<float> rope_long_factors, rope_short_factors;  // LongRoPE, [rope_dim / 2]
  float rope_local_theta = 0.0f;  // Gemma 3's base on sliding layers; 0: rope_theta

  bool tie_word_embeddings = false;
  // Tensor parallelism (parallel/tensor_shard.h): the rows of the vocabulary this process's
  // lm_head holds (a separate tensor then); 0: all of them.
  int64_t lm_head_rows = 0;
  // Pipeline parallelism: this process runs layers [first_layer, first_layer + n_layers) of the
  // model (its layer 0 is the model's first_layer).
  int64_t first_layer = 0;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2, GPT-2)

  // --- family features ---
  NormKind norm = NormKind::Rms;
  MlpKind mlp = MlpKind::SwiGlu;
  bool norm_weight_offset = false;  // HF Gemma stores w and applies (1 + w): add 1 at load
  bool qk_norm = false;             // per-head RMSNorm of Q and K before RoPE (Qwen3, Gemma 3)
  bool sandwich_norms = false;      // post-attention and post-MLP norms too (Gemma)
  bool linear_biases = false;       // o_proj, up and down biases (GPT-2)
  bool learned_positions = false;   // wpe instead of RoPE (GPT-2)
  bool fused_qkv = false;           // one [q; k; v] matrix, split at load (Phi-3, GPT-2)
  bool fused_gate_up = false;       // one [gate; up] matrix, split at load (Phi-3)
  float embed_scale = 1.0f;         // x = embed[token] * embed_scale (Gemma: sqrt(d_model))
  float query_scale = 0.0f;         // attention scale; 0: 1/sqrt(head_dim)
  float attn_softcap = 0.0f;        // Gemma 2: scores soft-capped; 0: none
  float final_softcap = 0.0f;       // Gemma 2: logits soft-capped; 0: none
  int64_t sliding_window = 0;       // 0: none
  // Which layers slide: layer l does iff (l + 1) % pattern != 0 (1: every layer; Gemma 2: 2,
  // the even layers; Gemma 3: 6, five local then one global).
  int64_t sliding_window_pattern = 1;

  // --- mixture of experts (Mixtral: llama with experts; qwen2moe; olmoe) ---
  // Each layer's MLP is n_experts SwiGLU experts of width d_expert_ffn; a router ([n_experts,
  // d_model], softmax over all experts) picks n_experts_used per token, weighted by their
  // probabilities (renormalized to sum 1 when expert_weights_normalized: Mixtral, HF
  // norm_topk_prob). Qwen2-MoE adds a shared expert of width d_shared_expert_ffn on every token,
  // scaled by sigmoid(x . shared_expert_gate).
  int64_t n_experts = 0;  // 0: a dense MLP
  int64_t n_experts_used = 0;
  int64_t d_expert_ffn = 0;
  int64_t d_shared_expert_ffn = 0;  // 0: no shared expert
  bool expert_weights_normalized = false;
  // OLMoE: the Q and K norms are RMSNorms over the whole projection ([q_dim], [kv_dim]) before
  // the head split, not per head.
  bool qk_norm_whole = false;
  // --tp: the ranks the heads are split over, and how many of them hold each KV head (ranks beyond
  // the KV heads share one). Whole-projection norms need both to sum across ranks; 1 and 1 in one
  // process.
  int64_t tp_ranks = 1;
  int64_t kv_head_copies = 1;

  int32_t bos_token_id = 1;
  int32_t eos_token_id = 2;

  bool is_moe() const { return n_experts > 0; }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // The window of `layer`, 0 when it attends to its whole context.
  int64_t layer_window(int64_t layer) const {
    if (sliding_window <= 0) return 0;
    return sliding_window_pattern <= 1 || (first_layer + layer + 1) % sliding_window_pattern != 0
               ? sliding_window
               : 0;
  }
  // cos/sin multiplier of YaRN and LongRoPE (1 otherwise).
  float rope_mscale() const;
  // The attention score scale: query_scale (or 1/sqrt(head_dim)) times rope_mscale()^2, since
  // scaling both q and k by the mscale scales their dot product by its square.
  float attention_scale() const;
  // Which forward pass runs it: "llama" (llama, mistral, qwen2, qwen3, phi3), "gemma", "gpt2".
  const char* family() const;
  // "rmsnorm, swiglu, rope ..." — what this config switches on, for `ember inspect`.
  std::string feature_summary() const;

  // Throws ember::Error("<source>: ...") of kind InvalidFile, with `source` as its file, when a
  // number is missing or inconsistent (zero sizes, heads not dividing kv heads, ...).
  void validate(const std::string& source) const;
};

}  // namespace ember
