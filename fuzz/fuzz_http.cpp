// The HTTP server end to end: each input is the raw bytes a client sends on one connection
// (request line, headers, body, possibly several pipelined requests), written to a real
// `ember serve` stack in this process (stories260K, the AsyncEngine, server::HttpServer on a
// loopback port). The harness reads the answer (see exchange()); a crash,
// a sanitizer report or a server that stops answering /health is the finding.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "ember/engine/async_engine.h"
#include "ember/model/model_loader.h"
#include "ember/server/http_server.h"
#include "ember/tokenizer/chat_template.h"

namespace {

// stories260K from ../shared (or $EMBER_FUZZ_MODEL), served on an ephemeral loopback port.
struct ServerUnderTest {
  ember::LoadedModel model;
  std::unique_ptr<ember::AsyncEngine> engine;
  std::unique_ptr<ember::server::HttpServer> http;
  std::thread thread;
  int port = 0;
};

ServerUnderTest& server() {
  static ServerUnderTest* s = [] {
    ::signal(SIGPIPE, SIG_IGN);
    auto* sut = new ServerUnderTest;
    const char* env = std::getenv("EMBER_FUZZ_MODEL");
    ember::LoadOptions load;
    load.path = env ? env : EMBER_DEFAULT_FIXTURES "/models/stories260K/stories260K.gguf";
    if (!std::filesystem::exists(load.path)) {
      std::fprintf(stderr, "fuzz_http: SKIPPED: %s is missing (../shared fixtures)\n",
                   load.path.c_str());
      std::exit(77);
    }
    load.backend.n_threads = 1;
    sut->model = ember::load_model(load);
    ember::AsyncEngineOptions options;
    options.engine.engine.max_sequences = 4;
    options.engine.engine.max_context = 256;
    options.engine.engine.prefix_caching = true;
    options.engine.scheduler.max_sequences = 4;
    options.max_waiting = 8;
    sut->engine = std::make_unique<ember::AsyncEngine>(sut->model.weights,
                                                       sut->model.tokenizer.get(), options);
    ember::server::ServerOptions http;
    http.port = 0;
    http.model_id = "stories260K";
    http.http_threads = 16;
    http.max_body_bytes = 1 << 16;
    sut->http = std::make_unique<ember::server::HttpServer>(*sut->engine, *sut->model.tokenizer,
                                                            ember::ChatTemplate(), http);
    sut->port = sut->http->bind();
    sut->engine->start();
    sut->thread = std::thread([sut] { sut->http->serve(); });
    // Stopped before the process exits, so no thread runs while statics are destroyed.
    std::atexit([] {
      server().http->shutdown();
      server().thread.join();
    });
    return sut;
  }();
  return *s;
}

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("fuzz_http: connect");
    std::abort();
  }
  return fd;
}

// Sends `bytes` and reads the answer until the server closes the connection, or it has been
// quiet for `idle` after answering, or `timeout` passes. (No half-close: cpp-httplib answers
// nothing on a connection whose client has shut down its sending side.)
std::string exchange(int port, const uint8_t* bytes, size_t size, std::chrono::milliseconds idle,
                     std::chrono::milliseconds timeout) {
  const int fd = connect_loopback(port);
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::send(fd, bytes + done, size - done, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close early on a bad request
    done += static_cast<size_t>(n);
  }
  std::string answer;
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  char buf[4096];
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start > timeout || (!answer.empty() && now - last > idle)) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
    last = std::chrono::steady_clock::now();
  }
  ::close(fd);
  return answer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ServerUnderTest& s = server();
  (void)exchange(s.port, data, size, std::chrono::milliseconds(150), std::chrono::seconds(1));
  // Whatever that connection did, the server still answers.
  static const char kHealth[] =
      "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  const std::string health =
      exchange(s.port, reinterpret_cast<const uint8_t*>(kHealth), sizeof kHealth - 1,
               std::chrono::seconds(10), std::chrono::seconds(10));
  if (health.rfind("HTTP/1.1 200", 0) != 0) {
    std::fprintf(stderr, "fuzz_http: /health did not answer 200 after the input:\n%s\n",
                 health.c_str());
    std::abort();
  }
  return 0;
}
