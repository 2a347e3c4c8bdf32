#include "ember/server/error_response.h"

namespace ember::server {

using nlohmann::json;

namespace {

struct StatusAndType {
  int status;
  const char* type;
};

StatusAndType status_and_type(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument:
      return {400, "invalid_request_error"};
    case ErrorKind::NotFound:
      return {404, "invalid_request_error"};  // OpenAI's own 404s (unknown model) use this type
    case ErrorKind::Unsupported:
      return {400, "invalid_request_error"};  // well-formed, but asks for what ember lacks
    case ErrorKind::ResourceExhausted:
      return {503, "server_error"};  // a full queue or memory: the client may retry later
    case ErrorKind::Unavailable:
      return {503, "server_error"};
    case ErrorKind::InvalidFile:  // the server's own model or tokenizer files, not the client's
    case ErrorKind::Internal:
      return {500, "server_error"};
  }
  return {500, "server_error"};
}

json or_null(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

}  // namespace

ErrorResponse to_openai_error(const Error& error) {
  StatusAndType st = status_and_type(error.kind());
  json body = {{"message", error.what()},
               {"type", st.type},
               {"param", or_null(error.field())},
               {"code", or_null(error.reason())}};
  return ErrorResponse{st.status, json{{"error", std::move(body)}}};
}

}  // namespace ember::server
