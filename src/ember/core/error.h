// Errors at the edges of ember: every parser and loader throws ember::Error with a message that
// names the file (and tensor/field) at fault. The CLI catches it, prints it once, exits non-zero.
// The kind and context fields let a front end answer without parsing the message: the server
// turns the kind into an HTTP status and the request field into OpenAI's "param".
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace ember {

enum class ErrorKind : uint8_t {
  Internal,           // unclassified; what `Error(message)` throws
  InvalidArgument,    // bad user input: a CLI flag, a request field
  NotFound,           // a file, model or tensor that is not there
  InvalidFile,        // a model or tokenizer file that is malformed
  Unsupported,        // valid but not handled here: a dtype, an architecture, a format version
  ResourceExhausted,  // a queue, the KV cache or the context is full
  Unavailable,        // shutting down: the same request may succeed elsewhere or later
};

// "internal", "invalid_argument", ...: stable names for logs and tests.
const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  // what() is always the complete human message; the context below never changes it.
  explicit Error(const std::string& message) : Error(ErrorKind::Internal, message) {}
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}

  // A request field (or CLI flag) the caller got wrong. what() is `message` as given: the
  // messages already quote the field where a reader needs it.
  static Error invalid_request(std::string field, const std::string& message);
  // A fault in a file. what() is "<path>: <message>", the form every loader has always printed.
  static Error in_file(ErrorKind kind, std::string path, const std::string& message);
  // A fault in one tensor of a file; what() as in_file() (the message names the tensor itself).
  static Error in_tensor(ErrorKind kind, std::string path, std::string tensor,
                         const std::string& message);

  // A copy that also carries a short machine-readable reason ("queue_full",
  // "context_length_exceeded") for clients that branch on more than the kind.
  Error with_reason(std::string reason) const;

  ErrorKind kind() const noexcept { return kind_; }
  // Empty when the error is not about a request field / file / tensor, or has no reason.
  const std::string& field() const noexcept;
  const std::string& file() const noexcept;
  const std::string& tensor() const noexcept;
  const std::string& reason() const noexcept;

 private:
  struct Context {
    std::string field, file, tensor, reason;
  };

  // Shared and immutable so copying an Error (which throwing does) cannot throw, as the
  // standard exceptions promise.
  std::shared_ptr<const Context> context_;
  ErrorKind kind_;
};

}  // namespace ember
