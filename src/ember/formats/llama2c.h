// llama2.c legacy checkpoint (.bin): a 7 x int32 header (dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len; vocab_size < 0 means a separate classifier) followed by float32
// tensors: token_embedding_table [vocab, dim], rms_att [L, dim], wq [L, dim, dim],
// wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim],
// w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim],
// freq_cis_real/imag [seq_len, head_size/2] (skipped), wcls [vocab, dim] (only if not shared).
// Reading happens in two steps (header, then tensor views) so a caller can check what the header
// means for its model (model/model_config_sources.cpp) before the tensors are sized from it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ember/core/mapped_file.h"
#include "ember/core/tensor.h"

namespace ember {

struct Llama2cHeader {
  int64_t dim = 0;
  int64_t hidden_dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;          // the stored value's magnitude
  bool shared_classifier = false;  // stored vocab_size > 0: the embedding doubles as lm_head
  int64_t seq_len = 0;

  int64_t head_size() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_size(); }
};

struct Llama2cFile {
  Llama2cHeader header;
  std::shared_ptr<const MappedFile> mapping;
};

// Maps the file and reads its header. Throws ember::Error naming the file for a header that is too
// short, a newer (version 1/2) export, non-positive sizes, or heads that do not divide dim.
Llama2cFile open_llama2c_file(const std::string& path);

// Views of every tensor under HF names: model.embed_tokens.weight,
// model.layers.N.{input_layernorm,post_attention_layernorm}.weight,
// model.layers.N.self_attn.{q,k,v,o}_proj.weight, model.layers.N.mlp.{gate,up,down}_proj.weight
// (w1 = gate, w3 = up, w2 = down), model.norm.weight, and lm_head.weight only when the classifier
// is not shared. Q/K rows are as stored (llama2.c's interleaved RoPE layout). Throws ember::Error
// naming the file when it is shorter than the tensors the header implies.
std::map<std::string, TensorView> llama2c_tensor_views(const Llama2cFile& file);

}  // namespace ember
