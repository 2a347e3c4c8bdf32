// Tensor parallelism's partial sums through the backend seam (Backend::all_reduce_sum): host
// backends hand host memory to the communicator (MPI); cuda adds device memory with NCCL, queued
// with its other launches and captured into its step graphs. On one GPU only one rank can run, so
// the cuda tests take NCCL's single-rank path: a sum over one rank must leave every bit as it was,
// through a whole model whose hooks are wired as --tp wires them.
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/model/model_loader.h"
#include "ember/parallel/communicator.h"
#include "ember/parallel/tensor_parallel.h"
#include "test_util.h"
#include "unit/engine/step_engine.h"

namespace ember {
namespace {

// One rank that counts what reaches it in host memory (and doubles it, so a test sees that the
// values went through it).
class CountingRank final : public parallel::Communicator {
 public:
  explicit CountingRank(float factor = 1.0f) : factor_(factor) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float* x, int64_t n) override {
    ++host_all_reduces;
    for (int64_t i = 0; i < n; ++i) x[i] *= factor_;
  }
  void all_gather(const void* mine, int64_t bytes, void* all) override {
    ++all_gathers;
    std::copy_n(static_cast<const char*>(mine), bytes, static_cast<char*>(all));
  }
  void send(const float*, int64_t, int) override {}
  void receive(float*, int64_t, int) override {}
  int64_t start_send(const void*, int64_t, int, int) override { return 0; }
  int64_t start_receive(void*, int64_t, int, int) override { return 0; }
  void finish_transfer(int64_t, const char*, bool) override {}
  bool transfer_done(int64_t) override { return true; }
  void broadcast(float*, int64_t, int) override {}
  void broadcast_bytes(void*, int64_t, int, bool) override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
  std::unique_ptr<Communicator> split(int, int) override {
    return std::make_unique<CountingRank>(factor_);
  }
  int host_all_reduces = 0, all_gathers = 0;

 private:
  float factor_;
};

std::vector<float> round_trip(const std::string& backend_name, parallel::Communicator& ranks,
                              const std::vector<float>& values) {
  BackendOptions bo;
  bo.name = backend_name;
  std::shared_ptr<Backend> backend = make_backend(bo);
  Activations x;
  const auto n = static_cast<int64_t>(values.size());
  backend->reserve(x, n);
  backend->from_host(x.data(), values.data(), n);
  backend->all_reduce_sum(x.data(), n, ranks);
  std::vector<float> staging;
  const std::span<const float> out = backend->to_host(x.data(), n, staging);
  return {out.begin(), out.end()};
}

TEST(DeviceAllReduce, HostBackendsHandHostMemoryToTheCommunicator) {
  for (const std::string name : {"cpu", "reference"}) {
    CountingRank doubling(2.0f);
    const std::vector<float> got = round_trip(name, doubling, {1.0f, -2.5f, 3.0f});
    EXPECT_EQ(got, (std::vector<float>{2.0f, -5.0f, 6.0f})) << name;
    EXPECT_EQ(doubling.host_all_reduces, 1) << name;
    EXPECT_EQ(doubling.stats().on_device, 0) << name;
  }
}

TEST(DeviceAllReduce, CudaSumsOverOneRankWithNcclKeepTheValues) {
  EMBER_REQUIRE_BACKEND("cuda");
  CountingRank ranks(2.0f);  // would double anything handed to it in host memory
  std::vector<float> values(5000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i) - 7.0f;
  EXPECT_EQ(round_trip("cuda", ranks, values), values);
  EXPECT_EQ(ranks.host_all_reduces, 0) << "the sum went through host memory, not NCCL";
  EXPECT_EQ(ranks.stats().on_device, 1);
}

// Logits of the prompt's last token, then of `decode` greedy steps of one token.
std::vector<std::vector<float>> run_steps(const ModelWeights& weights, int decode) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 434, 267, 339, 365, 272, 30, 405};
  return test::greedy_step_logits(weights, prompt, decode, /*all_logits=*/false);
}

// stories260K with and without --tp's hooks on one rank: the same bits; the all-reduces (two per
// layer per step) reached the rank on the device (cuda) or in host memory (cpu).
void expect_one_rank_hooks_keep_the_logits(const std::string& backend_name) {
  const auto path = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(path);
  LoadOptions o;
  o.path = path.string();
  o.load_tokenizer = false;
  o.backend.name = backend_name;
  LoadedModel model = load_model(o);
  constexpr int kDecode = 5;  // cuda: a decode step's graph is captured, then replayed
  const auto plain = run_steps(model.weights, kDecode);
  CountingRank ranks;
  parallel::attach_tensor_sums(model.weights, ranks);
  const auto hooked = run_steps(model.weights, kDecode);
  ASSERT_EQ(plain.size(), hooked.size());
  for (size_t r = 0; r < plain.size(); ++r) EXPECT_EQ(plain[r], hooked[r]) << "step " << r;
  const int64_t expected = 2 * model.weights.config.n_layers * (kDecode + 1);
  const bool device = backend_name == "cuda";
  EXPECT_EQ(ranks.stats().on_device, device ? expected : 0);
  EXPECT_EQ(ranks.host_all_reduces, device ? 0 : expected);
  EXPECT_EQ(ranks.all_gathers, kDecode + 1);  // the logits' vocabulary parts, once a step
}

TEST(DeviceAllReduce, CpuTensorHooksOnOneRankKeepTheLogits) {
  expect_one_rank_hooks_keep_the_logits("cpu");
}

TEST(DeviceAllReduce, CudaTensorHooksOnOneRankKeepTheLogits) {
  EMBER_REQUIRE_BACKEND("cuda");
  expect_one_rank_hooks_keep_the_logits("cuda");
}

}  // namespace
}  // namespace ember
