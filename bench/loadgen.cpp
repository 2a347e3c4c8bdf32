// Load generator for `ember serve` (or any OpenAI-compatible server): C concurrent clients send N
// streaming /v1/completions requests and it reports request throughput, output tokens/s, time to
// first token and inter-token latency percentiles, measured on the client side.
//
//   ./ember_loadgen --port 8080 -c 32 -n 256 --prompt-len 128 --max-tokens 128 [--json]
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;
  int concurrency = 8;
  int requests = 64;
  int prompt_len = 64;  // words; roughly tokens for most vocabularies
  int max_tokens = 64;
  std::string model = "ember";
  std::string word = "story";
  bool chat = false;
  bool json_output = false;
};

struct RequestStats {
  bool ok = false;
  double ttft = 0;                  // seconds from send to the first text event
  std::vector<double> inter_token;  // gaps between consecutive text events
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// Splits an SSE byte stream into `data:` payloads as they complete (chunks can split lines).
class SseParser {
 public:
  template <typename F>
  void feed(const char* data, size_t n, F&& on_event) {
    buffer_.append(data, n);
    size_t end;
    while ((end = buffer_.find("\n\n")) != std::string::npos) {
      std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) on_event(event.substr(6));
    }
  }

 private:
  std::string buffer_;
};

RequestStats run_one(const Options& o, const std::string& prompt, int index) {
  RequestStats s;
  httplib::Client client(o.host, o.port);
  client.set_read_timeout(600, 0);
  json body = {{"model", o.model},
               {"max_tokens", o.max_tokens},
               {"temperature", 0.8},
               {"seed", index},
               {"ignore_eos", true},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (o.chat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
  } else {
    body["prompt"] = prompt;
  }
  const char* path = o.chat ? "/v1/chat/completions" : "/v1/completions";
  SseParser parser;
  auto start = Clock::now();
  Clock::time_point last;
  bool first = true;
  // httplib 0.11's Client::Post has no streaming receiver; a Request with content_receiver does.
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    auto now = Clock::now();
    parser.feed(data, n, [&](const std::string& payload) {
      if (payload == "[DONE]") return;
      json c = json::parse(payload, nullptr, false);
      if (c.is_discarded()) return;
      if (c.contains("usage") && c["usage"].is_object()) {
        s.prompt_tokens = c["usage"].value("prompt_tokens", 0);
        s.completion_tokens = c["usage"].value("completion_tokens", 0);
      }
      if (!c.contains("choices") || c["choices"].empty()) return;
      const json& ch = c["choices"][0];
      std::string text = o.chat ? ch["delta"].value("content", "") : ch.value("text", "");
      if (text.empty()) return;
      if (first) {
        s.ttft = std::chrono::duration<double>(now - start).count();
        first = false;
      } else {
        s.inter_token.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
    });
    return true;
  };
  auto res = client.send(req);
  s.ok = res && res->status == 200 && s.completion_tokens > 0;
  return s;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"ember_loadgen: streaming load against an OpenAI-compatible server"};
  app.add_option("--host", o.host)->capture_default_str();
  app.add_option("--port", o.port)->capture_default_str();
  app.add_option("-c,--concurrency", o.concurrency, "Clients sending at once")
      ->capture_default_str();
  app.add_option("-n,--requests", o.requests, "Requests in total")->capture_default_str();
  app.add_option("--prompt-len", o.prompt_len, "Prompt length in words (~tokens)")
      ->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens, "Tokens per request (ignore_eos)")
      ->capture_default_str();
  app.add_option("--model", o.model, "Model name sent in requests")->capture_default_str();
  app.add_option("--word", o.word, "Word the prompt repeats")->capture_default_str();
  app.add_flag("--chat", o.chat, "Use /v1/chat/completions instead of /v1/completions");
  app.add_flag("--json", o.json_output, "Print the summary as JSON");
  CLI11_PARSE(app, argc, argv);
  if (o.concurrency < 1 || o.requests < 1 || o.max_tokens < 1 || o.prompt_len < 0) {
    std::fprintf(stderr, "error: -c, -n and --max-tokens must be positive\n");
    return 1;
  }
  std::string prompt;
  for (int i = 0; i < o.prompt_len; ++i) prompt += (i ? " " : "") + o.word;

  std::atomic<int> next{0};
  std::mutex mutex;
  std::vector<RequestStats> all;
  auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < o.concurrency; ++c) {
    clients.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < o.requests;) {
        RequestStats s = run_one(o, prompt, i);
        std::lock_guard<std::mutex> lock(mutex);
        all.push_back(std::move(s));
      }
    });
  }
  for (auto& t : clients) t.join();
  double wall = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, itl;
  int64_t out_tokens = 0, in_tokens = 0;
  int ok = 0;
  for (const RequestStats& s : all) {
    if (!s.ok) continue;
    ++ok;
    ttft.push_back(s.ttft);
    itl.insert(itl.end(), s.inter_token.begin(), s.inter_token.end());
    out_tokens += s.completion_tokens;
    in_tokens += s.prompt_tokens;
  }
  json summary = {{"requests", o.requests},
                  {"succeeded", ok},
                  {"failed", o.requests - ok},
                  {"concurrency", o.concurrency},
                  {"wall_seconds", wall},
                  {"requests_per_second", ok / wall},
                  {"output_tokens_per_second", static_cast<double>(out_tokens) / wall},
                  {"mean_prompt_tokens", ok ? static_cast<double>(in_tokens) / ok : 0.0},
                  {"ttft_ms",
                   {{"p50", percentile(ttft, 50) * 1e3},
                    {"p90", percentile(ttft, 90) * 1e3},
                    {"p99", percentile(ttft, 99) * 1e3}}},
                  {"inter_token_ms",
                   {{"p50", percentile(itl, 50) * 1e3},
                    {"p90", percentile(itl, 90) * 1e3},
                    {"p99", percentile(itl, 99) * 1e3}}}};
  if (o.json_output) {
    std::printf("%s\n", summary.dump(2).c_str());
  } else {
    std::printf("requests        %d ok, %d failed, concurrency %d, %.2f s\n", ok, o.requests - ok,
                o.concurrency, wall);
    std::printf("throughput      %.2f req/s, %.1f output tok/s (mean prompt %.0f tokens)\n",
                ok / wall, static_cast<double>(out_tokens) / wall,
                summary["mean_prompt_tokens"].get<double>());
    std::printf("TTFT            p50 %.1f ms  p90 %.1f ms  p99 %.1f ms\n",
                percentile(ttft, 50) * 1e3, percentile(ttft, 90) * 1e3, percentile(ttft, 99) * 1e3);
    std::printf("inter-token     p50 %.2f ms  p90 %.2f ms  p99 %.2f ms\n",
                percentile(itl, 50) * 1e3, percentile(itl, 90) * 1e3, percentile(itl, 99) * 1e3);
  }
  return ok == o.requests ? 0 : 1;
}
