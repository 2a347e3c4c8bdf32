// `ember tokenize`: text -> token ids (and pieces), for tests and for users. Reads only the
// tokenizer: no weights and no model config, so it works on any GGUF with a vocabulary (including
// llama.cpp's vocab-only files of architectures ember cannot run).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "ember/cli/commands.h"
#include "ember/core/error.h"
#include "ember/tokenizer/load_tokenizer.h"

namespace ember::cli {

namespace {

struct TokenizeOptions {
  std::string model;
  std::string tokenizer;
  std::string text;
  std::string file;
  bool ids_only = false;
  bool no_bos = false;
  bool special = false;
  bool stats = false;
};

// A piece's bytes as a readable, quoted string: control bytes and quotes escaped.
std::string quoted(const std::string& bytes) {
  std::string out = "'";
  for (unsigned char c : bytes) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\'')
      out += "\\'";
    else if (c == '\\')
      out += "\\\\";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

int tokenize_command(const TokenizeOptions& o) {
  std::unique_ptr<Tokenizer> tok =
      load_tokenizer_for_model(o.model.empty() ? default_model_path() : o.model, o.tokenizer);
  std::string text = o.text;
  if (!o.file.empty()) {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) throw Error(o.file + ": cannot read");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> ids =
      tok->encode_with_special(text, !o.no_bos && tok->add_bos_default(), o.special);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (o.ids_only) {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line += ' ';
      line += std::to_string(ids[i]);
    }
    std::printf("%s\n", line.c_str());
  } else {
    for (int32_t id : ids) {
      // The text a token stands for; control tokens (no text) show their vocabulary entry.
      std::string bytes = tok->token_bytes(id);
      std::printf("%8d -> %s\n", id, quoted(bytes.empty() ? tok->piece(id) : bytes).c_str());
    }
  }
  if (o.stats) {
    std::fprintf(stderr, "[ember] %zu bytes -> %zu tokens in %.3f s (%.2f MB/s)\n", text.size(),
                 ids.size(), seconds, seconds > 0 ? text.size() / seconds / 1e6 : 0.0);
  }
  return 0;
}

}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids (and pieces) of a text");
  cmd->add_option("-m,--model", o->model,
                  "Model whose tokenizer to use (default: the stories260K fixture)");
  cmd->add_option("--tokenizer", o->tokenizer, "Tokenizer file overriding the model's");
  CLI::Option* text = cmd->add_option("-p,--prompt", o->text, "Text to tokenize");
  cmd->add_option("-f,--file", o->file, "Read the text from a file")->excludes(text);
  cmd->add_flag("--ids", o->ids_only, "Only the ids, space-separated on one line");
  cmd->add_flag("--no-bos", o->no_bos, "Do not prepend BOS");
  cmd->add_flag("--special", o->special,
                "Parse control tokens written in the text (e.g. <|im_start|>)");
  cmd->add_flag("--stats", o->stats, "Print byte/token counts and encoding speed on stderr");
  return [o] { return tokenize_command(*o); };
}

}  // namespace ember::cli
