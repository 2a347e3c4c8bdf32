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
#include <map>
#include <optional>
#include <string>
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

Llama2cFile open_llama2c_file(const std::string& path) {
  Llama2cFile l2c;
  l2c.mapping = std::make_shared<MappedFile>(path);
  const MappedFile& file = *l2c.mapping;
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
  Llama2cHeader& header = l2c.header;
  header.dim = h[0];
  header.hidden_dim = h[1];
  header.n_layers = h[2];
  header.n_heads = h[3];
  header.n_kv_heads = h[4];
  header.vocab_size = h[5] < 0 ? -int64_t{h[5]} : h[5];
  header.shared_classifier = h[5] > 0;
  header.seq_len = h[6];
  if (header.dim % header.n_heads != 0) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         "invalid llama2.c header: dim " + std::to_string(header.dim) +
                             " is not a multiple of n_heads " + std::to_string(header.n_heads));
  }
  return l2c;
}

std::map<std::string, TensorView> llama2c_tensor_views(const Llama2cFile& l2c) {
  const Llama2cHeader& h = l2c.header;
  const MappedFile& file = *l2c.mapping;
  const int64_t dim = h.dim, hidden = h.hidden_dim, vocab = h.vocab_size, kv_dim = h.kv_dim();
  const int64_t L = h.n_layers;
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
  cur.take({h.seq_len, h.head_size() / 2}, "freq_cis_real");
  cur.take({h.seq_len, h.head_size() / 2}, "freq_cis_imag");
  std::optional<uint64_t> wcls;
  if (!h.shared_classifier) wcls = cur.take({vocab, dim}, "wcls");

  std::map<std::string, TensorView> tensors;
  auto add = [&](const std::string& name, uint64_t offset, std::vector<int64_t> shape) {
    TensorView v;
    v.name = name;
    v.dtype = DType::F32;
    v.shape = std::move(shape);
    v.nbytes = static_cast<uint64_t>(v.numel()) * 4;
    v.data = file.data() + offset;
    tensors.emplace(name, std::move(v));
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
  return tensors;
}

}  // namespace ember
