// `ember template`: renders a conversation through a model's chat template (or --chat-template
// FILE) and prints the prompt, for debugging a template. Reads only the tokenizer and the
// template, not the weights. --ids prints the token ids the server would prefill instead.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ember/cli/commands.h"
#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/server/chat_messages.h"
#include "ember/tokenizer/chat_template.h"
#include "ember/tokenizer/load_tokenizer.h"
#include "ember/tokenizer/tokenizer.h"

namespace ember::cli {

namespace {

struct TemplateOptions {
  std::string model;
  std::string chat_template;
  std::string messages;
  std::string tools;
  std::string kwargs;
  bool no_generation_prompt = false;
  bool ids = false;
};

nlohmann::ordered_json read_json(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::NotFound, std::string(flag) + ": cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) {
    throw Error(ErrorKind::InvalidArgument,
                std::string(flag) + ": '" + path + "' is not valid JSON");
  }
  return j;
}

int template_command(const TemplateOptions& o) {
  const std::string model = o.model.empty() ? default_model_path() : o.model;
  std::unique_ptr<GgufFile> gguf;
  if (model.size() > 5 && model.compare(model.size() - 5, 5, ".gguf") == 0) {
    gguf = std::make_unique<GgufFile>(model);
  }
  std::unique_ptr<Tokenizer> tok = load_tokenizer_for_model(model, "");
  ChatTemplate chat = ChatTemplate::resolve(o.chat_template, model, gguf.get());

  // --messages takes a request body ({"messages": [...]}) or the bare list.
  nlohmann::ordered_json conv = read_json(o.messages, "--messages");
  if (conv.is_array()) conv = {{"messages", conv}};
  std::vector<ChatMessage> messages;
  try {
    messages = server::parse_chat_messages(conv);
  } catch (const Error& e) {
    throw Error(ErrorKind::InvalidArgument, "--messages " + o.messages + ": " + e.what());
  }
  ChatTemplateContext context = chat_context_for(*tok, !o.no_generation_prompt);
  if (!o.tools.empty()) {
    auto tools = read_json(o.tools, "--tools");
    if (tools.is_object() && tools.contains("tools")) tools = tools["tools"];
    if (!tools.is_array())
      throw Error(ErrorKind::InvalidArgument, "--tools: expected a JSON array");
    context.tools = std::make_shared<const nlohmann::ordered_json>(std::move(tools));
  }
  if (!o.kwargs.empty()) {
    auto kwargs = nlohmann::ordered_json::parse(o.kwargs, nullptr, false);
    if (!kwargs.is_object()) {
      throw Error(ErrorKind::InvalidArgument,
                  "--kwargs: expected a JSON object such as "
                  "'{\"enable_thinking\": false}'");
    }
    context.kwargs = std::make_shared<const nlohmann::ordered_json>(std::move(kwargs));
  }
  ChatPrompt prompt = chat.format(messages, context);
  if (o.ids) {
    std::string line;
    for (int32_t id : encode_chat_prompt(*tok, prompt)) {
      line += (line.empty() ? "" : " ") + std::to_string(id);
    }
    std::printf("%s\n", line.c_str());
  } else {
    std::string text = prompt.render(context.bos_token, context.eos_token);
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  std::fprintf(stderr, "[ember] template: %s\n",
               chat.kind() == ChatTemplateKind::Jinja ? "jinja" : chat.name());
  return 0;
}

}  // namespace

Command add_template_command(CLI::App& app) {
  auto o = std::make_shared<TemplateOptions>();
  CLI::App* cmd =
      app.add_subcommand("template", "Print the prompt a chat template renders for a conversation");
  cmd->add_option("-m,--model", o->model,
                  "Model whose template and tokenizer to use (default: the stories260K fixture)");
  cmd->add_option("--chat-template", o->chat_template,
                  "A Jinja template file, or a built-in format: chatml, llama3, llama2, gemma, "
                  "phi3, plain (default: the model's own template)");
  cmd->add_option("--messages", o->messages, "JSON file: a chat request body or its messages array")
      ->required();
  cmd->add_option("--tools", o->tools, "JSON file: the request's tools array");
  cmd->add_option("--kwargs", o->kwargs,
                  "Extra template variables as a JSON object (chat_template_kwargs)");
  cmd->add_flag("--no-generation-prompt", o->no_generation_prompt,
                "Do not open the assistant's turn (add_generation_prompt = false)");
  cmd->add_flag("--ids", o->ids, "Print the token ids instead of the text");
  return [o] { return template_command(*o); };
}

}  // namespace ember::cli
