#include "ember/tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ember/core/error.h"
#include "ember/core/json_depth.h"
#include "ember/formats/gguf.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember {

namespace {

// Jinja's `trim` / Python's str.strip() on the ASCII whitespace that matters in practice.
std::string strip(std::string_view s) {
  constexpr std::string_view ws = " \t\n\r\v\f";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

bool known_role(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant";
}

// A ChatML template that inserts a default system turn spells it as a literal:
// '<|im_start|>system\nYou are ...<|im_end|>\n'. The newline is a real one when the template
// came through JSON decoding of "\n" inside a Jinja string written with "\\n", or the two
// characters '\' 'n' when the template writes '\n' in a Jinja string literal; accept both. A turn
// that concatenates messages[0]['content'] contains quotes or braces and is not a default.
std::string chatml_default_system(std::string_view source) {
  for (std::string_view opener :
       {std::string_view("<|im_start|>system\n"), std::string_view("<|im_start|>system\\n")}) {
    size_t pos = 0;
    while ((pos = source.find(opener, pos)) != std::string_view::npos) {
      size_t start = pos + opener.size();
      size_t end = source.find("<|im_end|>", start);
      if (end == std::string_view::npos) break;
      std::string_view body = source.substr(start, end - start);
      if (!body.empty() && body.find_first_of("'\"{}") == std::string_view::npos) {
        std::string text(body);
        // Unescape the Jinja string-literal escapes a literal system prompt could contain.
        std::string out;
        for (size_t i = 0; i < text.size(); ++i) {
          if (text[i] == '\\' && i + 1 < text.size()) {
            char c = text[++i];
            out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
          } else {
            out += text[i];
          }
        }
        return out;
      }
      pos = start;
    }
  }
  return {};
}

void add_text(ChatPrompt& p, std::string text) {
  if (text.empty()) return;
  if (!p.pieces.empty() && p.pieces.back().kind == ChatPrompt::Piece::Kind::Text) {
    p.pieces.back().text += text;
  } else {
    p.pieces.push_back({ChatPrompt::Piece::Kind::Text, std::move(text)});
  }
}

void add_marker(ChatPrompt& p, ChatPrompt::Piece::Kind kind) {
  p.pieces.push_back({kind, {}});
}

ChatPrompt format_chatml(std::span<const ChatMessage> messages, const std::string& default_system,
                         bool add_generation_prompt) {
  ChatPrompt p;
  if (!default_system.empty() && (messages.empty() || messages[0].role != "system")) {
    add_text(p, "<|im_start|>system\n" + default_system + "<|im_end|>\n");
  }
  for (const ChatMessage& m : messages) {
    add_text(p, "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n");
  }
  if (add_generation_prompt) add_text(p, "<|im_start|>assistant\n");
  return p;
}

// Meta's Llama-3 template: BOS once, then per message a header, the trimmed content and
// <|eot_id|>.
ChatPrompt format_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  ChatPrompt p;
  add_marker(p, ChatPrompt::Piece::Kind::Bos);
  for (const ChatMessage& m : messages) {
    add_text(p, "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + strip(m.content) +
                    "<|eot_id|>");
  }
  if (add_generation_prompt) add_text(p, "<|start_header_id|>assistant<|end_header_id|>\n\n");
  return p;
}

// Meta's Llama-2 chat template: an optional leading system message folds into the first user
// turn as a <<SYS>> block; every user turn opens with BOS, every assistant turn closes with EOS;
// roles must alternate user/assistant. There is no separate generation prompt: the model answers
// after " [/INST]".
ChatPrompt format_llama2(std::span<const ChatMessage> messages) {
  ChatPrompt p;
  std::string system;
  bool has_system = false;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    has_system = true;
    messages = messages.subspan(1);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if ((m.role == "user") != (i % 2 == 0)) {
      throw Error("the llama2 chat template needs roles alternating user/assistant/user/...");
    }
    std::string content = m.content;
    if (i == 0 && has_system) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
    // Appends rather than `" " + strip(...)`: GCC 12 raises a false -Wrestrict on the latter.
    std::string turn = m.role == "user" ? "[INST] " : " ";
    turn += strip(content);
    turn += m.role == "user" ? " [/INST]" : " ";
    if (m.role == "user") {
      add_marker(p, ChatPrompt::Piece::Kind::Bos);
      add_text(p, std::move(turn));
    } else {
      add_text(p, std::move(turn));
      add_marker(p, ChatPrompt::Piece::Kind::Eos);
    }
  }
  return p;
}

// Gemma 2 / 3: BOS, then "<start_of_turn>{user|model}\n" + trimmed content + "<end_of_turn>\n" per
// message (the assistant's role is spelled "model"); a leading system message is folded into the
// first user turn followed by a blank line, as Gemma 3's template does (Gemma 2's refuses system
// messages). The generation prompt opens "<start_of_turn>model\n".
ChatPrompt format_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  ChatPrompt p;
  add_marker(p, ChatPrompt::Piece::Kind::Bos);
  std::string system_prefix;
  if (!messages.empty() && messages[0].role == "system") {
    system_prefix = strip(messages[0].content) + "\n\n";
    messages = messages.subspan(1);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string role = m.role == "assistant" ? "model" : m.role;
    std::string content = i == 0 ? system_prefix + strip(m.content) : strip(m.content);
    add_text(p, "<start_of_turn>" + role + "\n" + content + "<end_of_turn>\n");
  }
  if (add_generation_prompt) add_text(p, "<start_of_turn>model\n");
  return p;
}

// Phi-3 (mini/medium instruct): "<|{role}|>\n" + content + "<|end|>\n" per message; the
// generation prompt opens "<|assistant|>\n", and without one the text ends with EOS.
ChatPrompt format_phi3(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  ChatPrompt p;
  for (const ChatMessage& m : messages) {
    add_text(p, "<|" + m.role + "|>\n" + m.content + "<|end|>\n");
  }
  if (add_generation_prompt) {
    add_text(p, "<|assistant|>\n");
  } else {
    add_marker(p, ChatPrompt::Piece::Kind::Eos);
  }
  return p;
}

// No template: the contents, one per line, so a base model simply continues the text (a single
// user message "Once upon a time" is exactly the prompt `ember run -p` would see).
ChatPrompt format_plain(std::span<const ChatMessage> messages) {
  ChatPrompt p;
  p.bos_from_tokenizer = true;
  std::string text;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) text += '\n';
    text += messages[i].content;
  }
  add_text(p, std::move(text));
  return p;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string ChatPrompt::render(std::string_view bos, std::string_view eos) const {
  std::string out;
  for (const Piece& piece : pieces) {
    switch (piece.kind) {
      case Piece::Kind::Text:
        out += piece.text;
        break;
      case Piece::Kind::Bos:
        out += bos;
        break;
      case Piece::Kind::Eos:
        out += eos;
        break;
    }
  }
  return out;
}

ChatTemplate ChatTemplate::from_name(std::string_view name) {
  ChatTemplate t;
  if (name == "chatml")
    t.kind_ = ChatTemplateKind::ChatML;
  else if (name == "llama3")
    t.kind_ = ChatTemplateKind::Llama3;
  else if (name == "llama2")
    t.kind_ = ChatTemplateKind::Llama2;
  else if (name == "gemma")
    t.kind_ = ChatTemplateKind::Gemma;
  else if (name == "phi3")
    t.kind_ = ChatTemplateKind::Phi3;
  else if (name == "plain")
    t.kind_ = ChatTemplateKind::Plain;
  else {
    throw Error("unknown chat template '" + std::string(name) +
                "' (expected chatml, llama3, llama2, gemma, phi3 or plain)");
  }
  return t;
}

ChatTemplate ChatTemplate::detect(std::string_view source) {
  ChatTemplate t;
  if (source.find("<|im_start|>") != std::string_view::npos) {
    t.kind_ = ChatTemplateKind::ChatML;
    t.default_system_ = chatml_default_system(source);
  } else if (source.find("<|start_header_id|>") != std::string_view::npos) {
    t.kind_ = ChatTemplateKind::Llama3;
  } else if (source.find("[INST]") != std::string_view::npos) {
    t.kind_ = ChatTemplateKind::Llama2;
  } else if (source.find("<start_of_turn>") != std::string_view::npos) {
    t.kind_ = ChatTemplateKind::Gemma;
  } else if (source.find("<|user|>") != std::string_view::npos &&
             source.find("<|end|>") != std::string_view::npos) {
    t.kind_ = ChatTemplateKind::Phi3;
  }
  return t;
}

const char* ChatTemplate::name() const {
  switch (kind_) {
    case ChatTemplateKind::ChatML:
      return "chatml";
    case ChatTemplateKind::Llama3:
      return "llama3";
    case ChatTemplateKind::Llama2:
      return "llama2";
    case ChatTemplateKind::Gemma:
      return "gemma";
    case ChatTemplateKind::Phi3:
      return "phi3";
    case ChatTemplateKind::Plain:
      return "plain";
    case ChatTemplateKind::Jinja:
      return "jinja";
  }
  return "plain";
}

ChatPrompt ChatTemplate::format(std::span<const ChatMessage> messages,
                                bool add_generation_prompt) const {
  ChatTemplateContext context;
  context.add_generation_prompt = add_generation_prompt;
  return format(messages, context);
}

ChatPrompt ChatTemplate::format(std::span<const ChatMessage> messages,
                                const ChatTemplateContext& context) const {
  if (kind_ == ChatTemplateKind::Jinja) return format_jinja(messages, context);
  if (context.tools) {
    throw Error::invalid_request("tools", std::string("the built-in '") + name() +
                                              "' chat format cannot present tools; the model "
                                              "needs a Jinja chat template that does");
  }
  const bool add_generation_prompt = context.add_generation_prompt;
  for (const ChatMessage& m : messages) {
    if (!known_role(m.role)) {
      throw Error("unknown chat role '" + m.role + "' (expected system, user or assistant)");
    }
  }
  switch (kind_) {
    case ChatTemplateKind::ChatML:
      return format_chatml(messages, default_system_, add_generation_prompt);
    case ChatTemplateKind::Llama3:
      return format_llama3(messages, add_generation_prompt);
    case ChatTemplateKind::Llama2:
      return format_llama2(messages);
    case ChatTemplateKind::Gemma:
      return format_gemma(messages, add_generation_prompt);
    case ChatTemplateKind::Phi3:
      return format_phi3(messages, add_generation_prompt);
    case ChatTemplateKind::Plain:
    case ChatTemplateKind::Jinja:
      return format_plain(messages);
  }
  return format_plain(messages);
}

std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const ChatPrompt& prompt) {
  std::vector<int32_t> ids;
  bool first = true;
  for (const ChatPrompt::Piece& piece : prompt.pieces) {
    switch (piece.kind) {
      case ChatPrompt::Piece::Kind::Text: {
        bool bos = first && prompt.bos_from_tokenizer && tokenizer.add_bos_default();
        std::vector<int32_t> part = tokenizer.encode_with_special(piece.text, bos, true);
        ids.insert(ids.end(), part.begin(), part.end());
        break;
      }
      case ChatPrompt::Piece::Kind::Bos:
        if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
        break;
      case ChatPrompt::Piece::Kind::Eos:
        if (tokenizer.eos_id() >= 0) ids.push_back(tokenizer.eos_id());
        break;
    }
    first = false;
  }
  // An empty plain conversation still conditions on BOS, like `ember run` with no prompt.
  if (ids.empty() && prompt.bos_from_tokenizer && tokenizer.bos_id() >= 0) {
    ids.push_back(tokenizer.bos_id());
  }
  return ids;
}

std::string find_chat_template_source(const std::string& model_path, const GgufFile* gguf,
                                      const std::string& variant) {
  const bool is_default = variant == "default";
  if (gguf != nullptr) {
    const GgufValue* v =
        gguf->find(is_default ? "tokenizer.chat_template" : "tokenizer.chat_template." + variant);
    if (v != nullptr && v->type == GgufType::String) return v->string_value;
    return {};
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir =
      fs::is_directory(model_path, ec) ? fs::path(model_path) : fs::path(model_path).parent_path();
  if (dir.empty()) dir = ".";
  fs::path config = dir / "tokenizer_config.json";
  if (fs::exists(config, ec)) {
    const std::string text = read_text(config);
    check_json_depth(text, config.string(), /*is_file=*/true);
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("chat_template")) {
      const nlohmann::json& t = j["chat_template"];
      if (t.is_string()) return is_default ? t.get<std::string>() : std::string();
      // Newer HF configs store named templates: [{"name": "default", "template": "..."}, ...].
      if (t.is_array()) {
        for (const nlohmann::json& e : t) {
          if (e.is_object() && e.value("name", "") == variant && e.contains("template") &&
              e["template"].is_string()) {
            return e["template"].get<std::string>();
          }
        }
      }
    }
  }
  fs::path jinja =
      dir / (is_default ? "chat_template.jinja" : "chat_template_" + variant + ".jinja");
  if (fs::exists(jinja, ec)) return read_text(jinja);
  return {};
}

}  // namespace ember
