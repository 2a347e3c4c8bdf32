// `ember score`: one forward pass over the tokens; per-token negative log-likelihood and
// perplexity; --logits-out writes float32 little-endian [n_tokens x vocab]. --kv-baseline D runs
// the tokens a second time with a KV cache of dtype D and reports how far this run's next-token
// distributions are from that one's (mean and max KL divergence, top-1 agreement, both
// perplexities): the measure of a quantized KV cache.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "ember/backend/kv_row_format.h"
#include "ember/cli/commands.h"
#include "ember/core/error.h"
#include "ember/engine/llm_engine.h"
#include "ember/parallel/communicator.h"

namespace ember::cli {

namespace {

struct ScoreOptions {
  ModelOptions model;
  std::string text;
  std::string file;
  std::string ids;
  std::string logits_out;
  std::string kv_baseline;
  bool no_bos = false;
  bool quiet = false;
};

std::vector<int32_t> parse_ids(const std::string& list) {
  std::vector<int32_t> ids;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX) {
      throw Error("--ids: '" + item + "' is not a token id");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// Logits of every prompt position, [n_tokens, vocab], in one engine step.
std::vector<float> prompt_logits(const LoadedModel& model, const std::vector<int32_t>& ids,
                                 const LLMEngineOptions& eo) {
  LLMEngine engine(model.weights, nullptr, eo);
  GenerationRequest req;
  req.prompt = ids;
  req.max_tokens = 0;  // the prompt only
  req.prompt_logits = true;
  std::shared_ptr<RequestStream> stream = engine.add_request(std::move(req));
  std::vector<float> logits;
  logits.reserve(ids.size() * static_cast<size_t>(model.weights.config.vocab_size));
  run_until_finished(engine, *stream, [&](StreamEvent& e) {
    logits.insert(logits.end(), e.prompt_logits.begin(), e.prompt_logits.end());
    if (e.finished && e.finish_reason == FinishReason::Error) throw Error(e.error);
  });
  return logits;
}

DType parse_kv_baseline(const std::string& text) {
  const std::optional<DType> d = dtype_from_name(text);
  if (!d || !kv_dtype_supported(*d)) {
    throw Error::invalid_request("--kv-baseline", "unknown --kv-baseline '" + text +
                                                      "' (expected f32, f16, bf16, q8_0 or q4_0)");
  }
  return *d;
}

// log-softmax of z [vocab] in double.
std::vector<double> log_softmax(const float* z, int64_t vocab) {
  double max = z[0];
  for (int64_t v = 1; v < vocab; ++v) max = std::max<double>(max, z[v]);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(z[v]) - max);
  const double lse = std::log(sum) + max;
  std::vector<double> out(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) out[static_cast<size_t>(v)] = z[v] - lse;
  return out;
}

struct Divergence {
  double mean_kl = 0, max_kl = 0;  // KL(baseline || this run), nats, over predicting positions
  double top1_agreement = 0;       // fraction of positions with the same argmax
  double ppl_base = 0, ppl_this = 0;
  int64_t positions = 0;
};

// Positions 0 .. n-2 (those that predict a next token) of two runs' logits [n, vocab].
Divergence compare_distributions(const std::vector<float>& base, const std::vector<float>& run,
                                 const std::vector<int32_t>& ids, int64_t vocab) {
  Divergence d;
  double kl_sum = 0, nll_base = 0, nll_run = 0;
  int64_t agree = 0;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const std::vector<double> lp = log_softmax(base.data() + i * static_cast<size_t>(vocab), vocab);
    const std::vector<double> lq = log_softmax(run.data() + i * static_cast<size_t>(vocab), vocab);
    double kl = 0;
    for (size_t v = 0; v < lp.size(); ++v) kl += std::exp(lp[v]) * (lp[v] - lq[v]);
    kl_sum += kl;
    d.max_kl = std::max(d.max_kl, kl);
    agree += std::max_element(lp.begin(), lp.end()) - lp.begin() ==
             std::max_element(lq.begin(), lq.end()) - lq.begin();
    nll_base -= lp[static_cast<size_t>(ids[i + 1])];
    nll_run -= lq[static_cast<size_t>(ids[i + 1])];
    ++d.positions;
  }
  if (d.positions > 0) {
    const auto n = static_cast<double>(d.positions);
    d.mean_kl = kl_sum / n;
    d.top1_agreement = static_cast<double>(agree) / n;
    d.ppl_base = std::exp(nll_base / n);
    d.ppl_this = std::exp(nll_run / n);
  }
  return d;
}

void print_divergence(const Divergence& d, const EngineOptions& base, const EngineOptions& run) {
  if (d.positions == 0) {
    std::printf("kv %s vs %s: no position predicts a next token\n", run.kv_dtype_label().c_str(),
                base.kv_dtype_label().c_str());
    return;
  }
  std::printf(
      "kv %s vs %s: mean KL %.6g, max KL %.6g over %lld positions, top-1 agreement %.4f, "
      "perplexity %.6f vs %.6f (%+.3f%%)\n",
      run.kv_dtype_label().c_str(), base.kv_dtype_label().c_str(), d.mean_kl, d.max_kl,
      static_cast<long long>(d.positions), d.top1_agreement, d.ppl_this, d.ppl_base,
      100.0 * (d.ppl_this / d.ppl_base - 1.0));
}

int score_command(const ScoreOptions& o) {
  std::optional<DType> kv_baseline;  // checked before the model loads
  if (!o.kv_baseline.empty()) kv_baseline = parse_kv_baseline(o.kv_baseline);
  if (o.model.lookup > 0 || o.model.wants_draft()) {
    throw Error::invalid_request(o.model.lookup > 0 ? "--lookup" : "--draft",
                                 "score computes the prompt's logits and generates nothing: "
                                 "speculative decoding does not apply");
  }
  bool need_tokenizer = o.ids.empty();
  LoadedModel model = o.model.load(need_tokenizer);
  std::vector<int32_t> ids;
  if (!o.ids.empty()) {
    ids = parse_ids(o.ids);
  } else {
    std::string text = o.text;
    if (!o.file.empty()) {
      std::ifstream in(o.file, std::ios::binary);
      if (!in) throw Error(o.file + ": cannot read");
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    ids = model.tokenizer->encode(text, !o.no_bos);
  }
  if (ids.empty()) throw Error("score: no tokens to score");
  const int64_t vocab = model.weights.config.vocab_size;
  for (int32_t id : ids) {
    if (id >= vocab)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(vocab) + ")");
  }

  LLMEngineOptions eo = o.model.engine_options();
  eo.engine.max_context = std::max<int64_t>(o.model.context, static_cast<int64_t>(ids.size()));
  eo.scheduler.max_batched_tokens = static_cast<int64_t>(ids.size());  // one forward step
  const std::vector<float> logits = prompt_logits(model, ids, eo);

  // Token i+1 is predicted by the logits of position i: NLL = logsumexp(z) - z[target].
  double total_nll = 0;
  int64_t scored = 0;
  if (!o.quiet) std::printf("%6s %8s %12s  %s\n", "pos", "token", "nll", "piece");
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const float* z = logits.data() + i * static_cast<size_t>(vocab);
    double max = z[0];
    for (int64_t v = 1; v < vocab; ++v) max = std::max<double>(max, z[v]);
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(z[v]) - max);
    double nll = std::log(sum) + max - z[ids[i + 1]];
    total_nll += nll;
    ++scored;
    if (!o.quiet) {
      std::string piece = model.tokenizer ? model.tokenizer->piece(ids[i + 1]) : "";
      std::printf("%6zu %8d %12.6f  %s\n", i + 1, ids[i + 1], nll, piece.c_str());
    }
  }
  if (scored > 0) {
    double mean = total_nll / static_cast<double>(scored);
    std::printf("tokens %zu, scored %lld, mean nll %.6f, perplexity %.6f\n", ids.size(),
                static_cast<long long>(scored), mean, std::exp(mean));
  } else {
    std::printf("tokens %zu, scored 0 (need at least two tokens for a perplexity)\n", ids.size());
  }
  if (kv_baseline) {
    LLMEngineOptions base = eo;
    base.engine.kv_dtype = *kv_baseline;
    base.engine.kv_dtype_v.reset();
    base.engine.kv_rotate = false;
    const std::vector<float> base_logits = prompt_logits(model, ids, base);
    print_divergence(compare_distributions(base_logits, logits, ids, vocab), base.engine,
                     eo.engine);
  }
  if (!o.logits_out.empty() && parallel::is_first_rank()) {  // (every rank has the logits)
    std::ofstream out(o.logits_out, std::ios::binary);
    if (!out) throw Error(o.logits_out + ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!out) throw Error(o.logits_out + ": write failed");
    std::fprintf(stderr, "[ember] wrote %zu x %lld float32 logits to %s\n", ids.size(),
                 static_cast<long long>(vocab), o.logits_out.c_str());
  }
  return 0;
}

}  // namespace

Command add_score_command(CLI::App& app) {
  auto o = std::make_shared<ScoreOptions>();
  CLI::App* cmd =
      app.add_subcommand("score", "Per-token negative log-likelihood and perplexity of a text");
  o->model.add_to(*cmd, ModelOptions::kRunsModel);
  CLI::Option* text = cmd->add_option("-p,--prompt", o->text, "Text to score");
  CLI::Option* file =
      cmd->add_option("-f,--file", o->file, "Read the text from a file")->excludes(text);
  cmd->add_option("--ids", o->ids, "Comma-separated token ids (no tokenizer, no BOS added)")
      ->excludes(text)
      ->excludes(file);
  cmd->add_option("--logits-out", o->logits_out, "Write float32 logits [n_tokens x vocab] here");
  cmd->add_option("--kv-baseline", o->kv_baseline,
                  "Also run with a KV cache of this dtype (e.g. f16) and report the KL divergence "
                  "of this run's next-token distributions from it, top-1 agreement and both "
                  "perplexities");
  cmd->add_flag("--no-bos", o->no_bos, "Do not prepend BOS to text");
  cmd->add_flag("-q,--quiet", o->quiet, "Only the summary line");
  return [o] { return score_command(*o); };
}

}  // namespace ember::cli
