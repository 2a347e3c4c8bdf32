// Chat messages -> the prompt a chat-tuned model was trained on. A model's own Jinja template
// (GGUF tokenizer.chat_template, tokenizer_config.json chat_template, chat_template.jinja) runs
// in ember's Jinja engine (tokenizer/jinja/) with the variables transformers passes: messages,
// tools, add_generation_prompt, bos_token, eos_token and chat_template_kwargs. Built-in family
// formats (ChatML, Llama-3, Llama-2, Gemma, Phi-3) remain for `--chat-template NAME`, and a
// plain "contents joined" format serves models without a template (base models such as
// stories260K), so /v1/chat/completions works with any model.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

class GgufFile;
class Tokenizer;

struct ChatMessage {
  std::string role;  // system, user, assistant (tool with a Jinja template)
  std::string content;
  // Further fields the template sees in this message, as a JSON object: tool_calls (with
  // function.arguments as an object, as HF templates expect), tool_call_id, name. Null: none.
  std::shared_ptr<const nlohmann::ordered_json> extra = nullptr;
};

// What a template sees besides the messages.
struct ChatTemplateContext {
  bool add_generation_prompt = true;
  std::shared_ptr<const nlohmann::ordered_json> tools;   // OpenAI `tools` array, or null
  std::shared_ptr<const nlohmann::ordered_json> kwargs;  // chat_template_kwargs object, or null
  // The tokenizer's spelling of BOS/EOS ("<s>", "<|begin_of_text|>"); the rendered text's
  // occurrences of these become BOS/EOS markers (see ChatPrompt).
  std::string bos_token;
  std::string eos_token;
};

enum class ChatTemplateKind : uint8_t { ChatML, Llama3, Llama2, Gemma, Phi3, Plain, Jinja };

namespace jinja {
class Template;
}

// A formatted conversation. BOS/EOS appear as markers rather than text because their literal
// spelling ("<s>", "<|begin_of_text|>") is not parsed as a special token by every tokenizer.
struct ChatPrompt {
  struct Piece {
    enum class Kind : uint8_t { Text, Bos, Eos } kind = Kind::Text;
    std::string text;  // Kind::Text only
  };
  std::vector<Piece> pieces;
  // Plain format: prepend BOS exactly when the tokenizer does by default (as `ember run` does).
  bool bos_from_tokenizer = false;

  // The string HF's apply_chat_template would produce, spelling BOS/EOS as given.
  std::string render(std::string_view bos = "", std::string_view eos = "") const;
};

class ChatTemplate {
 public:
  ChatTemplate() = default;  // Plain

  // "chatml", "llama3", "llama2", "gemma", "phi3", "plain"; throws ember::Error naming the valid
  // ones otherwise.
  static ChatTemplate from_name(std::string_view name);
  // Recognises the family of a Jinja chat template by its markers (a fallback for templates
  // the Jinja engine cannot parse). An empty or unrecognised source gives Plain.
  static ChatTemplate detect(std::string_view source);
  // Runs `source` in the Jinja engine; `tool_use_source` (a checkpoint's `tool_use` variant,
  // may be empty) is used instead when a request has tools. Throws ember::Error on a syntax
  // error, naming the line.
  static ChatTemplate from_jinja(std::string source, std::string tool_use_source = {});
  // The template `ember chat`/`serve`/`template` use: `override_spec` is a built-in name or a
  // Jinja file (--chat-template); empty takes the model's own template, falling back (with a
  // warning on stderr) to family recognition when it does not parse, and to Plain without one.
  static ChatTemplate resolve(const std::string& override_spec, const std::string& model_path,
                              const GgufFile* gguf);

  ChatTemplateKind kind() const { return kind_; }
  const char* name() const;
  // ChatML templates such as SmolLM2's and Qwen's insert this system turn when the conversation
  // does not start with one; empty when the template has none.
  const std::string& default_system() const { return default_system_; }

  // Formats `messages` (built-in formats: roles system / user / assistant) and, when
  // `add_generation_prompt`, opens the assistant's turn. Throws ember::Error on an unknown role,
  // on tools given to a built-in format, or when the template raises (raise_exception).
  ChatPrompt format(std::span<const ChatMessage> messages,
                    const ChatTemplateContext& context) const;
  ChatPrompt format(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;
  // The Jinja source (empty for the built-in formats).
  const std::string& source() const { return source_; }

 private:
  ChatPrompt format_jinja(std::span<const ChatMessage> messages,
                          const ChatTemplateContext& context) const;

  ChatTemplateKind kind_ = ChatTemplateKind::Plain;
  std::string default_system_;
  std::string source_;
  std::shared_ptr<const jinja::Template> jinja_;
  std::shared_ptr<const jinja::Template> jinja_tool_use_;
};

// BOS/EOS spelled as `tokenizer` spells them, for ChatTemplateContext.
ChatTemplateContext chat_context_for(const Tokenizer& tokenizer, bool add_generation_prompt = true);

// Token ids for a formatted prompt: text pieces are encoded with special tokens parsed (so
// "<|im_start|>" becomes its id), markers become the tokenizer's BOS/EOS ids.
std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const ChatPrompt& prompt);

// The chat template stored with a model, or "" when there is none: GGUF metadata
// `tokenizer.chat_template`, else `chat_template` in tokenizer_config.json (or a
// chat_template.jinja file) in the model's directory. `gguf` may be null. `variant` names one of
// several named templates ("tool_use": GGUF tokenizer.chat_template.tool_use, or the entry of
// that name in tokenizer_config.json's list); "" when the model has no such variant.
std::string find_chat_template_source(const std::string& model_path, const GgufFile* gguf,
                                      const std::string& variant = "default");

}  // namespace ember
