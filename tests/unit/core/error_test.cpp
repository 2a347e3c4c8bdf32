// ember::Error: the message stays exactly what the thrower wrote, and the kind and context ride
// beside it for front ends (the server) that answer without parsing messages.
#include "ember/core/error.h"

#include <gtest/gtest.h>

#include <iterator>
#include <set>
#include <string>
#include <type_traits>

namespace ember {
namespace {

TEST(Error, MessageOnlyConstructorIsInternalWithNoContext) {
  Error e("something broke");
  EXPECT_STREQ(e.what(), "something broke");
  EXPECT_EQ(e.kind(), ErrorKind::Internal);
  EXPECT_EQ(e.field(), "");
  EXPECT_EQ(e.file(), "");
  EXPECT_EQ(e.tensor(), "");
  EXPECT_EQ(e.reason(), "");
  // Still catchable as the standard exception the CLI and tests have always caught.
  const std::runtime_error& base = e;
  EXPECT_STREQ(base.what(), "something broke");
}

TEST(Error, KindConstructorKeepsTheMessage) {
  Error e(ErrorKind::ResourceExhausted, "queue is full");
  EXPECT_EQ(e.kind(), ErrorKind::ResourceExhausted);
  EXPECT_STREQ(e.what(), "queue is full");
}

TEST(Error, InvalidRequestNamesTheFieldAndLeavesTheMessageAlone) {
  Error e = Error::invalid_request("max_tokens", "'max_tokens' must be at least 1, got 0");
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_EQ(e.field(), "max_tokens");
  EXPECT_STREQ(e.what(), "'max_tokens' must be at least 1, got 0");
  EXPECT_EQ(e.file(), "");
}

TEST(Error, InFilePrefixesThePathAsLoadersAlwaysHave) {
  Error e = Error::in_file(ErrorKind::InvalidFile, "/m/a.gguf", "not a GGUF file (bad magic)");
  EXPECT_EQ(e.kind(), ErrorKind::InvalidFile);
  EXPECT_EQ(e.file(), "/m/a.gguf");
  EXPECT_EQ(e.tensor(), "");
  EXPECT_STREQ(e.what(), "/m/a.gguf: not a GGUF file (bad magic)");
}

TEST(Error, InTensorCarriesFileAndTensor) {
  Error e = Error::in_tensor(ErrorKind::Unsupported, "m.gguf", "blk.0.attn_q.weight",
                             "unsupported tensor type Q4_K for tensor blk.0.attn_q.weight");
  EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  EXPECT_EQ(e.file(), "m.gguf");
  EXPECT_EQ(e.tensor(), "blk.0.attn_q.weight");
  EXPECT_STREQ(e.what(), "m.gguf: unsupported tensor type Q4_K for tensor blk.0.attn_q.weight");
}

TEST(Error, WithReasonKeepsKindMessageAndContextAndLeavesTheOriginal) {
  Error base = Error::invalid_request("prompt", "too long");
  Error e = base.with_reason("context_length_exceeded");
  EXPECT_EQ(e.reason(), "context_length_exceeded");
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_EQ(e.field(), "prompt");
  EXPECT_STREQ(e.what(), "too long");
  EXPECT_EQ(base.reason(), "");
  EXPECT_EQ(Error("x").with_reason("r").reason(), "r");
}

TEST(Error, SurvivesThrowAndCopyWithItsContext) {
  static_assert(std::is_nothrow_copy_constructible_v<Error>);
  try {
    throw Error::in_tensor(ErrorKind::InvalidFile, "f", "t", "bad");
  } catch (const std::exception& ex) {
    const auto* e = dynamic_cast<const Error*>(&ex);
    ASSERT_NE(e, nullptr);
    Error copy = *e;
    EXPECT_EQ(copy.kind(), ErrorKind::InvalidFile);
    EXPECT_EQ(copy.file(), "f");
    EXPECT_EQ(copy.tensor(), "t");
    EXPECT_STREQ(copy.what(), "f: bad");
  }
}

TEST(Error, EveryKindHasADistinctName) {
  const ErrorKind kinds[] = {ErrorKind::Internal,    ErrorKind::InvalidArgument,
                             ErrorKind::NotFound,    ErrorKind::InvalidFile,
                             ErrorKind::Unsupported, ErrorKind::ResourceExhausted,
                             ErrorKind::Unavailable};
  std::set<std::string> names;
  for (ErrorKind k : kinds) names.insert(error_kind_name(k));
  EXPECT_EQ(names.size(), std::size(kinds));
  EXPECT_STREQ(error_kind_name(ErrorKind::InvalidArgument), "invalid_argument");
}

}  // namespace
}  // namespace ember
