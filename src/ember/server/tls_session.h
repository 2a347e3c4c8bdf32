// TLS for GuardedHttpServer (`--ssl-cert/--ssl-key`): OpenSSL over a connection's socket, made
// non-blocking, so that the handshake and every read and write keep the connection's deadlines
// (a client that stalls mid-handshake or mid-record is cut like one that stalls in plain HTTP).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

struct ssl_ctx_st;
struct ssl_st;

namespace ember::server {

class TlsContext {
 public:
  // Loads the PEM certificate (chain) and private key; throws an ember::Error naming both files
  // when either does not load or the key does not match the certificate.
  TlsContext(const std::string& cert_file, const std::string& key_file);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  ssl_ctx_st* get() const { return ctx_; }

 private:
  ssl_ctx_st* ctx_ = nullptr;
};

class TlsSession {
 public:
  using Clock = std::chrono::steady_clock;

  TlsSession(const TlsContext& context, int sock);
  ~TlsSession();  // sends close_notify if it can without waiting, then frees the session
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // The server side of the handshake, by `deadline`.
  bool handshake(Clock::time_point deadline);
  // Up to n decrypted bytes: > 0 read, 0 the peer closed, -1 an error or `deadline` passed
  // (timed_out() tells which).
  long read(char* buf, size_t n, Clock::time_point deadline);
  // Writes up to n bytes by `deadline`: the count written, or -1.
  long write(const char* buf, size_t n, Clock::time_point deadline);
  // Decrypted bytes are waiting, to be read without the socket becoming readable.
  bool pending() const;
  bool timed_out() const { return timed_out_; }

 private:
  // Waits until the socket can do what `ssl_error` asks for (WANT_READ / WANT_WRITE), by
  // `deadline`; false on any other error or at the deadline.
  bool wait_for(int ssl_error, Clock::time_point deadline);

  ssl_st* ssl_ = nullptr;
  int sock_;
  bool timed_out_ = false;
};

}  // namespace ember::server
