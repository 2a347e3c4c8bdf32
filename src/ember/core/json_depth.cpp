#include "ember/core/json_depth.h"

#include "ember/core/error.h"

namespace ember {

void check_json_depth(std::string_view text, const std::string& what, bool is_file, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        const std::string message =
            "JSON nested deeper than " + std::to_string(max_depth) + " levels";
        if (is_file) throw Error::in_file(ErrorKind::InvalidFile, what, message);
        throw Error::invalid_request("", message);
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace ember
