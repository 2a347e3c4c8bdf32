// Errors at the edges of ember: every parser and loader throws ember::Error with a message that
// names the file (and tensor/field) at fault. The CLI catches it, prints it once, exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace ember {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace ember
