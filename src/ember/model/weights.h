// The model's parameters as the forward pass reads them: matrices and float32 vectors the backend
// made from host views at load (Backend::upload_*): a matrix may still point into the mmap'd
// checkpoint (zero-copy when the file dtype is the compute dtype and the backend reads host
// memory) or into the backend's own memory (converted, re-laid out, --no-mmap, --dummy).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/backend/weight.h"
#include "ember/core/mapped_file.h"
#include "ember/model/model_config.h"

namespace ember {

struct LayerWeights {
  const float* attn_norm = nullptr;       // [d_model]
  const float* attn_norm_bias = nullptr;  // [d_model] or null (LayerNorm)
  WeightMatrix wq;                // [n_heads * head_dim, d_model], rows in HF half-rotation order
  WeightMatrix wk;                // [n_kv_heads * head_dim, d_model]
  WeightMatrix wv;                // [n_kv_heads * head_dim, d_model]
  WeightMatrix wo;                // [d_model, n_heads * head_dim]
  const float* bq = nullptr;      // [q_dim] or null (attention bias: Qwen2, GPT-2)
  const float* bk = nullptr;      // [kv_dim] or null
  const float* bv = nullptr;      // [kv_dim] or null
  const float* bo = nullptr;      // [d_model] or null (GPT-2)
  const float* q_norm = nullptr;  // [head_dim] or null (Qwen3, Gemma 3)
  const float* k_norm = nullptr;  // [head_dim] or null
  const float* attn_out_norm = nullptr;  // [d_model] or null (Gemma: norm of the attn output)
  const float* ffn_norm = nullptr;       // [d_model]
  const float* ffn_norm_bias = nullptr;  // [d_model] or null (LayerNorm)
  WeightMatrix w_gate;                   // [d_ffn, d_model]; empty for GPT-2's ungated MLP
  WeightMatrix w_up;                     // [d_ffn, d_model]
  WeightMatrix w_down;                   // [d_model, d_ffn]
  const float* b_up = nullptr;           // [d_ffn] or null (GPT-2)
  const float* b_down = nullptr;         // [d_model] or null
  const float* ffn_out_norm = nullptr;   // [d_model] or null (Gemma: norm of the MLP output)
  // Mixture of experts (config.n_experts > 0; w_gate/w_up/w_down are then the shared expert's, or
  // empty): the router [n_experts, d_model] (f32, as llama.cpp keeps it) and each expert's
  // SwiGLU matrices, [d_expert_ffn, d_model] and [d_model, d_expert_ffn]; Qwen2-MoE's shared
  // expert gate [1, d_model] (f32).
  WeightMatrix router;
  std::vector<WeightMatrix> expert_gate, expert_up, expert_down;
  WeightMatrix shared_expert_gate;
  const float* rope_inv_freq = nullptr;  // this layer's RoPE frequencies (Gemma 3: local/global)
  int64_t window = 0;                    // sliding window of this layer; 0: whole context
};

struct ModelWeights {
  ModelConfig config;
  WeightMatrix embed;      // [vocab, d_model]
  WeightMatrix positions;  // [max_positions, d_model] (GPT-2's wpe); empty otherwise
  std::vector<LayerWeights> layers;
  const float* final_norm = nullptr;       // [d_model]
  const float* final_norm_bias = nullptr;  // [d_model] or null (LayerNorm)
  WeightMatrix lm_head;                    // [vocab, d_model]; the embedding itself when tied
  const float* rope_inv_freq = nullptr;    // [rope_dim / 2], scaling already applied
  // Stored names of tensors found holding NaN or Inf at load (load_model warns about them).
  std::vector<std::string> non_finite_tensors;
  // Identifies these weights (load_model: the stored tensors' names, dtypes, shapes and sampled
  // bytes, or the dummy seed; the load dtype): the KV offload tiers file entries under it.
  uint64_t fingerprint = 0;

  // The backend that holds the weights and runs the model; the mappings the weights may point into.
  std::shared_ptr<Backend> backend;
  std::vector<std::shared_ptr<const MappedFile>> mappings;
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> owned_tensors;  // (Checkpoint's)

  // Tensor parallelism: these weights are one rank's shard, and the outputs of W_O and W_down
  // [n floats, the backend's memory] are partial sums this adds across the ranks in place
  // (Backend::all_reduce_sum: MPI for host backends, NCCL on cuda); reduce_host_sums does the same
  // for sums the model computed in host memory (OLMoE's whole-projection Q/K norms). Null in one
  // process.
  std::function<void(float* x, int64_t n)> reduce_partial_sums;
  std::function<void(float* x, int64_t n)> reduce_host_sums;
  // ...and lm_head holds this rank's rows of the vocabulary (config.lm_head_rows): puts every
  // rank's logits [rows, its part] into [rows, vocab_size] (host memory).
  std::function<void(const float* mine, int64_t rows, float* all)> gather_logits;
  // Pipeline parallelism (config.first_layer, n_layers: this stage's layers): a stage after the
  // first takes its input hidden states [n floats] from the previous stage instead of the
  // embedding; a stage before the last hands its output on instead of computing logits (its
  // forward returns none); and ModelRunner gives every stage the last stage's logits of the whole
  // step: start_logits starts their hand-off (the last stage sends `logits` [n floats], the others
  // receive into it; both keep the buffer until it is finished), finish_logits finishes the oldest
  // hand-off started, so a stage may run later steps in between (ModelRunner::launch).
  std::function<void(float* x, int64_t n)> receive_hidden;
  std::function<void(const float* x, int64_t n)> send_hidden;
  std::function<void(float* logits, int64_t n)> start_logits;
  std::function<void()> finish_logits;
  // Called by the forward pass once per layer: moves the started hand-offs along (a transport
  // without single-copy shared memory moves a large message only while both ranks are in MPI).
  std::function<void()> progress_transfers;
  int pipeline_stages = 1;  // --pp: the stages (1 in one process)

  // Bytes of all matrices (every expert's included).
  int64_t matrix_bytes() const;
  // Bytes one token's forward pass reads: all matrices but the experts it was not routed to
  // (what batch-1 decode streams per token; matrix_bytes() for a dense model).
  int64_t active_matrix_bytes() const;
  // Of those, the bytes in the backend's own memory (copied at load) rather than read from the
  // file.
  int64_t copied_matrix_bytes() const;
  // The layer matrices' dtype after load.
  DType matrix_dtype() const { return layers.empty() ? embed.dtype : layers[0].wq.dtype; }
  // Every matrix dtype with its count, most frequent first ("q5_0 x166, q4_k x16, q8_0 x15"), or
  // the one dtype's name when all agree: what a mixed file (a llama.cpp preset) holds.
  std::string matrix_dtypes() const;
};

// inv_freq[i] = theta^(-2i/rope_dim), then the configured scaling (linear, llama3, YaRN, LongRoPE).
// `local`: Gemma 3's sliding layers (rope_local_theta, no scaling).
std::vector<float> rope_inverse_frequencies(const ModelConfig& config, bool local = false);
// Dynamic NTK's RoPE base, fixed for the scaled context (see weights.cpp).
double dynamic_ntk_base(const ModelConfig& config);

}  // namespace ember
