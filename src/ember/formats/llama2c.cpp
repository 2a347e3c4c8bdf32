// llama2.c legacy (version 0) checkpoint. Layout, all little-endian:
//
//   7 × int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//   float32 tensors, back to back, each stacked over layers where it is per-layer:
//     token_embedding_table [vocab, dim]
//     rms_att [L, dim]  wq [L, dim, dim]  wk [L, kv_dim, dim]  wv [L, kv_dim, dim]
//     wo [L, dim, dim]  rms_ffn [L, dim]  w1 [L, hidden, dim]  w2 [L, dim, hidden]
//     w3 [L, hidden, dim]  rms_final [dim]
//     freq_cis_real [seq_len, head_size/2]  freq_cis_imag [seq_len, head_size/2]  (unused)
//     wcls [vocab, dim]  (only when vocab_size < 0, i.e. the classifier is not shared)
//
// Each matrix is [out, in] row-major, like a PyTorch Linear weight, so a layer's slice of the
// stacked tensor is directly an HF-shaped view. The header is 28 bytes, so every float is
// 4-byte aligned in the mapping.
#include "ember/formats/llama2c.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "ember/core/error.h"

namespace ember {

namespace {

constexpr uint64_t kHeaderBytes = 7 * sizeof(int32_t);
// llama2.c's newer export formats (version 1/2) begin with this magic instead of the header.
constexpr uint32_t kExportMagic = 0x616b3432;  // "ak42"

// Walks the float32 tensors in file order, checking each fits in the file.
class Cursor {
 public:
  explicit Cursor(const MappedFile& file) : file_(file), offset_(kHeaderBytes) {}

  // Claims the next tensor of shape `dims` for `what` and returns its byte offset.
  uint64_t take(const std::vector<int64_t>& dims, const std::string& what) {
    uint64_t n = 1;
    for (int64_t d : dims) {
      if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) overflow(what);
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(n, uint64_t{4}, &bytes)) overflow(what);
    if (offset_ > file_.size() || bytes > file_.size() - offset_) {
      throw Error::in_file(ErrorKind::InvalidFile, file_.path(),
                           "file is too short for " + what + ": needs bytes [" +
                               std::to_string(offset_) + ", " + std::to_string(offset_ + bytes) +
                               ") but the file has " + std::to_string(file_.size()) +
                               " (truncated file or header does not match the weights)");
    }
    uint64_t at = offset_;
    offset_ += bytes;
    return at;
  }

 private:
  [[noreturn]] void overflow(const std::string& what) const {
    throw Error::in_file(ErrorKind::InvalidFile, file_.path(),
                         "header sizes make " + what + " impossibly large");
  }

  const MappedFile& file_;
  uint64_t offset_;
};

}  // namespace

Llama2cCheckpoint load_llama2c_checkpoint(const std::string& path) {
  Llama2cCheckpoint ckpt;
  ckpt.mapping = std::make_shared<MappedFile>(path);
  const MappedFile& file = *ckpt.mapping;
  if (file.size() < kHeaderBytes) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         "truncated file: " + std::to_string(file.size()) +
                             " bytes is too short for a llama2.c header (28 bytes)");
  }
  int32_t h[7];
  std::memcpy(h, file.data(), sizeof(h));
  if (static_cast<uint32_t>(h[0]) == kExportMagic) {
    throw Error::in_file(ErrorKind::Unsupported, path,
                         "llama2.c export version " + std::to_string(h[1]) +
                             " is not supported (only the legacy version 0 .bin format)");
  }
  const int64_t dim = h[0], hidden = h[1], n_layers = h[2], n_heads = h[3], n_kv_heads = h[4];
  const int64_t vocab_signed = h[5], seq_len = h[6];
  const char* names[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                          "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    bool ok = i == 5 ? h[i] != 0 && h[i] != INT32_MIN : h[i] > 0;
    if (!ok) {
      throw Error::in_file(
          ErrorKind::InvalidFile, path,
          std::string("invalid llama2.c header: ") + names[i] + " = " + std::to_string(h[i]));
    }
  }
  if (dim % n_heads != 0) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         "invalid llama2.c header: dim " + std::to_string(dim) +
                             " is not a multiple of n_heads " + std::to_string(n_heads));
  }

  ModelConfig& c = ckpt.config;
  c.architecture = "llama";
  c.d_model = dim;
  c.d_ffn = hidden;
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = dim / n_heads;
  c.rope_dim = c.head_dim;
  c.vocab_size = vocab_signed < 0 ? -vocab_signed : vocab_signed;
  c.max_position_embeddings = seq_len;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = vocab_signed > 0;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  c.validate(path);

  const int64_t vocab = c.vocab_size, kv_dim = c.kv_dim(), L = n_layers;
  Cursor cur(file);
  struct Stacked {
    uint64_t offset;
    std::vector<int64_t> per_layer_shape;
  };
  auto stacked = [&](std::vector<int64_t> shape, const std::string& what) {
    std::vector<int64_t> dims = shape;
    dims.insert(dims.begin(), L);
    return Stacked{cur.take(dims, what), std::move(shape)};
  };

  const uint64_t embed = cur.take({vocab, dim}, "token_embedding_table");
  const Stacked rms_att = stacked({dim}, "rms_att_weight");
  const Stacked wq = stacked({dim, dim}, "wq");
  const Stacked wk = stacked({kv_dim, dim}, "wk");
  const Stacked wv = stacked({kv_dim, dim}, "wv");
  const Stacked wo = stacked({dim, dim}, "wo");
  const Stacked rms_ffn = stacked({dim}, "rms_ffn_weight");
  const Stacked w1 = stacked({hidden, dim}, "w1");
  const Stacked w2 = stacked({dim, hidden}, "w2");
  const Stacked w3 = stacked({hidden, dim}, "w3");
  const uint64_t rms_final = cur.take({dim}, "rms_final_weight");
  // RoPE tables precomputed by old exports; ember computes its own.
  cur.take({seq_len, c.head_dim / 2}, "freq_cis_real");
  cur.take({seq_len, c.head_dim / 2}, "freq_cis_imag");
  std::optional<uint64_t> wcls;
  if (!c.tie_word_embeddings) wcls = cur.take({vocab, dim}, "wcls");

  auto add = [&](const std::string& name, uint64_t offset, std::vector<int64_t> shape) {
    TensorView v;
    v.name = name;
    v.dtype = DType::F32;
    v.shape = std::move(shape);
    v.nbytes = static_cast<uint64_t>(v.numel()) * 4;
    v.data = file.data() + offset;
    ckpt.tensors.emplace(name, std::move(v));
  };
  auto add_layer = [&](const std::string& name, const Stacked& s, int64_t layer) {
    uint64_t n = 1;
    for (int64_t d : s.per_layer_shape) n *= static_cast<uint64_t>(d);
    add(name, s.offset + static_cast<uint64_t>(layer) * n * 4, s.per_layer_shape);
  };

  add("model.embed_tokens.weight", embed, {vocab, dim});
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add_layer(p + "input_layernorm.weight", rms_att, l);
    add_layer(p + "self_attn.q_proj.weight", wq, l);
    add_layer(p + "self_attn.k_proj.weight", wk, l);
    add_layer(p + "self_attn.v_proj.weight", wv, l);
    add_layer(p + "self_attn.o_proj.weight", wo, l);
    add_layer(p + "post_attention_layernorm.weight", rms_ffn, l);
    add_layer(p + "mlp.gate_proj.weight", w1, l);
    add_layer(p + "mlp.down_proj.weight", w2, l);
    add_layer(p + "mlp.up_proj.weight", w3, l);
  }
  add("model.norm.weight", rms_final, {dim});
  if (wcls) add("lm_head.weight", *wcls, {vocab, dim});
  return ckpt;
}

}  // namespace ember
