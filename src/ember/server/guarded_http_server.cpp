#include "ember/server/guarded_http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ember::server {

namespace {

using Clock = std::chrono::steady_clock;

thread_local socket_t t_connection = INVALID_SOCKET;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Milliseconds until `deadline` (at least 0, at most `cap`).
int millis_until(Clock::time_point deadline, Clock::duration cap) {
  const auto left = std::min(deadline - Clock::now(), cap);
  if (left <= Clock::duration::zero()) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

bool poll_for(socket_t sock, short events, int millis) {
  pollfd p{sock, events, 0};
  int n;
  do {
    n = ::poll(&p, 1, millis);
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

void address_of(socket_t sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int rc = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (rc != 0 || ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv,
                               sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return;
  }
  ip = host;
  port = std::atoi(serv);
}

// One connection's socket (through `tls` when not null) as httplib reads and writes it, with the
// request's phase deadlines.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(socket_t sock, TlsSession* tls, const ConnectionLimits& limits,
                   Clock::duration read_timeout, Clock::duration write_timeout)
      : sock_(sock),
        tls_(tls),
        limits_(limits),
        read_timeout_(read_timeout),
        write_timeout_(write_timeout) {}

  // Waits up to the keep-alive idle time for a request's first byte; false when none came or
  // `stopping()` turned true (looked at every 100 ms, so that an idle connection does not hold a
  // server that is shutting down for the whole idle time).
  template <typename Stopping>
  bool wait_for_request(Stopping stopping) {
    if (buffered() > 0 || (tls_ != nullptr && tls_->pending())) return true;
    const auto deadline = Clock::now() + seconds(limits_.keep_alive_idle_seconds);
    while (!stopping()) {
      if (poll_for(sock_, POLLIN, millis_until(deadline, std::chrono::milliseconds(100)))) {
        return true;
      }
      if (Clock::now() >= deadline) return false;
    }
    return false;
  }
  // A request starts: its headers are due within header_timeout and max_header_bytes.
  void start_request() {
    in_headers_ = true;
    header_bytes_ = 0;
    deadline_ = Clock::now() + seconds(limits_.header_timeout_seconds);
  }
  // Its headers were read: the body is due within body_timeout (the handler reads nothing more).
  void headers_done(const httplib::Request& req) {
    in_headers_ = false;
    deadline_ = Clock::now() + seconds(limits_.body_timeout_seconds);
    delivered_at_body_ = delivered_;
    chunked_ = req.has_header("Transfer-Encoding");
    body_bytes_ = 0;
    if (req.has_header("Content-Length")) {
      body_bytes_ = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
    }
  }
  // Whether the request just answered left body bytes unread (answered before its body was read:
  // a refused origin or key, a body over --max-body). Those bytes must never be parsed as the
  // next request on this connection, where a page could have put a whole request of its choice.
  bool body_left_unread() const {
    const uint64_t read = delivered_ - delivered_at_body_;
    return chunked_ ? read == 0 : read < body_bytes_;
  }
  // A deadline or the header limit cut this connection.
  bool cut() const { return cut_; }

  bool is_readable() const override {
    return buffered() > 0 || (tls_ != nullptr && tls_->pending()) ||
           poll_for(sock_, POLLIN, millis_until(deadline_, read_timeout_));
  }
  bool is_writable() const override {
    return poll_for(
        sock_, POLLOUT,
        static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(write_timeout_).count()));
  }

  ssize_t read(char* ptr, size_t size) override {
    if (buffered() == 0) {
      const ssize_t n = fill();
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, buffered());
    if (in_headers_) {
      header_bytes_ += n;
      if (header_bytes_ > limits_.max_header_bytes) {
        cut_ = true;
        return -1;
      }
    }
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    delivered_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (tls_ != nullptr) return tls_->write(ptr, size, Clock::now() + write_timeout_);
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address_of(sock_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address_of(sock_, false, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  size_t buffered() const { return end_ - begin_; }

  // Reads the next bytes from the socket into buffer_ within the phase's deadline (and the
  // per-read timeout); past the deadline the connection is cut.
  ssize_t fill() {
    if (Clock::now() >= deadline_) {
      cut_ = true;
      return -1;
    }
    if (tls_ != nullptr) {
      const long n =
          tls_->read(buffer_, sizeof buffer_, std::min(deadline_, Clock::now() + read_timeout_));
      if (n < 0 && Clock::now() >= deadline_) cut_ = true;
      return n;
    }
    if (!is_readable()) {
      if (Clock::now() >= deadline_) cut_ = true;
      return -1;
    }
    ssize_t n;
    do {
      n = ::recv(sock_, buffer_, sizeof buffer_, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  socket_t sock_;
  TlsSession* tls_;
  const ConnectionLimits& limits_;
  Clock::duration read_timeout_, write_timeout_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool in_headers_ = false;
  size_t header_bytes_ = 0;
  bool cut_ = false;
  uint64_t delivered_ = 0, delivered_at_body_ = 0;  // bytes handed to httplib
  uint64_t body_bytes_ = 0;                         // the request's Content-Length
  bool chunked_ = false;
  char buffer_[4096];
  size_t begin_ = 0, end_ = 0;
};

// The answer to a connection over the cap, written without reading its request.
void refuse(socket_t sock) {
  static const std::string kBody =
      R"({"error":{"message":"too many open connections; retry shortly","type":"server_error",)"
      R"("param":null,"code":"too_many_connections"}})";
  const std::string response =
      "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(kBody.size()) + "\r\nConnection: close\r\n\r\n" + kBody;
  (void)::send(sock, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

GuardedHttpServer::GuardedHttpServer(const ConnectionLimits& limits,
                                     std::unique_ptr<TlsContext> tls)
    : limits_(limits), tls_(std::move(tls)) {}

GuardedHttpServer::~GuardedHttpServer() = default;

void GuardedHttpServer::raise_backlog() {
  const socket_t fd = svr_sock_;
  if (fd != INVALID_SOCKET) ::listen(fd, SOMAXCONN);
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  // A connection's place under the cap is given back before the client can see the connection
  // end (TLS close_notify, FIN): a client that reconnects at once must find it free (given back
  // after the close, a reconnect raced the decrement and was refused under the cap).
  bool ok = true;
  if (open_.fetch_add(1) >= limits_.max_connections) {
    ++refused_;
    --open_;
    if (!tls_) refuse(sock);  // (over TLS a refusal would cost a handshake: closed at once)
  } else if (!tls_) {
    ok = serve_requests(sock, nullptr);
    --open_;
  } else {
    TlsSession session(*tls_, sock);
    if (session.handshake(Clock::now() + seconds(limits_.header_timeout_seconds))) {
      ok = serve_requests(sock, &session);
    } else if (session.timed_out()) {
      ++cut_;
    }
    --open_;
  }  // (the TLS session's close_notify goes out here)
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

bool GuardedHttpServer::serve_requests(socket_t sock, TlsSession* tls) {
  bool ok = true;
  ConnectionStream stream(
      sock, tls, limits_,
      std::chrono::seconds(read_timeout_sec_) + std::chrono::microseconds(read_timeout_usec_),
      std::chrono::seconds(write_timeout_sec_) + std::chrono::microseconds(write_timeout_usec_));
  t_connection = sock;
  for (size_t left = limits_.keep_alive_requests; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    if (!stream.wait_for_request([this] { return svr_sock_ == INVALID_SOCKET; })) break;
    stream.start_request();
    bool closed = false;
    ok = process_request(stream, left == 1, closed,
                         [&stream](httplib::Request& req) { stream.headers_done(req); });
    if (stream.cut()) ++cut_;
    if (!ok || closed || stream.cut() || stream.body_left_unread()) break;
  }
  t_connection = INVALID_SOCKET;
  return ok;
}

bool current_client_gone() {
  if (t_connection == INVALID_SOCKET) return false;
  char byte;
  const ssize_t n = ::recv(t_connection, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;  // closed
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace ember::server
