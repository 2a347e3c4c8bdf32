// Helpers for the HTTP server's end-to-end tests: a real `ember serve` child process on a free
// loopback port, small HTTP/SSE helpers, and Prometheus text parsing.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ember::test {

// `ember serve ARGS --port 0` as a child process; the port is parsed from its
// "listening on http://127.0.0.1:PORT" line. The destructor kills it if still running.
// `launcher` (e.g. "mpirun -np 2") runs it under that command (serve --tp).
class ServerProcess {
 public:
  explicit ServerProcess(const std::string& args, const std::string& launcher = "");
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool ready() const { return port_ > 0; }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& startup_error() const { return error_; }
  std::string log() const;  // the server's stderr so far

  // Sends `sig` and waits up to `timeout` for exit; returns the exit code (128+signal when
  // killed by one, -1 on timeout).
  int stop(int sig, std::chrono::milliseconds timeout = std::chrono::milliseconds(15000));
  bool alive();

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
  std::string error_;
};

struct HttpResult {
  int status = 0;  // 0: connection failed
  std::string body;
};

// A TCP connection to 127.0.0.1:port (blocking socket), or -1.
int connect_loopback(int port);

HttpResult http_get(int port, const std::string& path);
// Installs the npm `package` into `dir` (the build tree's node project) once; returns "" or why
// it could not (no node/npm, offline), for a GTEST_SKIP.
std::string npm_install(const std::filesystem::path& dir, const std::string& package);

// Headless Chromium (Debian's) driven by puppeteer-core from npm, for the page tests: the browser,
// the build tree's node project holding puppeteer-core (scripts go there), and the folder the
// screenshots go to (<build>/screenshots, CI artifacts).
struct HeadlessBrowser {
  std::string chromium;
  std::filesystem::path node_dir, screenshots;
};
// Fills `browser`; returns "" or why the test must skip (no Chromium, no node, offline).
std::string headless_browser(HeadlessBrowser* browser);
HttpResult http_post(int port, const std::string& path, const std::string& body);
inline HttpResult post_json(int port, const std::string& path, const nlohmann::json& body) {
  return http_post(port, path, body.dump());
}

// The `data:` payloads of an SSE body, in order (including "[DONE]").
std::vector<std::string> sse_events(const std::string& body);

// Prometheus text -> {metric name (with labels), value}.
std::map<std::string, double> parse_metrics(const std::string& text);
std::map<std::string, double> server_metrics(int port);

// Runs a shell command, returning its stdout (stderr discarded) and exit code.
int run_shell(const std::string& command, std::string* out);

// Text `ember run --temp 0` generates for `prompt` (stdout minus the echoed prompt and newline).
std::string ember_run_greedy(const std::string& model, const std::string& prompt, int n,
                             bool ignore_eos = false);

}  // namespace ember::test
