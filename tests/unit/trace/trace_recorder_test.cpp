// What a trace says, checked against the model it observed (stories260K, greedy): the logit lens
// of the last layer is the model's logits, attention rows sum to 1, equal a softmax recomputed
// here from the Q and K the attention op read, and rebuild the attention output from V; the KV
// bytes follow the formula; each matmul's FLOPs are 2 x rows x cols x tokens; and a traced run
// generates what an untraced one does.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "ember/engine/llm_engine.h"
#include "ember/model/model_loader.h"
#include "ember/trace/trace_report.h"
#include "ember/trace/trace_run.h"
#include "test_util.h"

namespace ember {
namespace {

// A recorder that also keeps what the model showed it: Q per layer [position][q_dim], the
// attention output per layer [position][q_dim], the last layer's lens rows of each step's last
// position and each step's logits.
class CapturingRecorder : public TraceRecorder {
 public:
  using TraceRecorder::TraceRecorder;

  void attention_inputs(int64_t layer, std::span<const float> q, std::span<const float> k,
                        std::span<const float> v, const AttentionScores& scores) override {
    auto& qs = q_[layer];
    qs.insert(qs.end(), q.begin(), q.end());
    auto& ks = k_[layer];
    ks.insert(ks.end(), k.begin(), k.end());
    scale_ = scores.scale;
    TraceRecorder::attention_inputs(layer, q, k, v, scores);
  }
  void attention_output(int64_t layer, std::span<const float> out) override {
    auto& o = out_[layer];
    o.insert(o.end(), out.begin(), out.end());
  }
  void logit_lens(int64_t layer, std::span<const float> logits) override {
    if (layer == config().n_layers - 1) {
      const size_t V = static_cast<size_t>(config().vocab_size);
      last_lens_.emplace_back(logits.end() - static_cast<std::ptrdiff_t>(V), logits.end());
    }
    TraceRecorder::logit_lens(layer, logits);
  }
  void end_step(std::span<const float> logits) override {
    step_logits_.emplace_back(logits.begin(), logits.end());
    TraceRecorder::end_step(logits);
  }

  std::map<int64_t, std::vector<float>> q_, k_, out_;
  std::vector<std::vector<float>> last_lens_, step_logits_;
  float scale_ = 0;
};

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto path = test::fixture("models/stories260K/stories260K.gguf");
    EMBER_REQUIRE_FIXTURE(path);
    LoadOptions o;
    o.path = path.string();
    model_ = std::make_unique<LoadedModel>(load_model(o));
  }

  LLMEngineOptions engine_options(DType kv = DType::F32) const {
    LLMEngineOptions eo;
    eo.engine.max_context = 128;
    eo.engine.kv_dtype = kv;
    eo.scheduler.max_batched_tokens = 128;
    return eo;
  }

  GenerationRequest request(int64_t n) const {
    GenerationRequest r;
    r.prompt = model_->tokenizer->encode("Once upon a time, there was a", true);
    r.max_tokens = n;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    return r;
  }

  std::unique_ptr<LoadedModel> model_;
};

TEST_F(TraceTest, LastLayerLensIsTheModelsLogitsAndRanksTheGreedyToken) {
  LLMEngine engine(model_->weights, model_->tokenizer.get(), engine_options());
  CapturingRecorder rec(model_->weights.config, TraceOptions{});
  const TracedRun run = run_traced(engine, request(6), rec);
  ASSERT_EQ(run.generated, 6);
  ASSERT_EQ(rec.step_logits_.size(), 6u);  // the prompt, then 5 decode steps
  ASSERT_EQ(rec.last_lens_.size(), rec.step_logits_.size());
  for (size_t s = 0; s < rec.step_logits_.size(); ++s) {
    const std::vector<float>& want = rec.step_logits_[s];
    ASSERT_EQ(want.size(), rec.last_lens_[s].size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, double{std::fabs(want[i] - rec.last_lens_[s][i])});
      scale = std::max(scale, double{std::fabs(want[i])});
    }
    EXPECT_LE(worst, 1e-5 * scale) << "step " << s;
  }
  // Greedy: every token the model generated is the last layer's top-1 where it was predicted.
  const int64_t L = model_->weights.config.n_layers, P = rec.n_prompt();
  ASSERT_EQ(static_cast<int64_t>(rec.tokens().size()), P + 6);
  const std::vector<LensCell>& last = rec.lens()[static_cast<size_t>(L)];
  for (int64_t p = P - 1; p < P + 5; ++p) {
    const LensCell& cell = last[static_cast<size_t>(p)];
    EXPECT_EQ(cell.next_token, rec.tokens()[static_cast<size_t>(p + 1)]) << p;
    EXPECT_EQ(cell.next_rank, 0) << p;
    EXPECT_EQ(cell.top[0].token, cell.next_token) << p;
  }
  // A prompt position ranks the prompt's next token; probabilities sum to at most 1.
  const LensCell& first = rec.lens()[0][1];
  EXPECT_EQ(first.next_token, rec.tokens()[2]);
  double top_sum = 0;
  for (const LensEntry& e : first.top) top_sum += e.p;
  EXPECT_LE(top_sum, 1.0 + 1e-6);
}

TEST_F(TraceTest, AttentionRowsAreTheSoftmaxOfQkAndRebuildTheOutput) {
  LLMEngine engine(model_->weights, model_->tokenizer.get(), engine_options());
  CapturingRecorder rec(model_->weights.config, TraceOptions{});
  run_traced(engine, request(4), rec);
  const ModelConfig& c = model_->weights.config;
  const int64_t hd = c.head_dim, kv_dim = c.n_kv_heads * hd, q_dim = c.n_heads * hd;
  int64_t rows_checked = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::vector<float>& v = rec.values(l);
    const std::vector<float>& q = rec.q_[l];
    const std::vector<float>& out = rec.out_[l];
    for (int64_t h = 0; h < c.n_heads; ++h) {
      const int64_t g = h / (c.n_heads / c.n_kv_heads);
      for (const AttentionRow& row :
           rec.attention()[static_cast<size_t>(l)][static_cast<size_t>(h)]) {
        ASSERT_EQ(row.bin_size, 1);
        ASSERT_EQ(row.first_key, 0);
        ASSERT_EQ(row.n_keys, row.position + 1);
        double sum = 0;
        for (float w : row.weights) sum += w;
        EXPECT_NEAR(sum, 1.0, 1e-5);
        // softmax(scale q . k) over the keys, from the Q and K the attention op read.
        const std::vector<float>& k = rec.k_[l];
        const float* qp = q.data() + row.position * q_dim + h * hd;
        std::vector<double> s(static_cast<size_t>(row.n_keys));
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < row.n_keys; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d)
            dot += double{qp[d]} * k[static_cast<size_t>(j * kv_dim + g * hd + d)];
          s[static_cast<size_t>(j)] = rec.scale_ * dot;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        for (double& x : s) z += (x = std::exp(x - mx));
        for (int64_t j = 0; j < row.n_keys; ++j) {
          EXPECT_NEAR(row.weights[static_cast<size_t>(j)], s[static_cast<size_t>(j)] / z, 1e-6);
        }
        // The output: sum_j w_j v_j for each of the head's values.
        for (int64_t d = 0; d < hd; ++d) {
          double o = 0, magnitude = 0;
          for (int64_t j = 0; j < row.n_keys; ++j) {
            const double vj = v[static_cast<size_t>(j * kv_dim + g * hd + d)];
            o += row.weights[static_cast<size_t>(j)] * vj;
            magnitude += std::fabs(row.weights[static_cast<size_t>(j)] * vj);
          }
          EXPECT_NEAR(out[static_cast<size_t>(row.position * q_dim + h * hd + d)], o,
                      1e-5 + 1e-4 * magnitude)
              << "layer " << l << " head " << h << " position " << row.position;
        }
        ++rows_checked;
      }
    }
  }
  EXPECT_GT(rows_checked, 0);
}

TEST_F(TraceTest, KvBytesFollowTheFormula) {
  const ModelConfig& c = model_->weights.config;
  for (DType kv : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(kv));
    LLMEngine engine(model_->weights, model_->tokenizer.get(), engine_options(kv));
    TraceRecorder rec(c, TraceOptions{});
    run_traced(engine, request(20), rec);
    const KvShape& shape = engine.runner().kv_shape();
    // L x 2 x n_kv x head_dim x bytes per value.
    const double bytes_per_value = kv == DType::F32 ? 4 : 2;
    EXPECT_DOUBLE_EQ(
        kv_formula_bytes_per_token(shape),
        static_cast<double>(c.n_layers * 2 * c.n_kv_heads * c.head_dim) * bytes_per_value);
    EXPECT_DOUBLE_EQ(kv_formula_bytes_per_token(shape),
                     static_cast<double>(shape.bytes_per_token()));
    ASSERT_FALSE(rec.steps().empty());
    for (const TraceStep& step : rec.steps()) {
      const int64_t tokens = step.first_position + step.n_tokens;
      EXPECT_EQ(step.kv_blocks_used, (tokens + shape.block_size - 1) / shape.block_size) << tokens;
      EXPECT_EQ(step.kv_bytes_held, step.kv_blocks_used * shape.bytes_per_block());
    }
    TraceContext context;
    context.kv = shape;
    const auto j = trace_json(rec, context);
    const auto& last = j["kv"]["steps"].back();
    EXPECT_DOUBLE_EQ(last["bytes_formula"].get<double>(),
                     kv_formula_bytes_per_token(shape) * last["tokens"].get<double>());
  }
}

TEST_F(TraceTest, MatmulFlopsAreTwoRowsColsTokens) {
  const ModelConfig& c = model_->weights.config;
  LLMEngine engine(model_->weights, model_->tokenizer.get(), engine_options());
  TraceRecorder rec(c, TraceOptions{});
  run_traced(engine, request(3), rec);
  TraceContext context;
  context.kv = engine.runner().kv_shape();
  const auto j = trace_json(rec, context);
  const auto& steps = j["roofline"]["steps"];
  ASSERT_EQ(steps.size(), 3u);
  const double L = static_cast<double>(c.n_layers), D = static_cast<double>(c.d_model);
  for (const auto& step : steps) {
    const double T = step["tokens"].get<double>();
    std::map<std::string, double> flops;
    std::map<std::string, int64_t> calls;
    for (const auto& op : step["ops"]) {
      flops[op["name"].get<std::string>()] = op["flops"].get<double>();
      calls[op["name"].get<std::string>()] = op["calls"].get<int64_t>();
    }
    EXPECT_DOUBLE_EQ(flops["wq+wk+wv"],
                     2 * T * static_cast<double>(c.q_dim() + 2 * c.kv_dim()) * D * L);
    EXPECT_DOUBLE_EQ(flops["wo"], 2 * T * D * static_cast<double>(c.q_dim()) * L);
    EXPECT_DOUBLE_EQ(flops["w_gate+w_up"], 2 * T * 2 * static_cast<double>(c.d_ffn) * D * L);
    EXPECT_DOUBLE_EQ(flops["w_down"], 2 * T * D * static_cast<double>(c.d_ffn) * L);
    EXPECT_DOUBLE_EQ(flops["lm_head"], 2 * 1 * static_cast<double>(c.vocab_size) * D);
    EXPECT_EQ(calls["wq+wk+wv"], c.n_layers);
    EXPECT_EQ(calls["attention"], c.n_layers);
    EXPECT_EQ(calls["sampling"], 1);  // the engine's, for the step's one sampled token
    EXPECT_GT(step["seconds"].get<double>(), 0);
  }
  EXPECT_EQ(steps[0]["phase"], "prefill");
  EXPECT_EQ(steps[1]["phase"], "decode");
}

TEST_F(TraceTest, TracedRunGeneratesWhatAnUntracedOneDoes) {
  LLMEngine plain(model_->weights, model_->tokenizer.get(), engine_options());
  std::string want;
  auto stream = plain.add_request(request(12));
  run_until_finished(plain, *stream, [&](StreamEvent& e) { want += e.text; });
  LLMEngine traced(model_->weights, model_->tokenizer.get(), engine_options());
  TraceRecorder rec(model_->weights.config, TraceOptions{});
  EXPECT_EQ(run_traced(traced, request(12), rec).text, want);
  // The residual statistics cover every layer and position that ran.
  const auto ran = rec.tokens().size() - 1;
  ASSERT_EQ(rec.residuals().size(), static_cast<size_t>(model_->weights.config.n_layers + 1));
  for (const ResidualStats& r : rec.residuals()) {
    ASSERT_EQ(r.residual_norm.size(), ran);
    for (float n : r.residual_norm) EXPECT_GT(n, 0.0f);
    for (float cos : r.cosine_to_previous) EXPECT_LE(std::fabs(cos), 1.0f + 1e-6f);
  }
}

TEST_F(TraceTest, LongRowsAreBinnedAndOnlySelectedPositionsKept) {
  TraceOptions options;
  options.max_rows = 4;
  options.max_keys = 8;
  options.logit_lens = false;
  LLMEngine engine(model_->weights, model_->tokenizer.get(), engine_options());
  TraceRecorder rec(model_->weights.config, options);
  GenerationRequest r = request(3);
  for (int i = 0; i < 40; ++i) r.prompt.push_back(r.prompt[static_cast<size_t>(1 + i % 6)]);
  const auto P = static_cast<int64_t>(r.prompt.size());
  run_traced(engine, r, rec);
  const auto& rows = rec.attention()[0][0];
  // The prompt's selected positions (at most max_rows, the last included) and the 2 decoded ones.
  EXPECT_LE(static_cast<int64_t>(rows.size()), options.max_rows + 2 + 1);
  EXPECT_EQ(rows.back().position, P + 1);
  for (const AttentionRow& row : rows) {
    EXPECT_LE(static_cast<int64_t>(row.weights.size()), options.max_keys);
    EXPECT_EQ(row.bin_size, (row.n_keys + options.max_keys - 1) / options.max_keys);
    double sum = 0;
    for (float w : row.weights) sum += w;
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  EXPECT_TRUE(rec.lens()[0].empty());
}

}  // namespace
}  // namespace ember
