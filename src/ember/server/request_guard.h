// Who may call `ember serve` (#26): the API key (`Authorization: Bearer`, compared in constant
// time; every endpoint but /health and the chat page), the Host and Origin checks of a loopback
// bind (a DNS-rebinding page, another site's page), and CORS for the origins --cors-origin names.
//
// The checks run when a request's headers are in (httplib's pre-routing hook). A request without
// a body is refused there. One with a body is refused only after httplib has read that body:
// answered before, its unread bytes would be parsed as the next request on the connection, and a
// page can put any request it likes in there, one without its Origin. (GuardedHttpServer also
// closes a connection whose request left body bytes unread; TLS keeps httplib's own connection
// loop, so this ordering is its defence.)
#pragma once

#include <httplib.h>

#include <string>
#include <vector>

namespace ember::server {

struct GuardOptions {
  std::string host;                       // the address the server is bound to
  std::string api_key;                    // empty: no key
  std::vector<std::string> cors_origins;  // "*" allows every origin
};

class RequestGuard {
 public:
  explicit RequestGuard(GuardOptions options) : options_(std::move(options)) {}

  // httplib's pre-routing hook: CORS headers and preflights, then the refusals (403 for a
  // foreign Host or Origin on a loopback bind, 401 without the key).
  httplib::Server::HandlerResponse before_routing(const httplib::Request& req,
                                                  httplib::Response& res) const;

  // First thing in every route handler and in the error handler: when this request was refused
  // (its body has been read by now), writes the refusal into res and returns true.
  static bool answer_refusal(httplib::Response& res);
  // The request is over (httplib's logger): forgets a refusal nothing answered.
  static void end_of_request();

 private:
  std::string refused_origin(const httplib::Request& req) const;
  bool cors_allows(const std::string& origin) const;
  bool authorized(const httplib::Request& req) const;

  GuardOptions options_;
};

}  // namespace ember::server
