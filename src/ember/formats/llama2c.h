// llama2.c legacy checkpoint (.bin): a 7 x int32 header (dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len; vocab_size < 0 means a separate classifier) followed by float32
// tensors: token_embedding_table [vocab, dim], rms_att [L, dim], wq [L, dim, dim],
// wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim],
// w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim],
// freq_cis_real/imag [seq_len, head_size/2] (skipped), wcls [vocab, dim] (only if not shared).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "ember/core/mapped_file.h"
#include "ember/core/tensor.h"
#include "ember/model/model_config.h"

namespace ember {

struct Llama2cCheckpoint {
  ModelConfig config;  // rope_theta 10000, eps 1e-5, head_dim = dim / n_heads
  std::shared_ptr<const MappedFile> mapping;
  // Per-layer views under HF names: model.embed_tokens.weight,
  // model.layers.N.{input_layernorm,post_attention_layernorm}.weight,
  // model.layers.N.self_attn.{q,k,v,o}_proj.weight, model.layers.N.mlp.{gate,up,down}_proj.weight
  // (w1 = gate, w3 = up, w2 = down), model.norm.weight, and lm_head.weight only when the
  // classifier is not shared. Q/K rows are as stored (llama2.c's interleaved RoPE layout).
  std::map<std::string, TensorView> tensors;
};

// Throws ember::Error naming the file for a header that is too short, non-positive sizes,
// heads that do not divide dim, or a file shorter than the tensors the header implies.
Llama2cCheckpoint load_llama2c_checkpoint(const std::string& path);

}  // namespace ember
