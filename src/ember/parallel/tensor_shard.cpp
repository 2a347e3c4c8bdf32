#include "ember/parallel/tensor_shard.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "ember/core/error.h"

namespace ember::parallel {

namespace {

struct ShardRanges {
  Range q, kv, ffn;
  Range expert, shared_expert;  // rows of each routed expert, of the shared expert
};

ShardRanges ranges_of(const ModelConfig& full, const ModelConfig& local, TensorSplit split) {
  const int64_t hd = full.head_dim;
  ShardRanges r;
  r.q = {split.rank * local.n_heads * hd, local.n_heads * hd};
  // With more ranks than KV heads, consecutive ranks share one: rank r's queries use KV head
  // r * n_kv / size.
  const int64_t kv_head = full.n_kv_heads >= split.size ? split.rank * local.n_kv_heads
                                                        : split.rank * full.n_kv_heads / split.size;
  r.kv = {kv_head * hd, local.n_kv_heads * hd};
  r.ffn = {split.rank * local.d_ffn, local.d_ffn};
  r.expert = {split.rank * local.d_expert_ffn, local.d_expert_ffn};
  r.shared_expert = {split.rank * local.d_shared_expert_ffn, local.d_shared_expert_ffn};
  return r;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class Cutter {
 public:
  explicit Cutter(Checkpoint& ckpt) : ckpt_(ckpt) {}

  // Rows [r.begin, r.begin + r.count) of a matrix (or elements of a vector), as a view.
  void rows(StoredTensor& t, Range r) {
    if (t.transposed) return in_file_layout(t, [&] { column_cut(t, {r}); });
    TensorView& v = t.view;
    const int64_t cols = v.shape.size() == 1 ? 1 : v.shape.back();
    const int64_t row_bytes =
        v.shape.size() == 1 ? dtype_row_bytes(v.dtype, 1) : dtype_row_bytes(v.dtype, cols);
    if (v.shape.size() == 1 && dtype_is_quantized(v.dtype)) return column_cut(t, {r});
    v.data += r.begin * row_bytes;
    v.shape[0] = r.count;
    v.nbytes = static_cast<uint64_t>(r.count * row_bytes);
  }

  // The column ranges `parts` of every row (a vector: of its elements), side by side, as new
  // bytes; quantized blocks must not be cut.
  void column_cut(StoredTensor& t, const std::vector<Range>& parts) {
    if (t.transposed) return in_file_layout(t, [&] { stacked_rows(t, parts); });
    TensorView& v = t.view;
    const int64_t cols = v.shape.back();
    int64_t rows = 1;  // every dimension but the last (a 3-D [experts, rows, cols] too)
    for (size_t d = 0; d + 1 < v.shape.size(); ++d) rows *= v.shape[d];
    const int64_t block = dtype_block_elems(v.dtype);
    int64_t kept = 0;
    for (const Range& p : parts) {
      if (p.begin % block != 0 || p.count % block != 0) {
        throw Error(ErrorKind::InvalidArgument,
                    "--tp: " + t.stored_name + " (" + dtype_name(v.dtype) +
                        ") would be cut inside its blocks of " + std::to_string(block) +
                        " values (columns " + std::to_string(p.begin) + ".." +
                        std::to_string(p.begin + p.count) + "); choose another --tp");
      }
      kept += p.count;
    }
    const int64_t src_row = dtype_row_bytes(v.dtype, cols),
                  dst_row = dtype_row_bytes(v.dtype, kept);
    auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(rows * dst_row));
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* out = bytes->data() + r * dst_row;
      for (const Range& p : parts) {
        const int64_t n = dtype_row_bytes(v.dtype, p.count);
        std::memcpy(out, v.data + r * src_row + dtype_row_bytes(v.dtype, p.begin),
                    static_cast<size_t>(n));
        out += n;
      }
    }
    std::vector<int64_t> shape = v.shape;
    shape.back() = kept;
    own(t, std::move(bytes), std::move(shape));
  }

  // Rows `r` of each expert of a 3-D [experts, rows, cols] tensor, still 3-D.
  void expert_rows(StoredTensor& t, Range r) {
    const std::vector<int64_t> shape = t.view.shape;
    std::vector<Range> parts;
    for (int64_t e = 0; e < shape[0]; ++e) parts.push_back({e * shape[1] + r.begin, r.count});
    TensorView& v = t.view;
    v.shape = {shape[0] * shape[1], shape[2]};  // stacked_rows reads it as rows
    stacked_rows(t, parts);
    t.view.shape = {shape[0], r.count, shape[2]};
  }

  // Row ranges `parts` stacked (a fused [q; k; v] or [gate; up] matrix, or its bias).
  void stacked_rows(StoredTensor& t, const std::vector<Range>& parts) {
    if (t.transposed) return in_file_layout(t, [&] { column_cut(t, parts); });
    TensorView& v = t.view;
    if (v.shape.size() == 1) return column_cut(t, parts);
    const int64_t row_bytes = dtype_row_bytes(v.dtype, v.shape.back());
    int64_t rows = 0;
    for (const Range& p : parts) rows += p.count;
    auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(rows * row_bytes));
    uint8_t* out = bytes->data();
    for (const Range& p : parts) {
      std::memcpy(out, v.data + p.begin * row_bytes, static_cast<size_t>(p.count * row_bytes));
      out += p.count * row_bytes;
    }
    own(t, std::move(bytes), {rows, v.shape.back()});
  }

 private:
  // A Conv1D matrix stored [in, out] (GPT-2's HF checkpoints; view.shape is the [out, in] the
  // model reads, and the loader transposes): the model's rows are the file's columns. `cut` runs
  // on the file's layout; the shape is then turned back.
  template <class Cut>
  void in_file_layout(StoredTensor& t, Cut&& cut) {
    std::vector<int64_t>& shape = t.view.shape;
    std::swap(shape.front(), shape.back());
    t.transposed = false;
    cut();
    t.transposed = true;
    std::swap(shape.front(), shape.back());
  }

  void own(StoredTensor& t, std::shared_ptr<std::vector<uint8_t>> bytes,
           std::vector<int64_t> shape) {
    t.view.data = bytes->data();
    t.view.nbytes = bytes->size();
    t.view.shape = std::move(shape);
    ckpt_.owned_tensors.push_back(std::move(bytes));
  }

  Checkpoint& ckpt_;
};

// lm_head's rows of this rank's part of the vocabulary (vocab_rows()): a view of the file's
// lm_head, or of the token table when the model ties them (the embedding itself stays whole:
// a token's row is all a step reads of it).
void split_vocabulary(Checkpoint& ckpt, TensorSplit split) {
  const Range part = vocab_rows(ckpt.config.vocab_size, split);
  const bool tied = ckpt.config.tie_word_embeddings;
  auto source = ckpt.tensors.find(tied ? "model.embed_tokens.weight" : "lm_head.weight");
  if (source == ckpt.tensors.end()) return;  // (the loader names what is missing)
  StoredTensor head = source->second;
  if (head.transposed) return;
  const int64_t row_bytes = dtype_row_bytes(head.view.dtype, head.view.shape.back());
  head.view.name = "lm_head.weight";
  head.view.data += part.begin * row_bytes;
  head.view.shape[0] = part.count;
  head.view.nbytes = static_cast<uint64_t>(part.count * row_bytes);
  head.stored_name +=
      " (rows " + std::to_string(part.begin) + ".." + std::to_string(part.begin + part.count) + ")";
  ckpt.tensors["lm_head.weight"] = head;
  ckpt.config.tie_word_embeddings = false;
  ckpt.config.lm_head_rows = part.count;
}

}  // namespace

Range vocab_rows(int64_t vocab, TensorSplit split) {
  const int64_t per = (vocab + split.size - 1) / split.size;
  const int64_t begin = std::min(vocab, split.rank * per);
  return {begin, std::min(vocab, begin + per) - begin};
}

ModelConfig shard_config(const ModelConfig& full, TensorSplit split) {
  const int n = split.size;
  const std::string tp = "--tp " + std::to_string(n);
  const auto refuse = [](const std::string& why) { throw Error::invalid_request("--tp", why); };
  if (n < 1 || split.rank < 0 || split.rank >= n) refuse(tp + ": rank out of range");
  if (full.n_heads % n != 0) {
    refuse(tp + " does not divide the " + std::to_string(full.n_heads) + " attention heads");
  }
  if (full.d_ffn % n != 0) {
    refuse(tp + " does not divide the " + std::to_string(full.d_ffn) + " FFN rows");
  }
  if (full.n_kv_heads % n != 0 && n % full.n_kv_heads != 0) {
    refuse(tp + " neither divides the " + std::to_string(full.n_kv_heads) +
           " KV heads nor is a multiple of them");
  }
  if (full.d_expert_ffn % n != 0) {
    refuse(tp + " does not divide the experts' " + std::to_string(full.d_expert_ffn) + " rows");
  }
  if (full.d_shared_expert_ffn % n != 0) {
    refuse(tp + " does not divide the shared expert's " + std::to_string(full.d_shared_expert_ffn) +
           " rows");
  }
  ModelConfig local = full;
  local.n_heads = full.n_heads / n;
  local.n_kv_heads = full.n_kv_heads >= n ? full.n_kv_heads / n : 1;
  local.d_ffn = full.d_ffn / n;
  local.tp_ranks = n;
  local.kv_head_copies = full.n_kv_heads >= n ? 1 : n / full.n_kv_heads;
  // Mixtures: every expert's gate/up rows and down columns split like a dense FFN's (the router
  // and the shared expert's gate stay whole: every rank routes the same tokens the same way).
  local.d_expert_ffn = full.d_expert_ffn / n;
  local.d_shared_expert_ffn = full.d_shared_expert_ffn / n;
  return local;
}

Checkpoint shard_checkpoint(const Checkpoint& full, TensorSplit split) {
  if (split.size <= 1) return full;
  if (full.format == CheckpointFormat::ConfigOnly) {
    throw Error::invalid_request("--tp",
                                 "--tp: --dummy weights are not split across ranks; "
                                 "write them to a file first (ember quantize)");
  }
  Checkpoint ckpt = full;
  ckpt.config = shard_config(full.config, split);
  split_vocabulary(ckpt, split);
  const ShardRanges r = ranges_of(full.config, ckpt.config, split);
  const int64_t q_all = full.config.q_dim(), kv_all = full.config.kv_dim();
  Cutter cut(ckpt);
  for (auto& [name, t] : ckpt.tensors) {
    const auto is = [&](const char* suffix) { return ends_with(name, suffix); };
    if (is(".self_attn.q_proj.weight") || is(".self_attn.q_proj.bias")) {
      cut.rows(t, r.q);
    } else if (is(".self_attn.k_proj.weight") || is(".self_attn.k_proj.bias") ||
               is(".self_attn.v_proj.weight") || is(".self_attn.v_proj.bias")) {
      cut.rows(t, r.kv);
    } else if (is(".self_attn.qkv_proj.weight") || is(".self_attn.qkv_proj.bias")) {
      cut.stacked_rows(
          t, {r.q, {q_all + r.kv.begin, r.kv.count}, {q_all + kv_all + r.kv.begin, r.kv.count}});
    } else if (full.config.qk_norm_whole && is(".self_attn.q_norm.weight")) {
      cut.rows(t, r.q);  // OLMoE: one weight per Q row, not per head_dim
    } else if (full.config.qk_norm_whole && is(".self_attn.k_norm.weight")) {
      cut.rows(t, r.kv);
    } else if (is(".self_attn.o_proj.weight")) {
      cut.column_cut(t, {r.q});
    } else if (is(".mlp.gate_proj.weight") || is(".mlp.up_proj.weight") ||
               is(".mlp.up_proj.bias")) {
      cut.rows(t, r.ffn);
    } else if (is(".mlp.gate_up_proj.weight")) {
      cut.stacked_rows(t, {r.ffn, {full.config.d_ffn + r.ffn.begin, r.ffn.count}});
    } else if (is(".mlp.down_proj.weight")) {
      cut.column_cut(t, {r.ffn});
    } else if (is(".mlp.experts.gate_proj.weight") || is(".mlp.experts.up_proj.weight")) {
      cut.expert_rows(t, r.expert);  // [E, F, D]
    } else if (is(".mlp.experts.down_proj.weight")) {
      cut.column_cut(t, {r.expert});  // [E, D, F]
    } else if (name.find(".mlp.experts.") != std::string::npos &&
               (is(".gate_proj.weight") || is(".up_proj.weight"))) {
      cut.rows(t, r.expert);  // an HF checkpoint's expert apart: [F, D]
    } else if (name.find(".mlp.experts.") != std::string::npos && is(".down_proj.weight")) {
      cut.column_cut(t, {r.expert});
    } else if (is(".mlp.shared_expert.gate_proj.weight") ||
               is(".mlp.shared_expert.up_proj.weight")) {
      cut.rows(t, r.shared_expert);
    } else if (is(".mlp.shared_expert.down_proj.weight")) {
      cut.column_cut(t, {r.shared_expert});
    }
    // O's and down's biases stay whole on every rank: the decoder adds them after the partial
    // sums are reduced, when every rank holds the whole sum.
  }
  return ckpt;
}

}  // namespace ember::parallel
