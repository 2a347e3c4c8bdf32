// The same random model written as an HF directory (bf16 safetensors) and as GGUF files (whose Q/K
// rows llama.cpp's converter permutes) must give the same logits: this checks the GGUF reader, the
// safetensors reader and the Q/K un-permutation against each other. Needs python3 + numpy (the
// fixture tool ../shared/tools/make_dummy_model.py writes the files).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "ember/model/model_loader.h"
#include "test_util.h"
#include "unit/backend/cpu/kernels_test_util.h"
#include "unit/engine/step_engine.h"

namespace ember {
namespace {

std::vector<float> all_logits(const std::string& path, const std::vector<int32_t>& ids,
                              int64_t* argmax_out) {
  LoadOptions o;
  o.path = path;
  o.load_tokenizer = false;
  LoadedModel m = load_model(o);
  EngineOptions eo;
  eo.max_context = 64;
  test::StepEngine engine(m.weights, eo);
  Sequence seq;
  auto z = engine.feed(seq, ids, true);
  std::vector<float> out(z.begin(), z.end());
  const int64_t V = m.weights.config.vocab_size;
  for (size_t t = 0; t < ids.size(); ++t) {
    argmax_out[t] = std::max_element(out.begin() + static_cast<int64_t>(t) * V,
                                     out.begin() + static_cast<int64_t>(t + 1) * V) -
                    (out.begin() + static_cast<int64_t>(t) * V);
  }
  return out;
}

TEST(FormatParity, HfSafetensorsAndGgufGiveTheSameLogits) {
  auto tool = test::fixture("tools/make_dummy_model.py");
  auto tokenizer = test::fixture("models/smollm2-135m-instruct/tokenizer.json");
  EMBER_REQUIRE_FIXTURE(tool);
  EMBER_REQUIRE_FIXTURE(tokenizer);
  // Debian's python3 has python3-numpy; a python3 earlier on PATH (pyenv, venv) may not.
  std::string python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  if (std::system((python + " -c 'import numpy' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "python3 with numpy is needed to write the dummy model (scripts/setup.sh "
                    "installs python3-numpy)";
  }
  auto dir = test::scratch_dir("parity");
  std::ofstream(dir / "config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 49152, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "max_position_embeddings": 256, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})";
  std::string base = python + " " + test::shell_quote(tool.string()) + " --config " +
                     test::shell_quote((dir / "config.json").string()) + " --tokenizer " +
                     test::shell_quote(tokenizer.string());
  ASSERT_EQ(
      std::system((base + " --hf-out " + test::shell_quote((dir / "hf").string()) + " --gguf-out " +
                   test::shell_quote((dir / "f32.gguf").string()) + " --gguf-dtype f32 >/dev/null")
                      .c_str()),
      0);
  ASSERT_EQ(std::system((base + " --gguf-out " + test::shell_quote((dir / "q8.gguf").string()) +
                         " --gguf-dtype q8_0 >/dev/null")
                            .c_str()),
            0);

  std::vector<int32_t> ids = {1,     504,  2365, 6354, 16438, 27003, 690,  260,
                              23790, 2767, 30,   504,  3575,  282,   4649, 314};
  std::vector<int64_t> hf_top(ids.size()), gguf_top(ids.size()), q8_top(ids.size());
  // Exact parity needs kernels that multiply bf16 weights by f32 activations: the AVX-512 and AMX
  // sets round the activations to bf16 (vdpbf16ps, tdpbf16ps), so they run the AVX2 set here and
  // are checked against a bound of their own below.
  const bool avx512 = cpu::active_isa() == cpu::Isa::Avx512 || cpu::active_isa() == cpu::Isa::Amx;
  std::vector<float> hf, f32, q8;
  {
    test::IsaScope scope(avx512 ? cpu::Isa::Avx2 : cpu::active_isa());
    hf = all_logits((dir / "hf").string(), ids, hf_top.data());
    f32 = all_logits((dir / "f32.gguf").string(), ids, gguf_top.data());
    q8 = all_logits((dir / "q8.gguf").string(), ids, q8_top.data());
  }
  ASSERT_EQ(hf.size(), f32.size());
  // bf16 weights hold the same values as the f32 GGUF: only summation order differs.
  double worst = 0, scale = 0;
  for (size_t i = 0; i < hf.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(hf[i] - f32[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(f32[i])));
  }
  EXPECT_LE(worst, 1e-4 * std::max(1.0, scale))
      << "max |hf - gguf| " << worst << " for max |logit| " << scale;
  EXPECT_EQ(hf_top, gguf_top);
  // q8_0 is lossy but close: logits within a few percent of their range.
  double q8_worst = 0;
  for (size_t i = 0; i < hf.size(); ++i)
    q8_worst = std::max(q8_worst, static_cast<double>(std::fabs(q8[i] - f32[i])));
  EXPECT_LE(q8_worst, 0.05 * std::max(1e-3, scale)) << q8_worst << " vs " << scale;
  if (avx512) {
    // bf16 activations: each product off by <= 2^-9 relative, logits well within 1% of their range
    // (measured: 0.2%), the same greedy tokens.
    std::vector<int64_t> avx512_top(ids.size());
    auto hf512 = all_logits((dir / "hf").string(), ids, avx512_top.data());
    double worst512 = 0;
    for (size_t i = 0; i < hf512.size(); ++i)
      worst512 = std::max(worst512, static_cast<double>(std::fabs(hf512[i] - f32[i])));
    EXPECT_LE(worst512, 0.01 * std::max(1.0, scale)) << worst512 << " vs " << scale;
    EXPECT_GT(worst512, worst);  // the AVX-512 bf16 kernels did run
    EXPECT_EQ(avx512_top, gguf_top);
  }
}

}  // namespace
}  // namespace ember
