// Chat templates (tokenizer/jinja/): a Jinja source as a model file carries it, parsed and run on a
// small conversation with tools and kwargs, as the server renders a chat request.
#include <nlohmann/json.hpp>
#include <string>

#include "ember/tokenizer/chat_template.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string source(reinterpret_cast<const char*>(data), size);
  ember::fuzz::expect_clean_refusal([&] {
    const ember::ChatTemplate tmpl = ember::ChatTemplate::from_jinja(source);
    const ember::ChatMessage messages[] = {
        {"system", "Be brief.", nullptr},
        {"user", "Hi <b>there</b>", nullptr},
        {"assistant", "Hello!", nullptr},
        {"user", "What is 2+2?", nullptr},
    };
    ember::ChatTemplateContext context;
    context.bos_token = "<s>";
    context.eos_token = "</s>";
    context.tools = std::make_shared<const nlohmann::ordered_json>(nlohmann::ordered_json::parse(
        R"([{"type":"function","function":{"name":"add","parameters":{"type":"object"}}}])"));
    context.kwargs =
        std::make_shared<const nlohmann::ordered_json>(nlohmann::ordered_json{{"x", 1}});
    (void)tmpl.format(messages, context).render("<s>", "</s>");
  });
  return 0;
}
