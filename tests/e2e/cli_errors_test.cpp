// Bad input never crashes the CLI: one clear error line naming the file, exit code != 0.
#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"

namespace ember {
namespace {

void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

std::string read_prefix(const std::filesystem::path& p, size_t n) {
  std::ifstream in(p, std::ios::binary);
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

void expect_clean_failure(const std::string& args, const std::string& must_mention) {
  auto r = test::run_ember(args);
  EXPECT_NE(r.exit_code, 0) << args;
  EXPECT_LT(r.exit_code, 128) << "killed by a signal: " << args << "\n" << r.err;
  EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(must_mention), std::string::npos)
      << "stderr should mention '" << must_mention << "':\n"
      << r.err;
  EXPECT_EQ(r.err.find("AddressSanitizer"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("runtime error"), std::string::npos) << r.err;
}

TEST(CliErrors, NonExistentPath) {
  expect_clean_failure("run -m /nonexistent/model.gguf -n 1", "/nonexistent/model.gguf");
  expect_clean_failure("inspect /nonexistent/dir", "/nonexistent/dir");
  expect_clean_failure("score -m /nonexistent/x.bin --ids 1,2", "/nonexistent/x.bin");
}

TEST(CliErrors, TruncatedGgufAndBin) {
  auto gguf = test::fixture("models/stories260K/stories260K.gguf");
  auto bin = test::fixture("models/stories260K/stories260K.bin");
  EMBER_REQUIRE_FIXTURE(gguf);
  EMBER_REQUIRE_FIXTURE(bin);
  auto dir = test::scratch_dir("cli-truncated");
  for (size_t n : {size_t{0}, size_t{3}, size_t{20}, size_t{200}, size_t{5000}, size_t{600000}}) {
    auto p = dir / ("cut" + std::to_string(n) + ".gguf");
    write_bytes(p, read_prefix(gguf, n));
    expect_clean_failure("run -m " + test::shell_quote(p.string()) + " -n 4", p.string());
    expect_clean_failure("inspect " + test::shell_quote(p.string()), p.string());
  }
  for (size_t n : {size_t{10}, size_t{28}, size_t{4000}, size_t{900000}}) {
    auto p = dir / ("cut" + std::to_string(n) + ".bin");
    write_bytes(p, read_prefix(bin, n));
    expect_clean_failure("score -m " + test::shell_quote(p.string()) + " --ids 1,2", p.string());
  }
}

TEST(CliErrors, BadGgufHeaderFields) {
  auto dir = test::scratch_dir("cli-badgguf");
  auto magic = dir / "magic.gguf";
  write_bytes(magic, std::string("GGUX\x03\0\0\0", 8) + std::string(64, '\0'));
  expect_clean_failure("inspect " + test::shell_quote(magic.string()), "magic");
  auto version = dir / "version.gguf";
  write_bytes(version, std::string("GGUF\x07\0\0\0", 8) + std::string(64, '\0'));
  expect_clean_failure("inspect " + test::shell_quote(version.string()), "version");
  auto count = dir / "count.gguf";
  // v3, tensor_count = 2^40, kv_count = 0.
  write_bytes(count, std::string("GGUF\x03\0\0\0", 8) + std::string("\0\0\0\0\0\x01\0\0", 8) +
                         std::string(8, '\0'));
  expect_clean_failure("inspect " + test::shell_quote(count.string()), count.string());
}

TEST(CliErrors, ConfigMissingFieldAndUnknownDtype) {
  auto dir = test::scratch_dir("cli-config");
  std::ofstream(dir / "config.json") << R"({"hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "vocab_size": 100})";
  expect_clean_failure("inspect " + test::shell_quote(dir.string()) + " --dummy",
                       "num_hidden_layers");
  expect_clean_failure("run -m " + test::shell_quote(dir.string()) + " --dummy",
                       "num_hidden_layers");
  auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  expect_clean_failure("run -m " + test::shell_quote(model.string()) + " --dtype q9_k", "q9_k");
}

TEST(CliErrors, SafetensorsOffsetsPastTheEnd) {
  auto dir = test::scratch_dir("cli-safetensors");
  std::ofstream(dir / "config.json") << R"({"hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100})";
  std::string header =
      R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[100,64],"data_offsets":[0,25600]}})";
  std::string bytes(8, '\0');
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  write_bytes(dir / "model.safetensors", bytes + header + std::string(100, '\0'));
  expect_clean_failure("run -m " + test::shell_quote(dir.string()) + " -n 1", "model.safetensors");
}

}  // namespace
}  // namespace ember
