#include "e2e/server_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "test_util.h"

namespace ember::test {

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

ServerProcess::ServerProcess(const std::string& args, const std::string& launcher) {
  static int counter = 0;
  log_path_ =
      (std::filesystem::temp_directory_path() /
       ("ember-serve-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".log"))
          .string();
  // EMBER_TEST_SERVE_ARGS adds flags to every server a test starts (e.g. `--backend cuda`, to run
  // the server tests on a GPU).
  std::string extra;
  if (const char* env = std::getenv("EMBER_TEST_SERVE_ARGS"); env != nullptr) extra = env;
  std::string cmd = "exec " + launcher + " " + shell_quote(ember_binary()) +
                    " serve --host 127.0.0.1 --port 0 " + args + " " + extra +
                    " </dev/null >/dev/null 2>" + shell_quote(log_path_);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (pid_ < 0) {
    error_ = "fork failed";
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::string text = read_all(log_path_);
    std::string marker = "listening on http://127.0.0.1:";  // or https:// with --ssl-cert
    if (text.find(marker) == std::string::npos) marker = "listening on https://127.0.0.1:";
    size_t at = text.find(marker);
    if (at != std::string::npos) {
      size_t end = text.find('\n', at);
      if (end != std::string::npos) {
        port_ = std::atoi(text.c_str() + at + marker.size());
        return;
      }
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      error_ = "ember serve exited during startup: " + text;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  error_ = "ember serve did not print its port within 60 s: " + read_all(log_path_);
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  std::remove(log_path_.c_str());
}

std::string ServerProcess::log() const {
  return read_all(log_path_);
}

bool ServerProcess::alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

int ServerProcess::stop(int sig, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

HttpResult http_get(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  auto res = client.Get(path.c_str());
  if (!res) return {};
  return {res->status, res->body};
}

HttpResult http_post(int port, const std::string& path, const std::string& body) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  client.set_write_timeout(60, 0);
  auto res = client.Post(path.c_str(), body, "application/json");
  if (!res) return {};
  return {res->status, res->body};
}

std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) == 0) events.push_back(line.substr(6));
  }
  return events;
}

std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    m[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return m;
}

std::map<std::string, double> server_metrics(int port) {
  return parse_metrics(http_get(port, "/metrics").body);
}

int run_shell(const std::string& command, std::string* out) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n;
  std::string text;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  int status = ::pclose(pipe);
  if (out) *out = std::move(text);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ember_run_greedy(const std::string& model, const std::string& prompt, int n,
                             bool ignore_eos) {
  CommandResult r =
      run_ember("run -m " + shell_quote(model) + " -p " + shell_quote(prompt) + " --temp 0 -n " +
                std::to_string(n) + (ignore_eos ? " --ignore-eos" : ""));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string out = r.out;
  EXPECT_EQ(out.rfind(prompt, 0), 0u) << "stdout starts with the prompt";
  out.erase(0, std::min(out.size(), prompt.size()));
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string npm_install(const std::filesystem::path& dir, const std::string& package) {
  std::string out;
  if (run_shell("node --version 2>/dev/null", &out) != 0) return "node is not installed";
  if (run_shell("npm --version 2>/dev/null", &out) != 0) return "npm is not installed";
  std::filesystem::create_directories(dir);
  // ctest runs tests in parallel processes that share this directory: one install at a time,
  // and a package counts as installed only once its install finished (a stamp written after
  // npm returned), never while another process is still unpacking it.
  const int lock = ::open((dir / ".install.lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0) return "cannot open " + (dir / ".install.lock").string();
  ::flock(lock, LOCK_EX);
  const auto stamp = dir / (".installed-" + package);
  std::string why;
  if (!std::filesystem::exists(stamp)) {
    if (!std::filesystem::exists(dir / "package.json")) {
      std::ofstream(dir / "package.json") << R"({"name": "ember-node-tests", "private": true})";
    }
    int rc = run_shell("cd " + shell_quote(dir.string()) +
                           " && timeout 180 npm install --no-audit --no-fund --loglevel=error " +
                           package + " 2>&1",
                       &out);
    if (rc != 0 || !std::filesystem::exists(dir / "node_modules" / package / "package.json")) {
      why = "npm install " + package + " failed (offline?): " + out;
    } else {
      std::ofstream(stamp) << package << "\n";
    }
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return why;
}

std::string headless_browser(HeadlessBrowser* browser) {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (std::filesystem::exists(path)) browser->chromium = path;
  }
  if (browser->chromium.empty()) return "Chromium is not installed (scripts/setup.sh installs it)";
  const auto build = std::filesystem::path(ember_binary()).parent_path();
  browser->node_dir = build / "openai-node";
  if (std::string why = npm_install(browser->node_dir, "puppeteer-core"); !why.empty()) return why;
  browser->screenshots = build / "screenshots";
  std::filesystem::create_directories(browser->screenshots);
  return "";
}

}  // namespace ember::test
