// `ember serve`: the OpenAI-compatible HTTP server over the continuous-batching engine.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "ember/cli/commands.h"
#include "ember/cli/rank_follower.h"
#include "ember/core/error.h"
#include "ember/engine/async_engine.h"
#include "ember/kv/capacity_plan.h"
#include "ember/parallel/communicator.h"
#include "ember/parallel/step_mirror.h"
#include "ember/server/http_server.h"
#include "ember/tokenizer/chat_template.h"

namespace ember::cli {

namespace {

struct ServeOptions {
  ModelOptions model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t max_seqs = 32;
  int64_t max_batched_tokens = 512;
  int64_t kv_blocks = 0;
  std::string mem;         // --mem: weights + KV budget
  int64_t block_size = 0;  // 0: default_kv_block_size (64 for a per-channel q4_0 K cache, else 16)
  bool no_prefix_cache = false;
  int64_t max_waiting = 128;
  std::string chat_template;
  std::string model_name;
  double drain_timeout = 10.0;
  std::string api_key;       // --api-key
  std::string api_key_file;  // --api-key-file
  bool strict_api = false;
  bool allow_trace = false;
  std::string ssl_cert, ssl_key;
  std::vector<std::string> cors_origins;
  std::string max_body = "16MiB";
  server::ConnectionLimits connections;
  std::string max_header_bytes = "64KiB";
  KvOffloadOptions offload;
};

// --max-connections, --header-timeout, --body-timeout, --max-header-bytes, --keep-alive-requests,
// each checked.
server::ConnectionLimits connection_limits(const ServeOptions& o) {
  server::ConnectionLimits c = o.connections;
  if (c.max_connections < 1) {
    throw Error::invalid_request("--max-connections", "--max-connections must be at least 1");
  }
  if (c.max_connections < o.max_seqs + 1) {
    throw Error::invalid_request("--max-connections",
                                 "--max-connections must exceed --max-seqs (each running request "
                                 "holds a connection; /health needs one more)");
  }
  if (!(c.header_timeout_seconds > 0) || !(c.body_timeout_seconds > 0)) {
    throw Error::invalid_request("--header-timeout",
                                 "--header-timeout and --body-timeout must be positive seconds");
  }
  if (c.keep_alive_requests < 1) {
    throw Error::invalid_request("--keep-alive-requests",
                                 "--keep-alive-requests must be at least 1");
  }
  const int64_t header_bytes = parse_byte_size(o.max_header_bytes);
  if (header_bytes < 1024) {
    throw Error::invalid_request("--max-header-bytes", "--max-header-bytes must be at least 1KiB");
  }
  c.max_header_bytes = static_cast<size_t>(header_bytes);
  return c;
}

// The key from --api-key or the first line of --api-key-file ("" for none).
std::string resolve_api_key(const ServeOptions& o) {
  if (!o.api_key.empty() && !o.api_key_file.empty()) {
    throw Error::invalid_request("--api-key-file", "give --api-key or --api-key-file, not both");
  }
  if (o.api_key_file.empty()) return o.api_key;
  std::ifstream in(o.api_key_file);
  if (!in) {
    throw Error::invalid_request("--api-key-file",
                                 "--api-key-file " + o.api_key_file + ": cannot read the file");
  }
  std::string key;
  std::getline(in, key);
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t'))
    key.pop_back();
  if (key.empty()) {
    throw Error::invalid_request("--api-key-file",
                                 "--api-key-file " + o.api_key_file + ": the first line is empty");
  }
  return key;
}

// The id /v1/models reports: the model file's stem or the directory's name.
std::string model_id_for(const std::string& path) {
  std::filesystem::path p(path);
  if (p.filename() == "config.json") p = p.parent_path();
  std::string stem = p.filename().empty() ? p.parent_path().filename().string() : p.stem().string();
  return stem.empty() ? "ember" : stem;
}

// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// What a KV pool costs beside the weights (model_runner.h): its blocks, a window pool, the exact
// rows of per-channel K, and a draft model's K/V in every block and its weights.
KvPoolCosts serve_pool_costs(const LoadedModel& model, const EngineOptions& eo,
                             const SpeculativeOptions& spec) {
  KvPoolCosts costs = kv_pool_costs(model.weights, eo);
  if (spec.uses_draft()) {
    // --draft / --draft-dtype: weights of its own; --draft-layers alone: the model's first layers.
    add_draft_pool_costs(spec.draft != nullptr ? *spec.draft : model.weights, spec.draft_layers,
                         spec.draft != nullptr, eo, costs);
  }
  return costs;
}

// How many KV blocks the pool gets, and why: --kv-blocks as given; else what --mem leaves beside
// the weights; else max-seqs x context worth, capped at half the memory available now (a small
// model must not reserve gigabytes it will never use, nor a large one more than the machine has).
// Beside the pool's own blocks the budget pays for what grows with it (serve_pool_costs).
int64_t kv_pool_blocks(const ServeOptions& o, const LoadedModel& model, const EngineOptions& eo,
                       const KvPoolCosts& costs, std::string* how) {
  if (o.kv_blocks > 0) {
    *how = "--kv-blocks";
    return o.kv_blocks;
  }
  const ModelConfig& c = model.weights.config;
  const int64_t weights = model.weights.matrix_bytes();
  if (!o.mem.empty()) {
    const int64_t budget = parse_byte_size(o.mem);
    const int64_t blocks = costs.blocks_within(budget - weights);
    if (blocks < 1) {
      throw Error::invalid_request("--mem", "--mem " + o.mem +
                                                " leaves no room for the KV cache "
                                                "beside " +
                                                format_bytes(double(weights)) + " of weights");
    }
    *how = "--mem " + o.mem + " minus the weights";
    return blocks;
  }
  const int64_t model_max = c.max_position_embeddings > 0 ? c.max_position_embeddings : 4096;
  const int64_t context = eo.max_context > 0 ? eo.max_context : std::min<int64_t>(model_max, 4096);
  const int64_t wanted = (context + eo.block_size - 1) / eo.block_size * o.max_seqs;
  // MemAvailable counts the page cache the mapped weights sit in, so the cap is half of it for
  // the cache alone (a model larger than that still gets a pool).
  const int64_t available = available_memory();
  const int64_t cap =
      available > 0 ? std::max<int64_t>(1, costs.blocks_within(available / 2)) : wanted;
  *how = wanted <= cap ? "max-seqs x context" : "half the available memory";
  return std::min(wanted, cap);
}

// The capacity plan (kv/capacity_plan.h) of what is served: KV per token and for max-seqs
// sequences of the full context, beside the weights (no bandwidth probe: it would delay startup;
// `ember inspect --plan` measures it).
void print_serve_plan(const LoadedModel& model, const AsyncEngine& engine,
                      const AsyncEngineOptions& so, const ServeOptions& o,
                      const KvPoolCosts& costs) {
  CapacityPlanInput in = capacity_input(model.weights.config, engine.engine().max_context(),
                                        o.max_seqs, so.engine.engine.kv_dtype);
  in.kv_dtype_v = so.engine.engine.kv_dtype_of_v();
  in.k_channel_scales = so.engine.engine.k_channel_scales();
  in.block_size = so.engine.engine.block_size;
  // With a draft model a sliding-window model keeps every position (llm_engine.cpp).
  if (so.engine.speculative.uses_draft()) in.sliding_window = 0;
  in.weight_bytes = in.decode_weight_bytes = model.weights.matrix_bytes();
  const CapacityPlan p = plan_capacity(in);
  std::fprintf(stderr,
               "[ember] plan: weights %s; KV %s per token; %lld sequences x %lld tokens need %s of "
               "KV\n",
               format_bytes(static_cast<double>(in.weight_bytes)).c_str(),
               format_bytes(p.kv_bytes_per_token).c_str(), static_cast<long long>(in.batch),
               static_cast<long long>(p.resident_tokens), format_bytes(p.kv_bytes_total).c_str());
  // What the pool's blocks bring along beside it (counted in the sizing above).
  const int64_t n = engine.engine().kv().n_blocks();
  const int64_t exact_cap = kv_channel_exact_blocks_cap(n);
  const int64_t exact = costs.exact_rows_bytes(n);
  if (exact > 0) {
    std::fprintf(stderr,
                 "[ember] plan: per-channel K keeps the exact rows of the blocks being written "
                 "and of up to %lld others beside the pool: up to %s\n",
                 static_cast<long long>(exact_cap),
                 format_bytes(static_cast<double>(exact)).c_str());
  }
  if (costs.draft_block_bytes > 0) {
    std::fprintf(
        stderr, "[ember] plan: the draft's K/V in the same %lld blocks: %s more%s\n",
        static_cast<long long>(n),
        format_bytes(static_cast<double>(n * costs.draft_block_bytes)).c_str(),
        costs.draft_weight_bytes > 0
            ? ("; its weights " + format_bytes(static_cast<double>(costs.draft_weight_bytes)))
                  .c_str()
            : "");
  }
}

// The startup line: what is served and with how much cache.
void print_startup(const LoadedModel& model, const AsyncEngine& engine,
                   const AsyncEngineOptions& so, const ChatTemplate& chat) {
  std::fprintf(stderr,
               "[ember] model %s (%s), %d threads, context %lld, %lld %s KV blocks of %lld, "
               "prefix cache %s, chat template %s\n",
               model.checkpoint.path.c_str(), model.weights.matrix_dtypes().c_str(),
               engine.engine().runner().n_threads(),
               static_cast<long long>(engine.engine().max_context()),
               static_cast<long long>(engine.engine().kv().n_blocks()),
               so.engine.engine.kv_dtype_label().c_str(),
               static_cast<long long>(engine.engine().kv().block_size()),
               so.engine.engine.prefix_caching ? "on" : "off", chat.name());
  const KvTierOptions& t = so.engine.engine.kv_tiers;
  if (t.enabled()) {
    const KvTierStats s = engine.engine().kv_tier_stats();
    std::fprintf(stderr, "[ember] KV offload: RAM tier %s, disk tier %s\n",
                 t.ram_bytes > 0 ? format_bytes(static_cast<double>(t.ram_bytes)).c_str() : "off",
                 t.disk_dir.empty() ? "off"
                 : s.disk_enabled
                     ? (t.disk_dir + " up to " + format_bytes(static_cast<double>(t.disk_bytes)) +
                        ", " + std::to_string(s.disk.entries) + " blocks found")
                           .c_str()
                     : (t.disk_dir + " (unusable, off)").c_str());
  }
}

// serve --tp/--pp: what the ranks that follow rank 0's steps cannot mirror is refused by name.
void check_parallel_serve(const ServeOptions& o) {
  const char* flag = o.model.tp != 1 ? "--tp" : "--pp";
  const auto refuse = [&](const std::string& what) {
    throw Error::invalid_request(
        flag, std::string("serve ") + flag + " with " + what + " is not built yet");
  };
  if (o.allow_trace) refuse("--allow-trace (a trace would see one rank's share of the heads)");
  if (o.offload.parsed().enabled()) refuse("--kv-offload-* (the tiers copy rank 0's blocks only)");
}

int serve_command(const ServeOptions& o) {
  if (o.port < 0 || o.port > 65535) throw Error("--port must be between 0 and 65535");
  if (o.max_seqs < 1) throw Error("--max-seqs must be at least 1");
  if (o.block_size < 0) throw Error("--block-size must be at least 1 (0: the default)");
  if (o.max_waiting < 0) throw Error("--max-waiting must not be negative");
  const std::string api_key = resolve_api_key(o);  // a bad key file fails before the model loads
  const server::ConnectionLimits connections = connection_limits(o);  // so do bad limits
  // Resolve a forced chat template before the (possibly slow) model load so typos fail fast.
  std::optional<ChatTemplate> forced;
  if (!o.chat_template.empty()) forced = ChatTemplate::resolve(o.chat_template, "", nullptr);

  // SIGINT/SIGTERM are taken by a dedicated thread (sigwait), so every other thread, created
  // after this point (the backend's thread pool at load included), inherits a mask with them
  // blocked. A write to a closed socket must be an
  // error return (the client went away), not a process-killing SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  // Likewise a write past a file-size limit (ulimit -f) must fail the write (EFBIG: the KV disk
  // tier turns itself off, as on a full disk), not kill the server.
  ::signal(SIGXFSZ, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const bool split = o.model.tp != 1 || o.model.pp != 1;  // mpirun ranks, rank 0 serving
  if (split) check_parallel_serve(o);
  LoadedModel model = o.model.load(/*need_tokenizer=*/true);
  ChatTemplate chat =
      forced ? *forced
             : ChatTemplate::resolve("", model.checkpoint.path, model.checkpoint.gguf.get());

  AsyncEngineOptions so;
  const std::unique_ptr<LoadedModel> draft = o.model.load_draft(model);
  so.engine = o.model.engine_options(draft.get());
  so.engine.engine.max_sequences = o.max_seqs;
  if (o.block_size > 0) so.engine.engine.block_size = o.block_size;
  so.engine.engine.prefix_caching = !o.no_prefix_cache;
  so.engine.engine.kv_tiers = o.offload.parsed();
  so.engine.scheduler.max_sequences = o.max_seqs;
  so.engine.scheduler.max_batched_tokens = o.max_batched_tokens;
  std::string kv_sizing;
  const KvPoolCosts pool_costs =
      serve_pool_costs(model, runner_options(so.engine), so.engine.speculative);
  so.engine.engine.kv_blocks =
      kv_pool_blocks(o, model, runner_options(so.engine), pool_costs, &kv_sizing);
  so.max_waiting = o.max_waiting;
  if (split) {
    // Every rank's pool has rank 0's block count (each sized it from its own free memory), and
    // the ranks but 0 run the steps rank 0 sends them until the server stops.
    so.engine.engine.kv_blocks = parallel::rank0_value(so.engine.engine.kv_blocks);
    if (!parallel::is_first_rank()) return follow_rank0(model, so.engine, "serving");
    mirror_steps_to_followers(so.engine);
  }
  // Once the engine has stopped (declared before it, so destroyed after): the followers' stop.
  StopFollowers stop_followers{split};

  AsyncEngine engine(model.weights, model.tokenizer.get(), so);
  server::ServerOptions http_options;
  http_options.host = o.host;
  http_options.port = o.port;
  http_options.model_id = o.model_name.empty() ? model_id_for(model.checkpoint.path) : o.model_name;
  http_options.drain_timeout_seconds = o.drain_timeout;
  http_options.api_key = api_key;
  http_options.strict_api = o.strict_api;
  http_options.ssl_cert = o.ssl_cert;
  http_options.ssl_key = o.ssl_key;
  http_options.cors_origins = o.cors_origins;
  http_options.allow_trace = o.allow_trace;
  if (o.allow_trace) {  // the ceilings every trace's roofline is drawn against, measured once
    http_options.trace_machine = measure_trace_machine(*model.weights.backend, true, 256);
  }
  const int64_t max_body = parse_byte_size(o.max_body);
  if (max_body < 1024)
    throw Error::invalid_request("--max-body", "--max-body must be at least 1KiB");
  http_options.max_body_bytes = static_cast<size_t>(max_body);
  http_options.connections = connections;
  if (http_options.api_key.empty() && o.host != "127.0.0.1" && o.host != "localhost" &&
      o.host != "::1") {
    std::fprintf(stderr,
                 "[ember] warning: listening on %s without --api-key: anyone who can reach this "
                 "address can use the server\n",
                 o.host.c_str());
  }
  server::HttpServer http(engine, *model.tokenizer, chat, http_options);
  int port = http.bind();
  engine.start();

  std::atomic<bool> served{false};
  std::thread signals([&] {
    std::unique_ptr<std::thread> stopper;
    timespec tick{0, 100'000'000};
    while (!served.load()) {
      int sig = sigtimedwait(&stop_signals, nullptr, &tick);
      if (sig != SIGINT && sig != SIGTERM) continue;
      if (!stopper) {
        std::fprintf(stderr, "[ember] %s: finishing in-flight requests (again to cancel them)\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM");
        stopper = std::make_unique<std::thread>([&http] { http.shutdown(); });
      } else {
        http.force_stop();
      }
    }
    if (stopper) stopper->join();
  });

  print_startup(model, engine, so, chat);
  const KvShape& kv = engine.engine().runner().kv_shape();
  std::fprintf(stderr, "[ember] KV pool %s (%s): %lld tokens, %lld sequences of full context\n",
               format_bytes(static_cast<double>(kv.n_blocks * kv.bytes_per_block())).c_str(),
               kv_sizing.c_str(), static_cast<long long>(kv.n_blocks * kv.block_size),
               static_cast<long long>(kv.n_blocks * kv.block_size /
                                      std::max<int64_t>(1, engine.engine().max_context())));
  if (const KvBlockManager* window = engine.engine().window_kv(); window != nullptr) {
    std::fprintf(
        stderr,
        "[ember] KV pool of the sliding-window layers (window %lld) %s: %lld blocks, "
        "their blocks behind each window given back\n",
        static_cast<long long>(engine.engine().runner().window_layers_window()),
        format_bytes(static_cast<double>(window->n_blocks() *
                                         engine.engine().runner().window_kv_bytes_per_block()))
            .c_str(),
        static_cast<long long>(window->n_blocks()));
  }
  print_serve_plan(model, engine, so, o, pool_costs);
  std::fprintf(stderr, "listening on %s://%s:%d\n", o.ssl_cert.empty() ? "http" : "https",
               o.host.c_str(), port);
  std::fflush(stderr);
  http.serve();  // returns once shutdown() has stopped the listener
  served.store(true);
  signals.join();
  engine.shutdown(/*cancel_in_flight=*/true);
  std::fprintf(stderr, "[ember] server stopped\n");
  return 0;
}

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve",
                                     "OpenAI-compatible HTTP server (/v1/completions, "
                                     "/v1/chat/completions, /v1/models, /health, /metrics)");
  o->model.add_to(*cmd, ModelOptions::kRunsModel);
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0: any free port, printed on startup)")
      ->capture_default_str();
  cmd->add_option("--max-seqs", o->max_seqs, "Sequences decoding together")->capture_default_str();
  cmd->add_option("--max-batched-tokens", o->max_batched_tokens, "Tokens per forward step")
      ->capture_default_str();
  cmd->add_option("--kv-blocks", o->kv_blocks,
                  "KV cache blocks (default: max-seqs x ctx worth, at most half the available "
                  "memory)");
  cmd->add_option("--mem", o->mem,
                  "Memory for weights + KV cache (e.g. 8GiB): the KV pool gets what the weights "
                  "leave");
  cmd->add_option("--block-size", o->block_size,
                  "Tokens per KV block (default 64 for a per-channel q4_0 K cache, whose per-block "
                  "work is less per token in longer blocks; 16 otherwise)");
  cmd->add_flag("--no-prefix-cache", o->no_prefix_cache, "Disable prefix caching");
  o->offload.add_to(*cmd);
  cmd->add_option("--max-waiting", o->max_waiting, "Queued requests before answering 503")
      ->capture_default_str();
  cmd->add_option(
      "--chat-template", o->chat_template,
      "A Jinja template file, or a built-in format: chatml, llama3, llama2, gemma, phi3, plain "
      "(default: the model's own template)");
  cmd->add_option("--model-name", o->model_name,
                  "Model id reported by /v1/models (default: file name)");
  cmd->add_option("--api-key", o->api_key,
                  "Require 'Authorization: Bearer KEY' on every endpoint but /health (401 "
                  "otherwise)");
  cmd->add_option("--api-key-file", o->api_key_file,
                  "Read the API key from the first line of this file (keeps it out of the process "
                  "list)");
  cmd->add_option(
      "--cors-origin", o->cors_origins,
      "Let pages of this origin call the server (CORS; repeat for several, '*' for any)");
  cmd->add_option("--max-body", o->max_body, "Largest request body (413 beyond)")
      ->capture_default_str();
  cmd->add_option("--max-connections", o->connections.max_connections,
                  "Client connections served at once; more get 503 with Retry-After (plain HTTP)")
      ->capture_default_str();
  cmd->add_option("--header-timeout", o->connections.header_timeout_seconds,
                  "Seconds a request's line and headers may take to arrive (then the connection "
                  "is closed)")
      ->capture_default_str();
  cmd->add_option("--body-timeout", o->connections.body_timeout_seconds,
                  "Seconds a request's body may take to arrive after its headers")
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", o->max_header_bytes,
                  "Largest request line + headers (400 and closed beyond)")
      ->capture_default_str();
  cmd->add_option("--keep-alive-requests", o->connections.keep_alive_requests,
                  "Requests one kept-alive connection may make")
      ->capture_default_str();
  cmd->add_option("--ssl-cert", o->ssl_cert, "Serve HTTPS with this PEM certificate (chain)");
  cmd->add_option("--ssl-key", o->ssl_key, "The PEM private key of --ssl-cert");
  cmd->add_flag("--allow-trace", o->allow_trace,
                "Let requests ask for \"trace\": true (ember trace of their forward passes: "
                "logit lens, attention maps, residual stream, KV cache, roofline; GET "
                "/trace/{id} serves the page). Off: such requests get 400. Tracing slows the "
                "steps the traced request shares with others");
  cmd->add_flag("--strict-api", o->strict_api,
                "Refuse request fields no API knows (400) instead of ignoring them with a warning");
  cmd->add_option("--drain-timeout", o->drain_timeout,
                  "Seconds in-flight requests may take to finish on SIGINT/SIGTERM")
      ->capture_default_str();
  return [o] { return serve_command(*o); };
}

}  // namespace ember::cli
