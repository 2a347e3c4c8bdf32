// ChatTemplate's Jinja side: a model's own template run in ember's Jinja engine with the
// variables transformers' apply_chat_template passes, and the choice between it, a built-in
// format and a template file (--chat-template).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ember/core/error.h"
#include "ember/tokenizer/chat_template.h"
#include "ember/tokenizer/jinja/template.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember {

namespace {

// The rendered text with each literal BOS/EOS spelling turned into a marker, so that
// tokenizers that do not parse special tokens in text (SentencePiece) still get the ids.
ChatPrompt split_markers(const std::string& text, const std::string& bos, const std::string& eos) {
  ChatPrompt p;
  size_t start = 0;
  auto add_text = [&](size_t end) {
    if (end > start)
      p.pieces.push_back({ChatPrompt::Piece::Kind::Text, text.substr(start, end - start)});
  };
  size_t i = 0;
  while (i < text.size()) {
    if (!bos.empty() && text.compare(i, bos.size(), bos) == 0) {
      add_text(i);
      p.pieces.push_back({ChatPrompt::Piece::Kind::Bos, {}});
      i += bos.size();
      start = i;
    } else if (!eos.empty() && text.compare(i, eos.size(), eos) == 0) {
      add_text(i);
      p.pieces.push_back({ChatPrompt::Piece::Kind::Eos, {}});
      i += eos.size();
      start = i;
    } else {
      ++i;
    }
  }
  add_text(text.size());
  return p;
}

std::string read_template_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::NotFound, "--chat-template: cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

ChatTemplate ChatTemplate::from_jinja(std::string source, std::string tool_use_source) {
  ChatTemplate t;
  t.kind_ = ChatTemplateKind::Jinja;
  t.jinja_ = std::make_shared<const jinja::Template>(source);
  if (!tool_use_source.empty()) {
    t.jinja_tool_use_ = std::make_shared<const jinja::Template>(tool_use_source);
  }
  t.source_ = std::move(source);
  return t;
}

ChatTemplate ChatTemplate::resolve(const std::string& override_spec, const std::string& model_path,
                                   const GgufFile* gguf) {
  if (!override_spec.empty()) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(override_spec, ec)) {
      try {
        return from_jinja(read_template_file(override_spec));
      } catch (const Error& e) {
        throw Error(ErrorKind::InvalidArgument,
                    "--chat-template " + override_spec + ": " + e.what());
      }
    }
    try {
      return from_name(override_spec);
    } catch (const Error&) {
      throw Error(ErrorKind::InvalidArgument,
                  "--chat-template: '" + override_spec +
                      "' is neither a template file nor a built-in format (chatml, llama3, "
                      "llama2, gemma, phi3, plain)");
    }
  }
  std::string source = find_chat_template_source(model_path, gguf);
  if (source.empty()) return ChatTemplate();
  try {
    return from_jinja(source, find_chat_template_source(model_path, gguf, "tool_use"));
  } catch (const Error& e) {
    ChatTemplate fallback = detect(source);
    std::fprintf(stderr,
                 "[ember] warning: the model's chat template does not parse (%s); using the "
                 "built-in '%s' format instead (--chat-template FILE overrides)\n",
                 e.what(), fallback.name());
    return fallback;
  }
}

ChatPrompt ChatTemplate::format_jinja(std::span<const ChatMessage> messages,
                                      const ChatTemplateContext& context) const {
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json msg = {{"role", m.role}, {"content", m.content}};
    if (m.extra && m.extra->is_object()) {
      for (auto it = m.extra->begin(); it != m.extra->end(); ++it) msg[it.key()] = it.value();
    }
    list.push_back(std::move(msg));
  }
  vars["messages"] = std::move(list);
  if (context.tools) vars["tools"] = *context.tools;
  vars["add_generation_prompt"] = context.add_generation_prompt;
  vars["bos_token"] = context.bos_token;
  vars["eos_token"] = context.eos_token;
  if (context.kwargs && context.kwargs->is_object()) {
    for (auto it = context.kwargs->begin(); it != context.kwargs->end(); ++it) {
      vars[it.key()] = it.value();
    }
  }
  const jinja::Template& t = context.tools && jinja_tool_use_ ? *jinja_tool_use_ : *jinja_;
  std::string text = t.render(jinja::Value::from_json(vars));
  return split_markers(text, context.bos_token, context.eos_token);
}

ChatTemplateContext chat_context_for(const Tokenizer& tokenizer, bool add_generation_prompt) {
  ChatTemplateContext c;
  c.add_generation_prompt = add_generation_prompt;
  if (tokenizer.bos_id() >= 0) c.bos_token = tokenizer.piece(tokenizer.bos_id());
  if (tokenizer.eos_id() >= 0) c.eos_token = tokenizer.piece(tokenizer.eos_id());
  return c;
}

}  // namespace ember
