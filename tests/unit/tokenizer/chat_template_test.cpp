// Chat templates: byte-exact prompts for each family, recognition of real templates, the name
// override, and encoding with BOS/EOS markers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "ember/core/error.h"
#include "ember/model/model_loader.h"
#include "ember/tokenizer/chat_template.h"
#include "test_util.h"

namespace ember {
namespace {

// SmolLM2-135M-Instruct's tokenizer_config.json chat_template, as decoded from JSON.
const char* kSmolLm2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

// Qwen2.5's template writes its newlines as Jinja escapes ('\n' inside the string literal).
const char* kQwenTemplateFragment =
    "{%- if messages[0]['role'] == 'system' %}\\n        {{- '<|im_start|>system\\n' + "
    "messages[0]['content'] + '<|im_end|>\\n' }}\\n    {%- else %}\\n        {{- "
    "'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\\n    {%- endif %}";

const char* kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

const char* kLlama2Template =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}";

std::vector<ChatMessage> conversation() {
  return {{"user", "Hi there"}, {"assistant", "Hello! How can I help?"}, {"user", "Tell a story"}};
}

TEST(ChatTemplate, SmolLm2InsertsItsDefaultSystemMessage) {
  ChatTemplate t = ChatTemplate::detect(kSmolLm2Template);
  EXPECT_EQ(t.kind(), ChatTemplateKind::ChatML);
  EXPECT_EQ(t.default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  std::vector<ChatMessage> m = {{"user", "What is 2+2?"}};
  EXPECT_EQ(t.format(m).render(),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, ChatMLWithAnExplicitSystemMessageKeepsIt) {
  ChatTemplate t = ChatTemplate::detect(kSmolLm2Template);
  std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", " hi "}};
  EXPECT_EQ(t.format(m).render(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n hi "
            "<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.format(m, /*add_generation_prompt=*/false).render(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n hi <|im_end|>\n");
}

TEST(ChatTemplate, QwenDefaultSystemFromEscapedNewlines) {
  ChatTemplate t = ChatTemplate::detect(kQwenTemplateFragment);
  EXPECT_EQ(t.kind(), ChatTemplateKind::ChatML);
  EXPECT_EQ(t.default_system(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
}

TEST(ChatTemplate, ChatMLByNameHasNoDefaultSystem) {
  ChatTemplate t = ChatTemplate::from_name("chatml");
  EXPECT_EQ(t.format(conversation()).render(),
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello! How can I "
            "help?<|im_end|>\n<|im_start|>user\nTell a story<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3) {
  ChatTemplate t = ChatTemplate::detect(kLlama3Template);
  EXPECT_EQ(t.kind(), ChatTemplateKind::Llama3);
  std::vector<ChatMessage> m = {{"system", "You are helpful."}, {"user", "  Hi there\n"}};
  EXPECT_EQ(t.format(m).render("<|begin_of_text|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are "
            "helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi "
            "there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2FoldsTheSystemMessageAndMarksEveryTurn) {
  ChatTemplate t = ChatTemplate::detect(kLlama2Template);
  EXPECT_EQ(t.kind(), ChatTemplateKind::Llama2);
  std::vector<ChatMessage> m = {{"system", "Be kind."},
                                {"user", "Hi there"},
                                {"assistant", "Hello!"},
                                {"user", "Tell a story "}};
  EXPECT_EQ(t.format(m).render("<s>", "</s>"),
            "<s>[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHi there [/INST] Hello! </s><s>[INST] Tell "
            "a story [/INST]");
  std::vector<ChatMessage> bad = {{"user", "a"}, {"user", "b"}};
  EXPECT_THROW(t.format(bad), Error);
}

// Gemma 2/3's template (the part that decides the output): BOS, turns of "user" / "model", the
// content trimmed, a system message folded into the first user turn (Gemma 3).
constexpr const char* kGemmaTemplate =
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = "
    "messages[0]['content'] + '\n\n' -%}...{{ '<start_of_turn>' + role + '\n' + (first_user_prefix "
    "if loop.first else \"\") }}{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor "
    "-%}{%- if add_generation_prompt -%}{{'<start_of_turn>model\n'}}{%- endif -%}";

TEST(ChatTemplate, GemmaTurnsAndFoldedSystem) {
  ChatTemplate t = ChatTemplate::detect(kGemmaTemplate);
  EXPECT_EQ(t.kind(), ChatTemplateKind::Gemma);
  std::vector<ChatMessage> m = {
      {"system", "Be brief."}, {"user", " Hi "}, {"assistant", "Hello!"}, {"user", "Story?"}};
  EXPECT_EQ(t.format(m).render("<bos>"),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!"
            "<end_of_turn>\n<start_of_turn>user\nStory?<end_of_turn>\n<start_of_turn>model\n");
}

// Phi-3-mini-4k-instruct's template.
constexpr const char* kPhi3Template =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + "
    "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + "
    "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' "
    "%}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

TEST(ChatTemplate, Phi3Turns) {
  ChatTemplate t = ChatTemplate::detect(kPhi3Template);
  EXPECT_EQ(t.kind(), ChatTemplateKind::Phi3);
  std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(t.format(m).render("<s>", "<|endoftext|>"),
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n");
  EXPECT_EQ(t.format(m, /*add_generation_prompt=*/false).render("<s>", "<|endoftext|>"),
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|endoftext|>");
}

TEST(ChatTemplate, PlainJoinsContents) {
  ChatTemplate t = ChatTemplate::detect("");
  EXPECT_EQ(t.kind(), ChatTemplateKind::Plain);
  std::vector<ChatMessage> one = {{"user", "Once upon a time"}};
  EXPECT_EQ(t.format(one).render("<s>"), "Once upon a time");
  EXPECT_TRUE(t.format(one).bos_from_tokenizer);
  EXPECT_EQ(t.format(conversation()).render(), "Hi there\nHello! How can I help?\nTell a story");
  EXPECT_EQ(ChatTemplate::detect("{{ something unknown }}").kind(), ChatTemplateKind::Plain);
}

TEST(ChatTemplate, NamesAndErrors) {
  for (const char* name : {"chatml", "llama3", "llama2", "gemma", "phi3", "plain"}) {
    EXPECT_STREQ(ChatTemplate::from_name(name).name(), name);
  }
  try {
    ChatTemplate::from_name("vicuna");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown chat template 'vicuna'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("chatml, llama3, llama2, gemma, phi3 or plain"),
              std::string::npos);
  }
  std::vector<ChatMessage> m = {{"tool", "x"}};
  EXPECT_THROW(ChatTemplate::from_name("chatml").format(m), Error);
}

TEST(ChatTemplate, FindsTheTemplateInTokenizerConfig) {
  auto dir = test::scratch_dir("chat-template");
  EXPECT_EQ(find_chat_template_source(dir.string(), nullptr), "");
  { std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "<|im_start|>x"})"; }
  EXPECT_EQ(find_chat_template_source(dir.string(), nullptr), "<|im_start|>x");
  EXPECT_EQ(find_chat_template_source((dir / "config.json").string(), nullptr), "<|im_start|>x");
  {
    std::ofstream(dir / "tokenizer_config.json")
        << R"({"chat_template": [{"name": "tool_use", "template": "a"}, {"name": "default", "template": "[INST]"}]})";
  }
  EXPECT_EQ(find_chat_template_source(dir.string(), nullptr), "[INST]");
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, EncodesWithTheModelsTokenizer) {
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  LoadOptions lo;
  lo.path = model.string();
  LoadedModel m = load_model(lo);
  const Tokenizer& tok = *m.tokenizer;
  // No template in the GGUF: plain, and the ids equal a plain encode with BOS (as `ember run`).
  EXPECT_EQ(find_chat_template_source(model.string(), m.checkpoint.gguf.get()), "");
  std::vector<ChatMessage> one = {{"user", "Once upon a time"}};
  EXPECT_EQ(encode_chat_prompt(tok, ChatTemplate().format(one)),
            tok.encode("Once upon a time", true));
  // Llama-2 markers become the BOS / EOS ids.
  std::vector<ChatMessage> turns = {{"user", "Hi"}, {"assistant", "Yo"}, {"user", "Go"}};
  std::vector<int32_t> ids =
      encode_chat_prompt(tok, ChatTemplate::from_name("llama2").format(turns));
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), tok.bos_id());
  int bos = 0, eos = 0;
  for (int32_t id : ids) {
    bos += id == tok.bos_id();
    eos += id == tok.eos_id();
  }
  EXPECT_EQ(bos, 2);
  EXPECT_EQ(eos, 1);
}

TEST(ChatTemplate, SmolLm2TokenizerParsesChatMLSpecialTokens) {
  auto tj = test::fixture("models/smollm2-135m-instruct/config.json");
  EMBER_REQUIRE_FIXTURE(tj);
  LoadOptions lo;
  lo.path = tj.string();
  lo.dummy = true;
  std::unique_ptr<Tokenizer> tok;
  try {
    Checkpoint cp = open_checkpoint(lo.path, {true, ""});
    tok = load_checkpoint_tokenizer(cp);
  } catch (const Error& e) {
    GTEST_SKIP() << "SmolLM2 tokenizer not loadable here: " << e.what();
  }
  std::vector<ChatMessage> m = {{"user", "Hi"}};
  std::vector<int32_t> ids =
      encode_chat_prompt(*tok, ChatTemplate::detect(kSmolLm2Template).format(m));
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);  // <|im_start|>
  int im_end = 0;
  for (int32_t id : ids) im_end += id == 2;
  EXPECT_EQ(im_end, 2);  // system and user turns closed
}

}  // namespace
}  // namespace ember
