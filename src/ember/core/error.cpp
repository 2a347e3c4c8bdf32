#include "ember/core/error.h"

#include <utility>

namespace ember {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Internal:
      return "internal";
    case ErrorKind::InvalidArgument:
      return "invalid_argument";
    case ErrorKind::NotFound:
      return "not_found";
    case ErrorKind::InvalidFile:
      return "invalid_file";
    case ErrorKind::Unsupported:
      return "unsupported";
    case ErrorKind::ResourceExhausted:
      return "resource_exhausted";
    case ErrorKind::Unavailable:
      return "unavailable";
  }
  return "internal";
}

Error Error::invalid_request(std::string field, const std::string& message) {
  Error e(ErrorKind::InvalidArgument, message);
  e.context_ = std::make_shared<const Context>(Context{std::move(field), {}, {}, {}});
  return e;
}

Error Error::in_file(ErrorKind kind, std::string path, const std::string& message) {
  Error e(kind, path + ": " + message);
  e.context_ = std::make_shared<const Context>(Context{{}, std::move(path), {}, {}});
  return e;
}

Error Error::in_tensor(ErrorKind kind, std::string path, std::string tensor,
                       const std::string& message) {
  Error e(kind, path + ": " + message);
  e.context_ = std::make_shared<const Context>(Context{{}, std::move(path), std::move(tensor), {}});
  return e;
}

Error Error::with_reason(std::string reason) const {
  Error e(*this);
  Context c = context_ ? *context_ : Context{};
  c.reason = std::move(reason);
  e.context_ = std::make_shared<const Context>(std::move(c));
  return e;
}

namespace {
const std::string kNone;
}  // namespace

const std::string& Error::field() const noexcept {
  return context_ ? context_->field : kNone;
}

const std::string& Error::file() const noexcept {
  return context_ ? context_->file : kNone;
}

const std::string& Error::tensor() const noexcept {
  return context_ ? context_->tensor : kNone;
}

const std::string& Error::reason() const noexcept {
  return context_ ? context_->reason : kNone;
}

}  // namespace ember
