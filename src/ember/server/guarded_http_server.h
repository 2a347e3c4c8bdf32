// The plain-HTTP server `ember serve` runs: cpp-httplib's Server with its connection handling
// replaced, so that no client can hold the server's threads (#26).
//
// cpp-httplib 0.11 (Debian) gives each connection a worker thread that reads with a timeout per
// recv() only: a client sending one header byte a second held its thread forever (200 of them
// took every thread and /health stopped answering), and a request could carry headers without
// end (one connection grew the process by ~186 MB). Here each connection's socket is read through
// ConnectionStream (an httplib::Stream of ours) that knows which phase the request is in:
//   waiting for a request (keep-alive)  ─►  headers: due within header_timeout, at most
//   max_header_bytes  ─►  body: due within body_timeout  ─►  handler and response: no deadline
//   (a generation may stream for minutes; writes keep httplib's per-write timeout)
// A read past its phase's deadline or byte limit fails, httplib answers 400 and the connection is
// closed. At most max_connections are served at once: the next one gets 503 with Retry-After and
// is closed at once, and the thread pool is sized above the cap so that a connection under it
// never waits for a thread. A connection serves at most keep_alive_requests requests, and is
// closed after a request answered without reading all of its body (a CORS preflight, anything
// refused from its headers): those bytes are never parsed as the next request.
//
// With --ssl-cert/--ssl-key the same loop runs over TLS (tls_session.h: OpenSSL on the socket,
// non-blocking): the handshake is due within header_timeout, and every read keeps the phase's
// deadline. A TLS connection over the cap is closed without an answer (a 503 would need a
// handshake first).
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "ember/server/connection_limits.h"
#include "ember/server/tls_session.h"

namespace ember::server {

class GuardedHttpServer : public httplib::Server {
 public:
  // `tls` null: plain HTTP.
  GuardedHttpServer(const ConnectionLimits& limits, std::unique_ptr<TlsContext> tls);
  ~GuardedHttpServer() override;

  // httplib listens with a backlog of 5: a burst of clients (32 streams at once) overflows it and
  // the kernel drops SYNs, costing the unlucky ones a 1 s retransmit. Linux lets listen() be
  // called again on a listening socket to raise it.
  void raise_backlog();

  int64_t open_connections() const { return open_.load(); }
  int64_t refused_connections() const { return refused_.load(); }
  int64_t cut_connections() const { return cut_.load(); }  // past a deadline or header limit

 private:
  bool process_and_close_socket(socket_t sock) override;
  // The keep-alive loop of one connection (through `tls` when not null).
  bool serve_requests(socket_t sock, TlsSession* tls);

  ConnectionLimits limits_;
  std::unique_ptr<TlsContext> tls_;
  std::atomic<int64_t> open_{0};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> cut_{0};
};

// Whether the client whose request this thread is serving has closed (or reset) its connection:
// a handler waiting for a whole response polls it to cancel work nobody will read. False when
// unknown (TLS, or not on a connection's thread).
bool current_client_gone();

}  // namespace ember::server
