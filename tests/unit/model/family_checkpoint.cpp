#include "unit/model/family_checkpoint.h"

#include <cstdint>
#include <fstream>
#include <vector>

#include "ember/tokenizer/byte_level.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"

namespace ember::test {

namespace {

// families.py's generator: FNV-1a of the name seeds splitmix64; element k is offset + scale * u_k,
// u_k = (next() >> 11) * 2^-52 - 1, rounded to float32 (multiply and add kept apart: no FMA).
std::vector<float> generate(const std::string& name, int64_t n, double offset, double scale) {
  uint64_t state = 1469598103934665603ull;
  for (unsigned char c : name) state = (state ^ c) * 1099511628211ull;
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& v : out) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0;
    double product = scale * u;
    asm volatile("" : "+x"(product));  // no contraction into an FMA
    v = static_cast<float>(offset + product);
  }
  return out;
}

}  // namespace

std::filesystem::path family_case_file(const std::string& name) {
  return test::source_dir() / "tests/reference/families" / (name + ".json");
}

nlohmann::json read_family_case(const std::string& name) {
  std::ifstream in(family_case_file(name));
  return nlohmann::json::parse(in);
}

std::filesystem::path write_family_checkpoint(const nlohmann::json& spec, const std::string& skip) {
  const auto dir = scratch_dir("family-" + spec["case"].get<std::string>() + skip);
  std::ofstream(dir / "config.json") << spec["config"].dump(2);
  SafetensorsWriter w;
  w.metadata("format", "pt");
  for (const auto& t : spec["tensors"]) {
    if (t["name"] == skip) continue;
    const auto shape = t["shape"].get<std::vector<int64_t>>();
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    w.tensor(
        t["name"], "F32", shape,
        f32_bytes(generate(t["name"], n, t["offset"].get<double>(), t["scale"].get<double>())));
  }
  write_bytes(dir / "model.safetensors", w.build());
  // A byte-level vocabulary of the 256 bytes (no merges): what `ember quantize` embeds in the GGUF.
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(byte_level::byte_to_utf8(b))] = b;
  nlohmann::json tokenizer = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", nlohmann::json::array()}};
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  return dir;
}

}  // namespace ember::test
