// The model's parameters as the forward pass reads them. Matrices are cpu::WeightMatrix views,
// either straight into an mmap'd checkpoint (zero-copy when the file dtype is the compute dtype)
// or into arenas owned here (converted / quantized / permuted at load, or --dummy weights).
// Norm weights and biases are always float32.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ember/core/huge_pages.h"
#include "ember/core/mapped_file.h"
#include "ember/kernels/cpu/kernels.h"
#include "ember/model/model_config.h"

namespace ember {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [d_model]
  cpu::WeightMatrix wq;             // [n_heads * head_dim, d_model], rows in HF half-rotation order
  cpu::WeightMatrix wk;             // [n_kv_heads * head_dim, d_model]
  cpu::WeightMatrix wv;             // [n_kv_heads * head_dim, d_model]
  cpu::WeightMatrix wo;             // [d_model, n_heads * head_dim]
  const float* bq = nullptr;        // [q_dim] or null (attention bias, Qwen2)
  const float* bk = nullptr;        // [kv_dim] or null
  const float* bv = nullptr;        // [kv_dim] or null
  const float* ffn_norm = nullptr;  // [d_model]
  cpu::WeightMatrix w_gate;         // [d_ffn, d_model]
  cpu::WeightMatrix w_up;           // [d_ffn, d_model]
  cpu::WeightMatrix w_down;         // [d_model, d_ffn]
};

struct ModelWeights {
  ModelConfig config;
  cpu::WeightMatrix embed;  // [vocab, d_model]
  std::vector<LayerWeights> layers;
  const float* final_norm = nullptr;  // [d_model]
  cpu::WeightMatrix lm_head;          // [vocab, d_model]; the embedding itself when tied
  std::vector<float> rope_inv_freq;   // [rope_dim / 2], llama3 scaling already applied

  // Keep-alive storage behind the views above.
  std::vector<std::shared_ptr<const MappedFile>> mappings;
  // Matrices copied at load (converted, interleaved, --no-mmap) sit in huge pages: see
  // huge_pages.h.
  HugePageArena arena;

  // Allocates `bytes` (zero-filled, 64-byte aligned) owned by this object.
  uint8_t* allocate(size_t bytes);
  // Bytes of all matrices as the forward pass reads them (what decode streams per token).
  int64_t matrix_bytes() const;
  // Of those, the bytes in this object's arena (copied at load) rather than read from the file.
  int64_t copied_matrix_bytes() const;
};

// inv_freq[i] = theta^(-2i/rope_dim), then the "llama3" frequency-dependent scaling if configured.
std::vector<float> rope_inverse_frequencies(const ModelConfig& config);

}  // namespace ember
