#include "ember/trace/trace_recorder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace ember {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double norm2(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double{x[i]} * x[i];
  return std::sqrt(s);
}

// softmax(logits) in double, as probabilities.
std::vector<float> probabilities(std::span<const float> logits) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(double{v} - mx);
  std::vector<float> p(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = static_cast<float>(std::exp(double{logits[i]} - mx) / sum);
  }
  return p;
}

// The k most probable tokens, highest first (ties: the lower id first).
std::vector<LensEntry> top_k(const std::vector<float>& p, int64_t k) {
  std::vector<int32_t> ids(p.size());
  std::iota(ids.begin(), ids.end(), 0);
  k = std::min<int64_t>(k, static_cast<int64_t>(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] ||
           (p[static_cast<size_t>(a)] == p[static_cast<size_t>(b)] && a < b);
  });
  std::vector<LensEntry> top;
  for (int64_t i = 0; i < k; ++i) {
    top.push_back(
        {ids[static_cast<size_t>(i)], p[static_cast<size_t>(ids[static_cast<size_t>(i)])]});
  }
  return top;
}

// Where `token` ranks in p (0: most probable; ties with lower ids rank first).
void rank_of(const std::vector<float>& p, int32_t token, LensCell& cell) {
  const float pt = p[static_cast<size_t>(token)];
  int64_t rank = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] > pt || (p[i] == pt && static_cast<int32_t>(i) < token)) ++rank;
  }
  cell.next_token = token;
  cell.next_rank = rank;
  cell.next_p = pt;
}

}  // namespace

TraceRecorder::TraceRecorder(const ModelConfig& config, const TraceOptions& options)
    : config_(config), options_(options) {
  const auto L = static_cast<size_t>(config.n_layers);
  k_.resize(L);
  v_.resize(L);
  lens_.resize(L + 1);
  attention_.assign(L, std::vector<std::vector<AttentionRow>>(static_cast<size_t>(config.n_heads)));
  residuals_.resize(L + 1);
}

bool TraceRecorder::row_selected(int64_t position) const {
  if (position >= n_prompt_ - 1) return true;  // the last prompt position and every generated one
  const int64_t stride =
      std::max<int64_t>(1, (n_prompt_ + options_.max_rows - 1) / options_.max_rows);
  return (n_prompt_ - 1 - position) % stride == 0;
}

void TraceRecorder::stop(std::string why) {
  if (problem_.empty()) problem_ = std::move(why);
  active_ = false;
  pending_lens_.clear();
}

void TraceRecorder::begin_step(const Batch& batch) {
  active_ = false;
  if (!problem_.empty()) return;
  const int64_t index = batch.observed_sequence >= 0  ? batch.observed_sequence
                        : batch.sequences.size() == 1 ? 0
                                                      : -1;
  if (index < 0) {
    return stop("a step held " + std::to_string(batch.sequences.size()) +
                " sequences and none was marked as the traced one");
  }
  const BatchSequence& seq = batch.sequences[static_cast<size_t>(index)];
  if (seq.start_position != static_cast<int64_t>(tokens_.size())) {
    return stop("the request's step " + std::to_string(steps_.size()) + " started at position " +
                std::to_string(seq.start_position) + " where the trace had " +
                std::to_string(tokens_.size()) + " (preempted and recomputed)");
  }
  row0_ = 0;
  for (int64_t i = 0; i < index; ++i) row0_ += batch.sequences[static_cast<size_t>(i)].n_tokens;
  const auto first_token = batch.tokens.begin() + row0_;
  if (seq.n_tokens > 0 && !pending_lens_.empty()) settle_lens(*first_token);
  if (n_prompt_ < 0) n_prompt_ = seq.n_tokens;
  tokens_.insert(tokens_.end(), first_token, first_token + seq.n_tokens);
  step_first_ = seq.start_position;
  step_tokens_ = seq.n_tokens;
  TraceStep step;
  step.first_position = step_first_;
  step.n_tokens = step_tokens_;
  step.batch_tokens = batch.size();
  step.batch_sequences = static_cast<int64_t>(batch.sequences.size());
  steps_.push_back(std::move(step));
  step_start_ = now_seconds();
  active_ = true;
}

void TraceRecorder::attention_inputs(int64_t layer, std::span<const float> q,
                                     std::span<const float> k, std::span<const float> v,
                                     const AttentionScores& scores) {
  if (!active_) return;
  const int64_t hd = config_.head_dim, kv_dim = config_.n_kv_heads * hd;
  const int64_t q_dim = config_.n_heads * hd;
  auto& ks = k_[static_cast<size_t>(layer)];
  auto& vs = v_[static_cast<size_t>(layer)];
  const auto rows = [&](std::span<const float> x, int64_t width) {
    return x.subspan(static_cast<size_t>(row0_ * width), static_cast<size_t>(step_tokens_ * width));
  };
  const std::span<const float> k_rows = rows(k, kv_dim), v_rows = rows(v, kv_dim);
  ks.insert(ks.end(), k_rows.begin(), k_rows.end());
  vs.insert(vs.end(), v_rows.begin(), v_rows.end());
  if (static_cast<int64_t>(ks.size()) != (step_first_ + step_tokens_) * kv_dim) {
    return stop("layer " + std::to_string(layer) + " showed K rows out of step");
  }
  const float* q_rows = rows(q, q_dim).data();
  for (int64_t t = 0; t < step_tokens_; ++t) {
    const int64_t position = step_first_ + t;
    if (!row_selected(position)) continue;
    for (int64_t h = 0; h < config_.n_heads; ++h) {
      attention_row(layer, h, position, q_rows + (t * config_.n_heads + h) * hd, scores);
    }
  }
}

// softmax over keys [first_key, position] of s_j = scale * q . k_j (soft-capped), in double.
void TraceRecorder::attention_row(int64_t layer, int64_t head, int64_t position, const float* q,
                                  const AttentionScores& scores) {
  const int64_t hd = config_.head_dim, kv_dim = config_.n_kv_heads * hd;
  const int64_t g = head / (config_.n_heads / config_.n_kv_heads);
  const int64_t first = scores.first_key(position + 1), n = position + 1 - first;
  const float* keys = k_[static_cast<size_t>(layer)].data();
  std::vector<double> s(static_cast<size_t>(n));
  double mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = keys + (first + j) * kv_dim + g * hd;
    double dot = 0;
    for (int64_t d = 0; d < hd; ++d) dot += double{q[d]} * kj[d];
    double score = scores.scale * dot;
    if (scores.softcap > 0) score = scores.softcap * std::tanh(score / scores.softcap);
    s[static_cast<size_t>(j)] = score;
    mx = std::max(mx, score);
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  AttentionRow row{position, first, n, 1, {}};
  row.bin_size = std::max<int64_t>(1, (n + options_.max_keys - 1) / options_.max_keys);
  row.weights.assign(static_cast<size_t>((n + row.bin_size - 1) / row.bin_size), 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    row.weights[static_cast<size_t>(j / row.bin_size)] +=
        static_cast<float>(s[static_cast<size_t>(j)] / sum);
  }
  attention_[static_cast<size_t>(layer)][static_cast<size_t>(head)].push_back(std::move(row));
}

void TraceRecorder::residual(int64_t layer, Sublayer sublayer, std::span<const float> delta,
                             std::span<const float> after) {
  if (!active_) return;
  const int64_t D = config_.d_model;
  delta = delta.subspan(static_cast<size_t>(row0_ * D), static_cast<size_t>(step_tokens_ * D));
  after = after.subspan(static_cast<size_t>(row0_ * D), static_cast<size_t>(step_tokens_ * D));
  ResidualStats& r = residuals_[static_cast<size_t>(layer + 1)];
  const auto size = static_cast<size_t>(step_first_ + step_tokens_);
  for (auto* v : {&r.residual_norm, &r.attention_norm, &r.mlp_norm, &r.cosine_to_previous}) {
    if (v->size() < size) v->resize(size, 0.0f);
  }
  const bool end_of_layer = layer < 0 || sublayer == Sublayer::Mlp;
  for (int64_t t = 0; t < step_tokens_; ++t) {
    const auto at = static_cast<size_t>(step_first_ + t);
    const float* x = after.data() + t * D;
    if (layer >= 0) {
      (sublayer == Sublayer::Attention ? r.attention_norm : r.mlp_norm)[at] =
          static_cast<float>(norm2(delta.data() + t * D, D));
    }
    if (!end_of_layer) continue;
    r.residual_norm[at] = static_cast<float>(norm2(x, D));
    if (layer >= 0) {
      const float* before = previous_residual_.data() + t * D;
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += double{x[i]} * before[i];
      const double denom = norm2(x, D) * norm2(before, D);
      r.cosine_to_previous[at] = denom > 0 ? static_cast<float>(dot / denom) : 0.0f;
    }
  }
  if (end_of_layer) previous_residual_.assign(after.begin(), after.end());
}

void TraceRecorder::logit_lens(int64_t layer, std::span<const float> logits) {
  if (!active_) return;
  const int64_t V = config_.vocab_size;
  auto& cells = lens_[static_cast<size_t>(layer + 1)];
  cells.resize(static_cast<size_t>(step_first_ + step_tokens_));
  if (layer < 0) pending_lens_.clear();
  for (int64_t t = 0; t < step_tokens_; ++t) {
    const int64_t position = step_first_ + t;
    if (!row_selected(position)) continue;  // as attention: max_rows prompt positions
    std::vector<float> p =
        probabilities(logits.subspan(static_cast<size_t>(t * V), static_cast<size_t>(V)));
    LensCell& cell = cells[static_cast<size_t>(position)];
    cell.top = top_k(p, options_.top_k);
    if (t + 1 < step_tokens_) {
      rank_of(p, tokens_[static_cast<size_t>(position + 1)], cell);
    } else {
      pending_lens_.push_back(std::move(p));  // its next token is sampled after the step
    }
  }
}

void TraceRecorder::settle_lens(int32_t next_token) {
  const auto position = static_cast<size_t>(step_first_ + step_tokens_ - 1);
  for (size_t l = 0; l < pending_lens_.size(); ++l) {
    rank_of(pending_lens_[l], next_token, lens_[l][position]);
  }
  pending_lens_.clear();
}

void TraceRecorder::finish(int64_t generated, int32_t last_token) {
  const int64_t ran = static_cast<int64_t>(tokens_.size()) - std::max<int64_t>(n_prompt_, 0);
  if (generated <= ran || last_token < 0 || !problem_.empty()) {
    pending_lens_.clear();
    return;
  }
  if (!pending_lens_.empty()) settle_lens(last_token);
  pending_lens_.clear();
  tokens_.push_back(last_token);
}

void TraceRecorder::op(const OpRecord& record) {
  if (!active_) return;
  std::vector<TraceOp>& ops = steps_.back().ops;
  auto it = std::find_if(ops.begin(), ops.end(), [&](const TraceOp& o) {
    return o.group == record.group && o.name == record.name;
  });
  if (it == ops.end()) it = ops.insert(ops.end(), TraceOp{record.group, record.name});
  ++it->calls;
  it->seconds += record.seconds;
  it->flops += record.flops;
  it->bytes += record.bytes;
}

void TraceRecorder::end_step(std::span<const float> /*logits*/) {
  if (!active_) return;
  TraceStep& step = steps_.back();
  step.seconds = now_seconds() - step_start_;
  if (kv_probe_) {
    const KvSnapshot kv = kv_probe_();
    step.kv_blocks_used = kv.blocks_used;
    step.kv_bytes_held = kv.bytes_held;
    step.prefix_hit_blocks = kv.prefix_hit_blocks;
  }
}

}  // namespace ember
