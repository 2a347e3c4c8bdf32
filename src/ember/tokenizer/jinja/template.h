// A Jinja2 template, parsed once and rendered many times, configured as transformers'
// apply_chat_template configures Jinja2: trim_blocks, lstrip_blocks, loop controls (break,
// continue), an immutable sandbox, `tojson` as json.dumps(ensure_ascii=False), and the globals
// raise_exception(msg) and strftime_now(format), plus Jinja's range, namespace and dict.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ember/tokenizer/jinja/ast.h"
#include "ember/tokenizer/jinja/value.h"

namespace ember::jinja {

struct RenderOptions {
  // The time strftime_now() formats (local time); now when unset. Tests pin it.
  std::optional<std::tm> now;
  // Loop bodies one render may run before it is refused: nested loops over long ranges would
  // render for hours (a million take ~2 s; a chat template over a long conversation runs far
  // fewer).
  int64_t max_loop_bodies = 1'000'000;
};

class Template {
 public:
  // Throws ember::Error ("chat template: line N: ...") on a syntax error.
  explicit Template(std::string_view source);

  // Renders with `variables` (a dict: messages, tools, add_generation_prompt, bos_token, ...).
  // Throws ember::Error on a runtime error; raise_exception(msg) throws with msg as its text.
  std::string render(const Value& variables, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace ember::jinja
