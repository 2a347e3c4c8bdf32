#include "ember/server/tls_session.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "ember/core/error.h"

namespace ember::server {

TlsContext::TlsContext(const std::string& cert_file, const std::string& key_file)
    : ctx_(SSL_CTX_new(TLS_server_method())) {
  const bool loaded = ctx_ != nullptr && SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION) == 1 &&
                      SSL_CTX_use_certificate_chain_file(ctx_, cert_file.c_str()) == 1 &&
                      SSL_CTX_use_PrivateKey_file(ctx_, key_file.c_str(), SSL_FILETYPE_PEM) == 1 &&
                      SSL_CTX_check_private_key(ctx_) == 1;
  if (!loaded) {
    char reason[256] = "unknown";
    if (const unsigned long e = ERR_get_error(); e != 0)
      ERR_error_string_n(e, reason, sizeof reason);
    ERR_clear_error();
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
    ctx_ = nullptr;
    throw Error(ErrorKind::InvalidArgument,
                "cannot load the TLS certificate '" + cert_file + "' and key '" + key_file +
                    "' (PEM files; the key must match the certificate): " + reason);
  }
  SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

TlsContext::~TlsContext() {
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

TlsSession::TlsSession(const TlsContext& context, int sock)
    : ssl_(SSL_new(context.get())), sock_(sock) {
  ::fcntl(sock_, F_SETFL, ::fcntl(sock_, F_GETFL, 0) | O_NONBLOCK);
  if (ssl_ != nullptr) SSL_set_fd(ssl_, sock_);
}

TlsSession::~TlsSession() {
  if (ssl_ == nullptr) return;
  if (SSL_is_init_finished(ssl_)) (void)SSL_shutdown(ssl_);  // non-blocking: one attempt
  SSL_free(ssl_);
  ERR_clear_error();
}

bool TlsSession::wait_for(int ssl_error, Clock::time_point deadline) {
  short events;
  if (ssl_error == SSL_ERROR_WANT_READ) {
    events = POLLIN;
  } else if (ssl_error == SSL_ERROR_WANT_WRITE) {
    events = POLLOUT;
  } else {
    ERR_clear_error();
    return false;
  }
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out_ = true;
      return false;
    }
    pollfd p{sock_, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

bool TlsSession::handshake(Clock::time_point deadline) {
  if (ssl_ == nullptr) return false;
  for (;;) {
    const int r = SSL_accept(ssl_);
    if (r == 1) return true;
    if (!wait_for(SSL_get_error(ssl_, r), deadline)) return false;
  }
}

long TlsSession::read(char* buf, size_t n, Clock::time_point deadline) {
  for (;;) {
    const int r = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(n, INT_MAX)));
    if (r > 0) return r;
    const int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_ZERO_RETURN) return 0;
    if (!wait_for(e, deadline)) return -1;
  }
}

long TlsSession::write(const char* buf, size_t n, Clock::time_point deadline) {
  for (;;) {
    const int r = SSL_write(ssl_, buf, static_cast<int>(std::min<size_t>(n, INT_MAX)));
    if (r > 0) return r;
    if (!wait_for(SSL_get_error(ssl_, r), deadline)) return -1;
  }
}

bool TlsSession::pending() const {
  return SSL_pending(ssl_) > 0;
}

}  // namespace ember::server
