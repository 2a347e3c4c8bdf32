#include "ember/server/request_guard.h"

#include <nlohmann/json.hpp>

#include "ember/server/openai_api.h"

namespace ember::server {

namespace {

using nlohmann::json;

// A refusal decided from the headers, kept for the route handler of a request whose body httplib
// still has to read (one request at a time per connection thread).
struct Refusal {
  bool pending = false;
  int status = 0;
  std::string body;
};
thread_local Refusal t_refusal;

// Compares in time that depends on the lengths only, not on where the first difference is.
bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

bool is_loopback_host(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host == "[::1]";
}

// The host part of a Host header ("127.0.0.1:8080", "[::1]:8080", "localhost").
std::string host_of(const std::string& value) {
  if (!value.empty() && value.front() == '[') {
    const size_t end = value.find(']');
    return end == std::string::npos ? value : value.substr(0, end + 1);
  }
  return value.substr(0, value.find(':'));
}

// The host of an Origin header ("http://localhost:3000" -> "localhost"); "" when malformed.
std::string origin_host(const std::string& origin) {
  const size_t scheme = origin.find("://");
  if (scheme == std::string::npos) return "";
  std::string rest = origin.substr(scheme + 3);
  rest = rest.substr(0, rest.find('/'));
  return host_of(rest);
}

std::string error_body(const std::string& message, const char* code) {
  return dump_json(json{{"error",
                         {{"message", message},
                          {"type", "invalid_request_error"},
                          {"param", nullptr},
                          {"code", code}}}});
}

void write_refusal(const Refusal& r, httplib::Response& res) {
  res.status = r.status;
  if (r.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(r.body, "application/json");
}

bool has_body(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding")) return true;
  const std::string length = req.get_header_value("Content-Length");
  return !length.empty() && length != "0";
}

}  // namespace

// A server bound to loopback serves only requests addressed to loopback (a DNS-rebinding page
// reaches it under another name) and from no other site's page (a cross-site POST carries that
// site's Origin). Non-loopback binds are for remote clients: no check (use --api-key).
std::string RequestGuard::refused_origin(const httplib::Request& req) const {
  if (!is_loopback_host(options_.host)) return "";
  const std::string host = req.get_header_value("Host");
  if (!host.empty() && !is_loopback_host(host_of(host))) {
    return "Host '" + host + "' is not this loopback server's address";
  }
  const std::string origin = req.get_header_value("Origin");
  if (!origin.empty() && origin != "null" && !is_loopback_host(origin_host(origin)) &&
      !cors_allows(origin)) {
    return "requests from pages of '" + origin + "' are not accepted (--cors-origin allows some)";
  }
  return "";
}

bool RequestGuard::cors_allows(const std::string& origin) const {
  for (const std::string& allowed : options_.cors_origins) {
    if (allowed == "*" || allowed == origin) return true;
  }
  return false;
}

bool RequestGuard::authorized(const httplib::Request& req) const {
  if (options_.api_key.empty() || req.path == "/health" || req.path == "/") return true;
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  const std::string given = header.rfind(prefix, 0) == 0 ? header.substr(prefix.size()) : "";
  return constant_time_equal(given, options_.api_key);
}

httplib::Server::HandlerResponse RequestGuard::before_routing(const httplib::Request& req,
                                                              httplib::Response& res) const {
  t_refusal = Refusal{};
  // CORS (off unless --cors-origin): an allowed page's origin is echoed on every response, and
  // its preflight (OPTIONS, sent without credentials) is answered before the key check.
  const std::string origin = req.get_header_value("Origin");
  if (!origin.empty() && cors_allows(origin)) {
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
    if (req.method == "OPTIONS") {
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
      return httplib::Server::HandlerResponse::Handled;
    }
  }
  Refusal refusal;
  if (const std::string why = refused_origin(req); !why.empty()) {
    refusal = {true, 403, error_body(why, "forbidden_origin")};
  } else if (!authorized(req)) {
    refusal = {true, 401,
               error_body("invalid or missing API key (send the header 'Authorization: Bearer "
                          "KEY')",
                          "invalid_api_key")};
  } else {
    return httplib::Server::HandlerResponse::Unhandled;
  }
  if (has_body(req)) {  // answered by the route (or error) handler, once the body is read
    t_refusal = std::move(refusal);
    return httplib::Server::HandlerResponse::Unhandled;
  }
  write_refusal(refusal, res);
  return httplib::Server::HandlerResponse::Handled;
}

bool RequestGuard::answer_refusal(httplib::Response& res) {
  if (!t_refusal.pending) return false;
  write_refusal(t_refusal, res);
  t_refusal = Refusal{};
  return true;
}

void RequestGuard::end_of_request() {
  t_refusal = Refusal{};
}

}  // namespace ember::server
