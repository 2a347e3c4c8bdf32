// `ember score`: one forward pass over the tokens; per-token negative log-likelihood and
// perplexity; --logits-out writes float32 little-endian [n_tokens x vocab].
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "ember/cli/commands.h"
#include "ember/core/error.h"
#include "ember/engine/engine.h"

namespace ember::cli {

namespace {

struct ScoreOptions {
  ModelOptions model;
  std::string text;
  std::string file;
  std::string ids;
  std::string logits_out;
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

int score_command(const ScoreOptions& o) {
  bool need_tokenizer = o.ids.empty();
  LoadedModel model = load_model(o.model.load_options(need_tokenizer));
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

  EngineOptions eo;
  eo.kv_dtype = o.model.parsed_kv_dtype();
  eo.max_context = std::max<int64_t>(o.model.context, static_cast<int64_t>(ids.size()));
  Engine engine(model.weights, eo);
  Sequence seq;
  std::span<const float> logits = engine.feed(seq, ids, /*all_logits=*/true);

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
  if (!o.logits_out.empty()) {
    std::ofstream out(o.logits_out, std::ios::binary);
    if (!out) throw Error(o.logits_out + ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!out) throw Error(o.logits_out + ": write failed");
    std::fprintf(stderr, "[ember] wrote %zu x %lld float32 logits to %s\n", ids.size(),
                 static_cast<long long>(vocab), o.logits_out.c_str());
  }
  engine.release(seq);
  return 0;
}

}  // namespace

Command add_score_command(CLI::App& app) {
  auto o = std::make_shared<ScoreOptions>();
  CLI::App* cmd =
      app.add_subcommand("score", "Per-token negative log-likelihood and perplexity of a text");
  o->model.add_to(*cmd);
  o->model.add_kv_dtype_option(*cmd);
  CLI::Option* text = cmd->add_option("-p,--prompt", o->text, "Text to score");
  CLI::Option* file =
      cmd->add_option("-f,--file", o->file, "Read the text from a file")->excludes(text);
  cmd->add_option("--ids", o->ids, "Comma-separated token ids (no tokenizer, no BOS added)")
      ->excludes(text)
      ->excludes(file);
  cmd->add_option("--logits-out", o->logits_out, "Write float32 logits [n_tokens x vocab] here");
  cmd->add_option("-t,--threads", o->model.threads, "Threads (default: physical cores)");
  cmd->add_flag("--no-bos", o->no_bos, "Do not prepend BOS to text");
  cmd->add_flag("-q,--quiet", o->quiet, "Only the summary line");
  return [o] { return score_command(*o); };
}

}  // namespace ember::cli
