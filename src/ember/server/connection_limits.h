// How `ember serve` bounds its clients' connections (plain HTTP; guarded_http_server.h does it):
// `--max-connections`, `--header-timeout`, `--body-timeout`, `--max-header-bytes`,
// `--keep-alive-requests`.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ember::server {

struct ConnectionLimits {
  int64_t max_connections = 256;          // beyond it: 503 + Retry-After, closed at once
  double header_timeout_seconds = 10.0;   // from a request's first byte to its last header
  double body_timeout_seconds = 60.0;     // from the last header to the last body byte
  size_t max_header_bytes = 64 * 1024;    // request line + headers
  size_t keep_alive_requests = 100;       // requests per connection
  double keep_alive_idle_seconds = 10.0;  // how long an idle kept-alive connection is kept
};

}  // namespace ember::server
