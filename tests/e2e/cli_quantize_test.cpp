// `ember quantize` through the binary: stories260K re-typed to Q8_0 / F16 generates what the
// original generates at that dtype; zoo-f32.gguf under every preset gets llama.cpp's per-tensor
// types (presets whose quantizer this build lacks are skipped, naming the type); the output is
// deterministic; inspect names the preset; errors are one line and leave no file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ember/formats/gguf.h"
#include "ember/model/model_quantizer.h"
#include "ember/model/quant_presets.h"
#include "test_util.h"
#include "unit/formats/format_writers.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using test::shell_quote;

std::string q(const fs::path& p) {
  return shell_quote(p.string());
}

int count_lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

TEST(CliQuantize, HelpListsEveryPreset) {
  const auto r = test::run_ember("quantize --help");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const QuantPresetInfo& info : quant_presets()) {
    EXPECT_NE(r.out.find(std::string("  ") + info.name + " "), std::string::npos) << info.name;
  }
}

// Greedy text of the re-typed file = greedy text of the original loaded with --dtype.
TEST(CliQuantize, Stories260KQ8_0AndF16GenerateAsLoadTimeConversion) {
  const fs::path model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const fs::path dir = test::scratch_dir("cli-quantize-stories");
  for (const std::string type : {"q8_0", "f16"}) {
    SCOPED_TRACE(type);
    const fs::path out = dir / ("stories-" + type + ".gguf");
    const auto made = test::run_ember("quantize " + q(model) + " " + q(out) + " --type " + type);
    ASSERT_EQ(made.exit_code, 0) << made.err;
    // Not a terminal: no progress bar, one summary line.
    EXPECT_EQ(made.err.find('\r'), std::string::npos);
    EXPECT_EQ(count_lines(made.err), 1) << made.err;
    EXPECT_NE(made.err.find("bits per weight"), std::string::npos) << made.err;
    EXPECT_TRUE(made.out.empty());

    const std::string gen = " --temp 0 -n 120 -p 'Once upon a time'";
    const auto ours = test::run_ember("run -m " + q(out) + gen);
    const auto theirs = test::run_ember("run -m " + q(model) + " --dtype " + type + gen);
    ASSERT_EQ(ours.exit_code, 0) << ours.err;
    ASSERT_EQ(theirs.exit_code, 0) << theirs.err;
    EXPECT_GT(ours.out.size(), 100u);
    EXPECT_EQ(ours.out, theirs.out);
  }
  // d_ffn 172 fits no 32-block: ffn_down stays f32 in the q8_0 file, as --dtype q8_0 keeps it.
  const GgufFile f((dir / "stories-q8_0.gguf").string());
  EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->dtype, DType::F32);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_up.weight")->dtype, DType::Q8_0);
  EXPECT_EQ(f.get_int("general.file_type"), 7);
}

TEST(CliQuantize, SameInputSameBytes) {
  const fs::path model = test::fixture("models/stories260K/stories260K.bin");
  EMBER_REQUIRE_FIXTURE(model);
  const fs::path dir = test::scratch_dir("cli-quantize-determinism");
  for (const char* name : {"a.gguf", "b.gguf"}) {
    const auto r = test::run_ember("quantize " + q(model) + " " + q(dir / name) + " --type Q8_0");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_TRUE(test::read_bytes(dir / "a.gguf") == test::read_bytes(dir / "b.gguf"));
}

// Each preset of zoo-f32.gguf: llama.cpp's type for every tensor (reference.json), and inspect
// recognises the preset and reports the file's bits per weight.
class CliQuantizeZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(CliQuantizeZoo, TypesMatchLlamaCpp) {
  const fs::path zoo = test::fixture("models/quant-zoo");
  EMBER_REQUIRE_FIXTURE(zoo / "reference.json");
  const QuantPreset preset = *quant_preset_from_name(GetParam());
  std::ifstream in(zoo / "reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  const nlohmann::json& info = ref["files"]["zoo-" + GetParam() + ".gguf"];
  // Skip while a type this preset needs has no quantizer in this build.
  for (const auto& [name, type] : info["types_by_tensor"].items()) {
    const std::optional<DType> d = dtype_from_name(type.get<std::string>());
    ASSERT_TRUE(d) << type;
    if (*d != DType::F32 && !can_quantize_to(*d)) {
      GTEST_SKIP() << "quantizing to " << dtype_name(*d) << " is not implemented yet (preset "
                   << quant_preset_info(preset).name << ")";
    }
  }
  const fs::path out = test::scratch_dir("cli-quantize-zoo-" + GetParam()) / "out.gguf";
  const auto r = test::run_ember("quantize " + q(zoo / "zoo-f32.gguf") + " " + q(out) + " --type " +
                                 GetParam());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const GgufFile f(out.string());
  ASSERT_EQ(f.tensors().size(), info["types_by_tensor"].size());
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_EQ(ggml_type_name(t.ggml_type), info["types_by_tensor"][t.name].get<std::string>())
        << t.name;
  }
  EXPECT_EQ(f.get_int("general.file_type"), quant_preset_info(preset).file_type);

  const auto shown = test::run_ember("inspect " + q(out) + " --json");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  const nlohmann::json j = nlohmann::json::parse(shown.out);
  EXPECT_EQ(j["quantization"]["preset"], quant_preset_info(preset).name);
  EXPECT_NEAR(j["quantization"]["bits_per_weight"].get<double>(),
              info["bits_per_weight"].get<double>(), 0.01);
}

INSTANTIATE_TEST_SUITE_P(EveryZooPreset, CliQuantizeZoo,
                         ::testing::Values("f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1",
                                           "q8_0", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s",
                                           "q4_k_m", "q5_k_s", "q5_k_m", "q6_k", "iq4_nl",
                                           "iq4_xs"));

// llama.cpp's own files: inspect names the preset they were made with.
TEST(CliQuantize, InspectNamesThePresetOfLlamaCppFiles) {
  const fs::path zoo = test::fixture("models/quant-zoo");
  EMBER_REQUIRE_FIXTURE(zoo / "zoo-q4_k_m.gguf");
  for (const std::string name : {"q4_k_m", "q3_k_s", "q5_k_m", "iq4_xs", "bf16"}) {
    const auto r = test::run_ember("inspect " + q(zoo / ("zoo-" + name + ".gguf")));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string upper = name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_NE(r.out.find("preset:   " + upper), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("bits per weight"), std::string::npos) << r.out;
  }
}

// One clear line on stderr, a nonzero exit, no output and no OUT.tmp.
void expect_clean_failure(const std::string& args, const fs::path& out, const std::string& what) {
  const auto r = test::run_ember("quantize " + args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out)) << out;
  EXPECT_FALSE(fs::exists(out.string() + ".tmp")) << out;
}

TEST(CliQuantize, ErrorsAreOneLineAndLeaveNoFile) {
  const fs::path model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const fs::path dir = test::scratch_dir("cli-quantize-errors");
  const fs::path out = dir / "out.gguf";
  expect_clean_failure(q(model) + " " + q(out) + " --type Q9_K", out, "unknown --type 'Q9_K'");
  expect_clean_failure(q(dir / "nope.gguf") + " " + q(out) + " --type Q8_0", out,
                       "no such file or directory");
  test::write_bytes(dir / "garbage.gguf", {'G', 'G', 'U', 'F', 3, 0});
  expect_clean_failure(q(dir / "garbage.gguf") + " " + q(out) + " --type Q8_0", out, "truncated");
  const fs::path missing = dir / "no-such-dir" / "out.gguf";
  expect_clean_failure(q(model) + " " + q(missing) + " --type Q8_0", missing, "does not exist");
  expect_clean_failure(q(model) + " " + q(model) + " --type Q8_0", out, "overwrite the input");
}

}  // namespace
}  // namespace ember
