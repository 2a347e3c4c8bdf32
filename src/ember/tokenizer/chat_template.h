// Chat messages -> the prompt a chat-tuned model was trained on. ember does not run Jinja: it
// recognises the family a model's template belongs to (ChatML, Llama-3, Llama-2, Gemma, Phi-3) and
// reproduces
// that family's output byte for byte, with a plain "contents joined" format for models that have
// no template (base models such as stories260K), so /v1/chat/completions works with any model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

class GgufFile;
class Tokenizer;

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

enum class ChatTemplateKind : uint8_t { ChatML, Llama3, Llama2, Gemma, Phi3, Plain };

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
  // Recognises a Jinja chat template (tokenizer_config.json `chat_template`, GGUF
  // `tokenizer.chat_template`). An empty or unrecognised source gives Plain.
  static ChatTemplate detect(std::string_view source);

  ChatTemplateKind kind() const { return kind_; }
  const char* name() const;
  // ChatML templates such as SmolLM2's and Qwen's insert this system turn when the conversation
  // does not start with one; empty when the template has none.
  const std::string& default_system() const { return default_system_; }

  // Formats `messages` (roles must be system / user / assistant) and, when
  // `add_generation_prompt`, opens the assistant's turn. Throws ember::Error on an unknown role.
  ChatPrompt format(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;

 private:
  ChatTemplateKind kind_ = ChatTemplateKind::Plain;
  std::string default_system_;
};

// Token ids for a formatted prompt: text pieces are encoded with special tokens parsed (so
// "<|im_start|>" becomes its id), markers become the tokenizer's BOS/EOS ids.
std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, const ChatPrompt& prompt);

// The chat template stored with a model, or "" when there is none: GGUF metadata
// `tokenizer.chat_template`, else `chat_template` in tokenizer_config.json (or a
// chat_template.jinja file) in the model's directory. `gguf` may be null.
std::string find_chat_template_source(const std::string& model_path, const GgufFile* gguf);

}  // namespace ember
