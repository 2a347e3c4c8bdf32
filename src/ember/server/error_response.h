// The one place a server failure becomes an HTTP answer. Every error path of the server (request
// validation, refusals, failures mid-generation, unmatched routes, stray exceptions) builds an
// ember::Error and sends what this returns, so clients always see OpenAI's error shape.
#pragma once

#include <nlohmann/json.hpp>

#include "ember/core/error.h"

namespace ember::server {

struct ErrorResponse {
  int status = 500;
  nlohmann::json body;  // {"error": {"message", "type", "param", "code"}}
};

// The kind picks the status and OpenAI's "type", the request field becomes "param" and the
// reason "code" (both null when empty); "message" is what() unchanged.
ErrorResponse to_openai_error(const Error& error);

}  // namespace ember::server
