#include <cstdlib>
#include <filesystem>

#include "ember/cli/commands.h"
#include "ember/core/error.h"

namespace ember::cli {

std::string default_model_path() {
  std::filesystem::path base = "../shared";
  if (const char* env = std::getenv("EMBER_FIXTURES"); env != nullptr && *env != '\0') base = env;
  return (base / "models/stories260K/stories260K.gguf").string();
}

void ModelOptions::add_to(CLI::App& app, bool model_is_positional) {
  if (model_is_positional) {
    app.add_option("model", model,
                   "Model: HF directory, config.json (with --dummy), .gguf, or llama2.c .bin")
        ->required();
  } else {
    app.add_option("-m,--model", model,
                   "Model: HF directory, config.json (with --dummy), .gguf, or llama2.c .bin "
                   "(default: the stories260K fixture in ../shared)");
  }
  app.add_option("--tokenizer", tokenizer,
                 "Tokenizer file (llama2.c tokenizer.bin) overriding the one beside the model");
  app.add_option(
      "--dtype", dtype,
      "Weight dtype for matrices: f32, f16, bf16, q8_0, q4_0 (default: as stored; --dummy: bf16)");
  app.add_flag("--dummy", dummy,
               "Seeded random weights from the config alone (no weight files read)");
  app.add_option("--dummy-seed", dummy_seed, "Seed of --dummy weights")->capture_default_str();
  app.add_option("--backend", backend,
                 "Backend that runs the model: cpu (SIMD kernels, threads) or reference (scalar, "
                 "one thread, double accumulation: the oracle, slow)")
      ->capture_default_str();
  app.add_flag("--no-interleave", no_interleave,
               "Keep q8_0/q4_0 blocks in the file's layout (zero-copy) instead of interleaving "
               "them 8 rows at a time for the decode kernels at load");
  app.add_flag("--no-mmap", no_mmap,
               "Copy matrices stored in the compute dtype out of the file into huge-page memory "
               "instead of reading them in place from the mapping (faster decode on float weights, "
               "slower load; the process then holds its own copy)");
}

void ModelOptions::add_kv_dtype_option(CLI::App& app) {
  app.add_option("--kv-dtype", kv_dtype,
                 "KV cache dtype: f32 (exact) or f16 (half the memory and attention traffic, as "
                 "llama.cpp's default cache)")
      ->capture_default_str();
}

DType ModelOptions::parsed_kv_dtype() const {
  if (kv_dtype == "f32") return DType::F32;
  if (kv_dtype == "f16") return DType::F16;
  throw Error("unknown --kv-dtype '" + kv_dtype + "' (expected f32 or f16)");
}

std::optional<DType> ModelOptions::parsed_dtype() const {
  if (dtype.empty()) return std::nullopt;
  auto d = dtype_from_name(dtype);
  if (!d) throw Error("unknown --dtype '" + dtype + "' (expected f32, f16, bf16, q8_0 or q4_0)");
  return d;
}

LoadOptions ModelOptions::load_options(bool need_tokenizer) const {
  LoadOptions o;
  o.path = model.empty() ? default_model_path() : model;
  o.tokenizer_path = tokenizer;
  o.dtype = parsed_dtype();
  o.dummy = dummy;
  o.dummy_seed = dummy_seed;
  o.backend.name = backend;
  o.backend.n_threads = threads;
  o.backend.interleave_quantized = !no_interleave;
  o.backend.copy_weights = no_mmap;
  o.load_tokenizer = need_tokenizer;
  return o;
}

}  // namespace ember::cli
