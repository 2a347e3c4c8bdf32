// `ember trace`: runs a prompt (and N generated tokens) once with the model observed
// (trace/trace_recorder.h) and writes one self-contained HTML page and/or the same data as JSON.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>

#include "ember/cli/commands.h"
#include "ember/core/error.h"
#include "ember/engine/llm_engine.h"
#include "ember/trace/trace_page.h"
#include "ember/trace/trace_report.h"
#include "ember/trace/trace_run.h"

namespace ember::cli {

namespace {

struct TraceCommandOptions {
  ModelOptions model;
  SamplingOptions sampling;
  std::string prompt;
  int64_t n_predict = 8;
  bool no_bos = false;
  std::string html = "trace.html";
  std::string json;
  TraceOptions trace;
  bool no_probe = false;
  int probe_mb = 256;
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(ErrorKind::InvalidArgument, path + ": cannot write the trace there");
  out << text;
  if (!out.flush()) throw Error(path + ": writing the trace failed");
}

int trace_command(const TraceCommandOptions& o) {
  if (o.model.lookup > 0 || o.model.wants_draft()) {
    throw Error(ErrorKind::InvalidArgument,
                "ember trace: speculative decoding (--lookup, --draft, --draft-dtype, "
                "--draft-layers) is not traced; drop those options");
  }
  if (o.model.backend == "cuda") {
    throw Error(ErrorKind::InvalidArgument,
                "ember trace: the cuda backend is not traced yet (its ops run asynchronously, so "
                "op times would be wrong); use --backend cpu or reference");
  }
  if (o.html.empty() && o.json.empty()) {
    throw Error(ErrorKind::InvalidArgument,
                "ember trace: -o and --json are both empty: nothing to write");
  }
  if (o.trace.top_k < 1 || o.trace.max_rows < 1 || o.trace.max_keys < 1) {
    throw Error(ErrorKind::InvalidArgument,
                "ember trace: --lens-k, --max-rows and --max-keys must be >= 1");
  }
  if (o.model.tp != 1 || o.model.pp != 1)
    throw Error::invalid_request("--tp", "trace --tp is not built yet");
  LoadedModel model = load_model(o.model.load_options(/*need_tokenizer=*/true));
  const Tokenizer& tok = *model.tokenizer;
  std::vector<int32_t> ids = tok.encode(o.prompt, !o.no_bos && tok.add_bos_default());
  if (ids.empty()) throw Error("the prompt is empty and BOS is disabled: nothing to trace");

  LLMEngineOptions eo = o.model.engine_options();
  eo.engine.prefix_caching = false;
  eo.scheduler.max_batched_tokens =
      std::max<int64_t>(eo.scheduler.max_batched_tokens, static_cast<int64_t>(ids.size()));
  LLMEngine engine(model.weights, &tok, eo);
  TraceRecorder recorder(model.weights.config, o.trace);
  TraceContext context;
  context.model_name = model.checkpoint.path;
  context.weight_dtype = dtype_name(model.weights.matrix_dtype());
  context.kv = engine.runner().kv_shape_of_every_layer();
  context.tokenizer = &tok;
  context.machine = measure_trace_machine(*model.weights.backend, !o.no_probe, o.probe_mb);

  GenerationRequest req;
  req.prompt = ids;
  req.sampling = o.sampling.params();
  req.max_tokens = o.n_predict;
  req.stop_at_context = true;
  req.strip_leading_space = o.prompt.empty();
  const TracedRun run = run_traced(engine, std::move(req), recorder);

  const nlohmann::ordered_json data = trace_json(recorder, context);
  if (!o.json.empty()) write_file(o.json, dump_trace_json(data));
  if (!o.html.empty()) write_file(o.html, trace_page_html(data));
  std::fprintf(stderr, "[ember] trace: %zu prompt tokens, %lld generated (%s): %s%s%s\n",
               ids.size(), static_cast<long long>(run.generated), run.text.c_str(), o.html.c_str(),
               !o.html.empty() && !o.json.empty() ? ", " : "", o.json.c_str());
  return 0;
}

}  // namespace

Command add_trace_command(CLI::App& app) {
  auto o = std::make_shared<TraceCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "trace",
      "Run a prompt once with the model observed and write a page (logit lens, attention maps, "
      "residual stream, KV cache, roofline of this run) and/or its data as JSON");
  o->model.add_to(*cmd, ModelOptions::kRunsModel);
  o->sampling.sampling.temperature = 0.0f;  // greedy unless asked: a trace is for looking again
  o->sampling.add_to(*cmd);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (default: empty, i.e. start from BOS)");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate after the prompt")
      ->capture_default_str();
  cmd->add_flag("--no-bos", o->no_bos, "Do not prepend BOS");
  cmd->add_option("-o,--output", o->html, "The HTML page (self-contained; empty: none)")
      ->capture_default_str();
  cmd->add_option("--json", o->json, "The same data as JSON");
  cmd->add_option("--lens-k", o->trace.top_k, "Logit lens: top tokens kept per layer and position")
      ->capture_default_str();
  cmd->add_flag(
      "--no-lens", [o](int64_t) { o->trace.logit_lens = false; },
      "Skip the logit lens (it runs the lm_head once per layer and step)");
  cmd->add_option("--max-rows", o->trace.max_rows,
                  "Attention: prompt positions with rows (evenly spaced, the last included; "
                  "every generated position has one)")
      ->capture_default_str();
  cmd->add_option("--max-keys", o->trace.max_keys,
                  "Attention: keys per row before neighbouring keys are summed into bins")
      ->capture_default_str();
  cmd->add_flag("--no-probe", o->no_probe,
                "Skip measuring the machine's bandwidth and compute peaks (the roofline then has "
                "no ceilings)");
  cmd->add_option("--probe-mb", o->probe_mb, "The bandwidth probe's buffer (MiB)")
      ->capture_default_str();
  return [o] { return trace_command(*o); };
}

}  // namespace ember::cli
