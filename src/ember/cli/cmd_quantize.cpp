// `ember quantize IN OUT.gguf --type PRESET`: any model ember reads (GGUF, HF directory, llama2.c
// .bin) written as a GGUF file with llama.cpp's per-tensor type mix for the preset. A one-line
// progress bar on stderr when it is a terminal; always one summary line at the end.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "ember/cli/commands.h"
#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/model/model_quantizer.h"
#include "ember/model/quant_presets.h"

namespace ember::cli {

namespace {

struct QuantizeCliOptions {
  std::string input;
  std::string output;
  std::string type;
  std::string tokenizer;
  int threads = 0;
};

constexpr double kMiB = 1024.0 * 1024.0;

// "[#########...........]  12/48  blk.1.attn_q.weight -> Q4_K   3.2 MiB"
void draw_progress(const QuantizeProgress& p) {
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * p.index / p.count);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r\033[K[%s] %zu/%zu  %s -> %s  %.1f MiB", bar.c_str(), p.index, p.count,
               p.name->c_str(), ggml_type_name(ggml_type_of(p.type)).c_str(),
               static_cast<double>(p.bytes_written) / kMiB);
  if (p.index == p.count) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

std::string type_mix(const QuantizeSummary& s) {
  std::string out;
  for (const auto& [type, count] : s.tensors_by_type) {
    out += (out.empty() ? "" : ", ") + type + " " + std::to_string(count);
  }
  return out;
}

int quantize_command(const QuantizeCliOptions& o) {
  const std::optional<QuantPreset> preset = quant_preset_from_name(o.type);
  if (!preset) {
    throw Error::invalid_request(
        "--type", "unknown --type '" + o.type + "' (expected one of " + quant_preset_names() + ")");
  }
  const bool tty = ::isatty(::fileno(stderr)) != 0;
  if (tty && *preset == QuantPreset::Q2_K_S) {
    std::fprintf(stderr,
                 "note: llama.cpp quantizes Q2_K_S only with an importance matrix; ember "
                 "quantizes without one\n");
  }
  QuantizeOptions q;
  q.input = o.input;
  q.output = o.output;
  q.preset = *preset;
  q.tokenizer_path = o.tokenizer;
  q.threads = o.threads;
  if (tty) q.on_tensor = draw_progress;
  const QuantizeSummary s = quantize_model(q);
  std::fprintf(stderr, "wrote %s (%s): %zu tensors [%s], %.2f MiB, %.2f bits per weight, %.1f s\n",
               s.output.c_str(), quant_preset_info(*preset).name, s.n_tensors, type_mix(s).c_str(),
               static_cast<double>(s.file_bytes) / kMiB, s.bits_per_weight(), s.seconds);
  return 0;
}

std::string presets_help() {
  std::string out = "Presets (--type), llama.cpp's per-tensor type mixes:\n";
  for (const QuantPresetInfo& info : quant_presets()) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-7s %s\n", info.name, info.summary);
    out += line;
  }
  return out;
}

}  // namespace

Command add_quantize_command(CLI::App& app) {
  auto o = std::make_shared<QuantizeCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Write a model (GGUF, HF directory or llama2.c .bin) as a GGUF file of a preset");
  cmd->add_option("input", o->input, "Model: .gguf, HF directory, or llama2.c .bin")->required();
  cmd->add_option("output", o->output, "GGUF file to write")->required();
  cmd->add_option("--type", o->type, "Preset: " + quant_preset_names())->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer (llama2.c tokenizer.bin, HF tokenizer.json) overriding the one beside "
                  "the model; a GGUF input keeps its own");
  cmd->add_option("-t,--threads", o->threads, "Threads (default: physical cores)");
  cmd->footer(presets_help());
  return [o] { return quantize_command(*o); };
}

}  // namespace ember::cli
