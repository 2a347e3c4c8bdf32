// The one kind -> HTTP mapping of the server: status, OpenAI "type", and the field and reason
// as "param" and "code".
#include "ember/server/error_response.h"

#include <gtest/gtest.h>

namespace ember::server {
namespace {

using nlohmann::json;

struct Expected {
  ErrorKind kind;
  int status;
  const char* type;
};

TEST(ServerErrorResponse, EveryKindMapsToItsStatusAndType) {
  const Expected cases[] = {
      {ErrorKind::InvalidArgument, 400, "invalid_request_error"},
      {ErrorKind::NotFound, 404, "invalid_request_error"},
      {ErrorKind::InvalidFile, 500, "server_error"},
      {ErrorKind::Unsupported, 400, "invalid_request_error"},
      {ErrorKind::ResourceExhausted, 503, "server_error"},
      {ErrorKind::Unavailable, 503, "server_error"},
      {ErrorKind::Internal, 500, "server_error"},
  };
  for (const Expected& c : cases) {
    SCOPED_TRACE(error_kind_name(c.kind));
    ErrorResponse r = to_openai_error(Error(c.kind, "the message"));
    EXPECT_EQ(r.status, c.status);
    EXPECT_EQ(r.body, json({{"error",
                             {{"message", "the message"},
                              {"type", c.type},
                              {"param", nullptr},
                              {"code", nullptr}}}}));
  }
}

TEST(ServerErrorResponse, PlainErrorIsAnInternal500) {
  ErrorResponse r = to_openai_error(Error("unexpected"));
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body["error"]["type"], "server_error");
  EXPECT_EQ(r.body["error"]["message"], "unexpected");
}

TEST(ServerErrorResponse, FieldBecomesParamAndReasonBecomesCode) {
  ErrorResponse r =
      to_openai_error(Error::invalid_request("messages[0].role", "unknown role 'wizard'"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "messages[0].role");
  EXPECT_TRUE(r.body["error"]["code"].is_null());

  r = to_openai_error(
      Error::invalid_request("max_tokens", "too long").with_reason("context_length_exceeded"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "max_tokens");
  EXPECT_EQ(r.body["error"]["code"], "context_length_exceeded");

  r = to_openai_error(Error(ErrorKind::ResourceExhausted, "wait").with_reason("queue_full"));
  EXPECT_EQ(r.status, 503);
  EXPECT_TRUE(r.body["error"]["param"].is_null());
  EXPECT_EQ(r.body["error"]["code"], "queue_full");
}

TEST(ServerErrorResponse, FileContextStaysOutOfTheWireShape) {
  // A broken model file is the operator's problem: the client sees a 500 and the message only.
  ErrorResponse r = to_openai_error(Error::in_file(ErrorKind::InvalidFile, "m.gguf", "truncated"));
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body["error"]["message"], "m.gguf: truncated");
  EXPECT_TRUE(r.body["error"]["param"].is_null());
  EXPECT_EQ(r.body["error"].size(), 4u);
}

}  // namespace
}  // namespace ember::server
