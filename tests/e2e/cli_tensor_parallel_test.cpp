// `mpirun -np N ember run|score ... --tp N` (or --pp N) on one machine (OpenMPI's shared-memory
// transport): logits within 1e-5 of one process's (the all-reduce adds the heads' partial sums in
// another order) and the same greedy text, for stories260K at tp 2, tp 4, pp 2 and tp 2 x pp 2 and
// the SmolLM2 shape (4 of its layers, f32) at tp 3 and pp 2; and the mistakes a user makes are one
// error that ends every rank. Skips without MPI (a build without it, no mpirun) and under
// AddressSanitizer (LeakSanitizer reports OpenMPI's own allocations at MPI_Init).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "e2e/server_test_util.h"
#include "ember/parallel/communicator.h"
#include "test_util.h"
#include "unit/model/family_checkpoint.h"

namespace ember {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAsan = true;
#else
constexpr bool kUnderAsan = false;
#endif

// Why these tests cannot run here, or "".
std::string why_no_mpi() {
  if (kUnderAsan) return "AddressSanitizer build (LeakSanitizer flags OpenMPI's own allocations)";
  if (!parallel::built_with_mpi()) return "this ember was built without MPI";
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) return "mpirun is not installed";
  return "";
}

#define EMBER_REQUIRE_MPI()                              \
  do {                                                   \
    if (std::string why = why_no_mpi(); !why.empty()) {  \
      GTEST_SKIP() << why                                \
                   << " (scripts/setup.sh installs "     \
                      "libopenmpi-dev and openmpi-bin)"; \
    }                                                    \
  } while (0)

// `mpirun -np n ember ARGS` (ARGS already quoted), stdout and stderr captured; stdin from the
// file `input` (mpirun hands it to rank 0), else none.
test::CommandResult mpirun_ember(int n, const std::string& args, const std::string& input = "") {
  const auto dir = test::scratch_dir("mpirun");
  const auto out = dir / "out", err = dir / "err";
  const std::string cmd = "timeout 120 mpirun --allow-run-as-root --oversubscribe -np " +
                          std::to_string(n) + " " + test::shell_quote(test::ember_binary()) + " " +
                          args + " >" + test::shell_quote(out.string()) + " 2>" +
                          test::shell_quote(err.string()) + " <" +
                          test::shell_quote(input.empty() ? "/dev/null" : input);
  test::CommandResult r;
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// Rank 0's count at exit of the steps launched under --pp while an earlier one was in flight;
// -1 when the line is missing.
int64_t steps_launched_in_flight(const std::string& err) {
  const std::string tail = " steps launched while an earlier one was in flight";
  const size_t end = err.find(tail);
  if (end == std::string::npos) return -1;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(err[begin - 1]))) --begin;
  return std::stoll(err.substr(begin, end - begin));
}

// Greedy text and prompt logits of `model` in one process, then split over each of `tps`.
// A split: its flags ("--tp 2", "--tp 2 --pp 2") and the processes it takes.
struct Split {
  std::string flags;
  int ranks;
};

void expect_split_runs_match(
    const std::string& model, const std::string& extra, int64_t vocab,
    const std::vector<Split>& splits,
    const std::string& prompt = "Once upon a time, there was a little girl named Lily.",
    int micro_batches = 0) {
  const auto dir = test::scratch_dir("tp-logits");
  const std::string base = "-m " + test::shell_quote(model) + extra + " -t 1";
  auto one =
      test::run_ember("run " + base + " -p " + test::shell_quote(prompt) + " -n 24 --temp 0");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto single_logits = dir / "single.f32";
  auto scored = test::run_ember("score " + base + " -q -p " + test::shell_quote(prompt) +
                                " --logits-out " + test::shell_quote(single_logits.string()));
  ASSERT_EQ(scored.exit_code, 0) << scored.err;
  const std::vector<float> single = test::read_f32_file(single_logits);
  ASSERT_FALSE(single.empty());
  for (size_t i = 0; i < splits.size(); ++i) {
    const auto& [flags, ranks] = splits[i];
    SCOPED_TRACE(flags);
    const std::string split = base + " " + flags;
    auto run = mpirun_ember(
        ranks, "run " + split + " -p " + test::shell_quote(prompt) + " -n 24 --temp 0");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.out, one.out) << "only rank 0 prints, and it prints the same text";
    if (micro_batches > 0) {
      // A 24-token run is one prefill and 23 decode steps; only the prefill is cut.
      EXPECT_NE(run.err.find("24 steps handed on as " + std::to_string(23 + micro_batches) +
                             " micro-batches"),
                std::string::npos)
          << run.err;
    }
    const auto split_logits = dir / ("split" + std::to_string(i) + ".f32");
    auto s = mpirun_ember(ranks, "score " + split + " -q -p " + test::shell_quote(prompt) +
                                     " --logits-out " + test::shell_quote(split_logits.string()));
    ASSERT_EQ(s.exit_code, 0) << s.err;
    const std::vector<float> logits = test::read_f32_file(split_logits);
    ASSERT_EQ(logits.size(), single.size());
    EXPECT_LE(test::worst_relative_logit_error(logits, single, single, vocab), 1e-5);
  }
}

TEST(CliTensorParallel, Stories260KSplitByHeadsAndByLayersMatchesOneProcess) {
  EMBER_REQUIRE_MPI();
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  expect_split_runs_match(model.string(), "", 512,
                          {{"--tp 2", 2}, {"--tp 4", 4}, {"--pp 2", 2}, {"--tp 2 --pp 2", 4}});
  // A prompt of ~110 tokens: under --pp its prefill runs as micro-batches (2, then 5), each stage
  // on one while the next stage runs the one before; the logits of every prompt token (score)
  // come back in their places.
  std::string story;
  for (int i = 0; i < 8; ++i) story += "Once upon a time, there was a little girl named Lily. ";
  expect_split_runs_match(
      model.string(), "", 512,
      {{"--pp 2 --pp-micro-batches 2", 2}, {"--tp 2 --pp 2 --pp-micro-batches 2", 4}}, story, 2);
  expect_split_runs_match(model.string(), "", 512, {{"--pp 2 --pp-micro-batches 5", 2}}, story, 5);
}

// Mixtures (moe-zoo: Mixtral with 8 experts of 128 rows, Qwen2-MoE with a shared expert of 256
// and QKV biases) split by heads and expert rows (each rank runs its rows of every expert the
// router picks, the router whole on every rank), and GPT-2's layout (family-zoo: fused QKV,
// biases everywhere, learned positions, LayerNorm) by heads.
TEST(CliTensorParallel, MixturesAndGpt2SplitByHeadsMatchOneProcess) {
  EMBER_REQUIRE_MPI();
  for (const char* name : {"moe-zoo/mixtral.gguf", "moe-zoo/qwen2moe.gguf"}) {
    SCOPED_TRACE(name);
    const auto model = test::fixture(std::string("models/") + name);
    EMBER_REQUIRE_FIXTURE(model);
    expect_split_runs_match(model.string(), "", 512, {{"--tp 2", 2}, {"--tp 2 --pp 2", 4}});
  }
  const auto gpt2 = test::fixture("models/family-zoo/gpt2.gguf");
  EMBER_REQUIRE_FIXTURE(gpt2);
  expect_split_runs_match(gpt2.string(), "", 50257, {{"--tp 2", 2}});
  // GPT-2's HF checkpoint (families.py's case: 2 heads, vocabulary of the 256 bytes, 64
  // positions) stores Conv1D weights [in, out]: its rows are cut as the file's columns.
  const auto hf = test::write_family_checkpoint(test::read_family_case("gpt2"));
  expect_split_runs_match(hf.string(), "", 256, {{"--tp 2", 2}}, "Once upon a time");
}

// OLMoE's Q/K RMSNorms span the whole projection, every head: each rank holds some heads, so the
// per-token sums of squares are all-reduced before each rank scales its part (a rank that normed
// only its own heads moves the logits by percents). 4 heads: 2 per rank at tp 2, 1 at tp 4.
// The HF case (families.py: 4 heads over 2 KV heads) at tp 4 gives each KV head to two ranks
// (kv_head_copies 2): the all-reduced K sums count every KV head twice and are halved.
TEST(CliTensorParallel, OlmoeWholeProjectionNormsSplitByHeadsMatchOneProcess) {
  EMBER_REQUIRE_MPI();
  const auto olmoe = test::fixture("models/moe-zoo/olmoe.gguf");
  EMBER_REQUIRE_FIXTURE(olmoe);
  expect_split_runs_match(olmoe.string(), "", 512, {{"--tp 2", 2}, {"--tp 4", 4}});
  const auto hf = test::write_family_checkpoint(test::read_family_case("olmoe"));
  expect_split_runs_match(hf.string(), "", 256, {{"--tp 4", 4}}, "Once upon a time");
}

// SmolLM2-135M's shape (d_model 576, 9 heads over 3 KV heads, d_ffn 1536, vocab 49,152) cut to
// 4 layers, written by the fixture tool, loaded as f32: three ranks of 3 heads, 1 KV head, 512
// FFN rows each.
TEST(CliTensorParallel, SmolLM2ShapeSplitByHeadsAndByLayersMatchesOneProcess) {
  EMBER_REQUIRE_MPI();
  const auto tool = test::fixture("tools/make_dummy_model.py");
  const auto tokenizer = test::fixture("models/smollm2-135m-instruct/tokenizer.json");
  EMBER_REQUIRE_FIXTURE(tool);
  EMBER_REQUIRE_FIXTURE(tokenizer);
  const std::string python =
      std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  if (std::system((python + " -c 'import numpy' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "python3 with numpy is needed to write the dummy model";
  }
  const auto dir = test::scratch_dir("tp-smollm2");
  std::ofstream(dir / "config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 4,
    "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
    "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "max_position_embeddings": 2048,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16"})";
  const auto gguf = dir / "smol.gguf";
  ASSERT_EQ(std::system((python + " " + test::shell_quote(tool.string()) + " --config " +
                         test::shell_quote((dir / "config.json").string()) + " --tokenizer " +
                         test::shell_quote(tokenizer.string()) + " --gguf-out " +
                         test::shell_quote(gguf.string()) + " --gguf-dtype bf16 >/dev/null")
                            .c_str()),
            0);
  expect_split_runs_match(gguf.string(), " --dtype f32", 49152, {{"--tp 3", 3}, {"--pp 2", 2}});

  // A rank stopped (SIGSTOP) in the middle of a generation (once rank 0 has printed some tokens;
  // 1,900 tokens take longer than the rest): the others wait --rank-timeout 2 s in their next
  // collective, say so, and the job ends on every rank (the stopped one too). (A fixed delay after
  // the ranks start caught them still loading on a loaded machine.) The marker is unique to this
  // run, so a concurrent run of the same test cannot take its ranks for ours.
  const std::string marker = "stalled-rank-test-" + std::to_string(::getpid());
  const std::string script =
      "cd " + test::shell_quote(dir.string()) + " || exit 1; (timeout 60 mpirun " +
      "--allow-run-as-root --oversubscribe -np 3 " + test::shell_quote(test::ember_binary()) +
      " run -m " + test::shell_quote(gguf.string()) + " --dtype f32 -t 1 --tp 3 -c 2048 -n 1900" +
      " --temp 0.8 --rank-timeout 2 -p " + marker + " >stall.out 2>stall.err; echo $? >stall.rc; " +
      "date +%s%N >stall.end) & " +
      "for i in $(seq 1200); do ranks=$(for p in $(pgrep -x ember); do " + "grep -qa " + marker +
      " /proc/$p/cmdline 2>/dev/null && echo $p; done); " +
      "[ $(echo $ranks | wc -w) -eq 3 ] && [ $(wc -c <stall.out) -gt " +
      std::to_string(marker.size() + 40) + " ] && break; sleep 0.05; done; " +
      "date +%s%N >stall.stop; kill -STOP $(echo $ranks | awk '{print $NF}'); wait; " +
      "for p in $(pgrep -x ember); do grep -qa " + marker + " /proc/$p/cmdline 2>/dev/null && " +
      "echo left $p; done; true";
  std::string left;
  ASSERT_EQ(test::run_shell(script, &left), 0);
  EXPECT_EQ(left, "") << "ranks of the stalled job still running";
  auto slurp = [&](const char* name) {
    std::ifstream in(dir / name);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  EXPECT_NE(std::atoi(slurp("stall.rc").c_str()), 0);
  const double stalled_ms =
      (std::stod(slurp("stall.end")) - std::stod(slurp("stall.stop"))) / 1e6;  // ns -> ms
  EXPECT_LT(stalled_ms, 20000) << "the job ended within the timeout";
  // (Which wait it names depends on where the stop caught the others: the all-reduce, the
  // logits' gather.)
  EXPECT_NE(slurp("stall.err").find("the other ranks did not reach the "), std::string::npos)
      << slurp("stall.err");
  EXPECT_NE(slurp("stall.err").find(" within 2 s (one stopped, hung or died)"), std::string::npos)
      << slurp("stall.err");
}

TEST(CliTensorParallel, MistakesAreOneErrorOnEveryRank) {
  EMBER_REQUIRE_MPI();
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const std::string m = "run -m " + test::shell_quote(model.string()) + " -n 4 -t 1";
  // Not under mpirun.
  auto r = test::run_ember(m + " --tp 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("start it with mpirun -np 2"), std::string::npos) << r.err;
  // Heads that do not divide: every rank says so, and the job ends.
  r = mpirun_ember(3, m + " --tp 3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--tp 3 does not divide the 8 attention heads"), std::string::npos) << r.err;
  // A world of another size.
  r = mpirun_ember(2, m + " --tp 4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--tp 4 but mpirun started 2 processes"), std::string::npos) << r.err;
  r = mpirun_ember(2, m + " --pp 6");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--pp 6 but mpirun started 2 processes"), std::string::npos) << r.err;
  r = mpirun_ember(6, m + " --pp 6");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--pp 6 is more stages than the 5 layers"), std::string::npos) << r.err;
  // serve without mpirun: said at once.
  r = test::run_ember("serve -m " + test::shell_quote(model.string()) + " --tp 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("start it with mpirun -np 2"), std::string::npos) << r.err;
}

// chat --tp 2 and --pp 2: the terminal is rank 0's, which runs the chat and sends each step to
// rank 1 (as serve does). Three turns with a /reset between (the session's cache reused, then
// dropped) give one process's greedy replies, and rank 1 is stopped when the chat ends.
TEST(CliTensorParallel, ChatSplitRepliesAsOneProcess) {
  EMBER_REQUIRE_MPI();
  const auto model = test::fixture("models/stories260K/stories260K.gguf");
  EMBER_REQUIRE_FIXTURE(model);
  const auto input = test::scratch_dir("tp-chat") / "turns.txt";
  {
    std::ofstream turns(input);
    turns << "Hello there\nTell me a story\n/reset\nOnce upon a time\n/exit\n";
  }
  const std::string chat = "chat -m " + test::shell_quote(model.string()) + " -t 1 --temp 0 -n 16";
  std::string one;
  ASSERT_EQ(test::run_shell(test::shell_quote(test::ember_binary()) + " " + chat + " <" +
                                test::shell_quote(input.string()) + " 2>/dev/null",
                            &one),
            0)
      << one;
  ASSERT_EQ(std::count(one.begin(), one.end(), '\n'), 3) << "three replies: " << one;
  for (const char* flags : {"--tp 2", "--pp 2"}) {
    SCOPED_TRACE(flags);
    const auto r = mpirun_ember(2, chat + " " + flags, input.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, one) << "only rank 0 prints, and it prints the same replies";
    // Turn 2 reuses turn 1's cache; after /reset (which counts as turn 3) nothing is reused.
    EXPECT_NE(r.err.find("turn 2: 32 prompt tokens, 5 reused"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("turn 4: 5 prompt tokens, 0 reused"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("rank 1: rank 0 stopped the chat after"), std::string::npos) << r.err;
  }
}

// serve --tp 2 and --pp 2 under mpirun: rank 0 serves, schedules and samples, rank 1 runs the
// steps it sends. Four greedy completions at once (steps batch several sequences; a long prompt
// is prefilled in chunks of 16) and a streamed one give `ember run`'s one-process text; SIGTERM to
// mpirun drains rank 0, which then stops rank 1.
TEST(CliTensorParallel, ServeSplitAnswersAsOneProcess) {
  EMBER_REQUIRE_MPI();
  const std::string model = test::fixture("models/stories260K/stories260K.gguf").string();
  const std::vector<std::string> prompts = {
      "Once upon a time", "Lily and Tom went to the park.", "The cat",
      "One day, a little boy named Tim found a big red ball in the garden. He wanted to play"};
  std::vector<std::string> want;
  for (const std::string& p : prompts) want.push_back(test::ember_run_greedy(model, p, 24));
  for (const char* flags : {"--tp 2", "--pp 2"}) {
    SCOPED_TRACE(flags);
    test::ServerProcess server(
        "-m " + test::shell_quote(model) + " -t 1 --max-batched-tokens 16 " + flags,
        // --foreground: timeout passes a SIGTERM to mpirun alone (to its whole process group
        // as well otherwise, and a second SIGTERM makes mpirun kill the ranks at once).
        "timeout --foreground 120 mpirun --allow-run-as-root --oversubscribe -np 2");
    ASSERT_TRUE(server.ready()) << server.startup_error();
    std::vector<std::string> got(prompts.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i) {
      clients.emplace_back([&, i] {
        const auto r =
            test::post_json(server.port(), "/v1/completions",
                            {{"prompt", prompts[i]}, {"max_tokens", 24}, {"temperature", 0}});
        if (r.status == 200) got[i] = nlohmann::json::parse(r.body)["choices"][0]["text"];
      });
    }
    for (auto& c : clients) c.join();
    EXPECT_EQ(got, want);
    const auto streamed = test::post_json(
        server.port(), "/v1/completions",
        {{"prompt", prompts[0]}, {"max_tokens", 24}, {"temperature", 0}, {"stream", true}});
    std::string text;
    for (const std::string& e : test::sse_events(streamed.body)) {
      if (e != "[DONE]") text += nlohmann::json::parse(e)["choices"][0]["text"].get<std::string>();
    }
    EXPECT_EQ(text, want[0]);
    // mpirun forwards the signal; rank 0 drains and stops rank 1, both return 0 (mpirun itself
    // then exits 1, as it does after any forwarded SIGTERM).
    EXPECT_NE(server.stop(SIGTERM), -1) << server.log();
    EXPECT_NE(server.log().find("server stopped"), std::string::npos) << server.log();
    EXPECT_NE(server.log().find("rank 1: rank 0 stopped serving after"), std::string::npos)
        << server.log();
    // Under --pp the four sequences ran as two batches in flight, each stage on one while the
    // other stage ran the other.
    if (std::string(flags) == "--pp 2") {
      EXPECT_GT(steps_launched_in_flight(server.log()), 0) << server.log();
    }
  }
}

// Batches in flight when every rank runs the engine (bench): the ranks launch and collect the
// same steps in the same order and sample the same tokens from the logits the last stage hands
// them, over 2 and 3 stages and 2 stages of 2 tensor ranks; --pp-in-flight 1 runs each step
// through every stage in turn.
TEST(CliTensorParallel, BatchesInFlightAcrossStages) {
  EMBER_REQUIRE_MPI();
  const std::string m =
      "bench -m " +
      test::shell_quote(test::fixture("models/stories260K/stories260K.gguf").string()) +
      " -t 1 --batch 6 -p 16 -n 12 -r 1";
  for (const auto& [flags, ranks] :
       std::vector<Split>{{"--pp 2", 2}, {"--pp 3", 3}, {"--tp 2 --pp 2", 4}}) {
    SCOPED_TRACE(flags);
    const auto r = mpirun_ember(ranks, m + " " + flags);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("| tg12     |     6 |"), std::string::npos) << r.out;
    EXPECT_GT(steps_launched_in_flight(r.err), 0) << r.err;
  }
  const auto r = mpirun_ember(2, m + " --pp 2 --pp-in-flight 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(steps_launched_in_flight(r.err), 0) << r.err;
}

// What rank 1 cannot mirror is refused by name, on every rank, before anything is served.
TEST(CliTensorParallel, ServeRefusesWhatRanksCannotMirror) {
  EMBER_REQUIRE_MPI();
  const std::string m =
      "serve -m " +
      test::shell_quote(test::fixture("models/stories260K/stories260K.gguf").string());
  auto r = mpirun_ember(2, m + " --tp 2 --allow-trace");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("serve --tp with --allow-trace"), std::string::npos) << r.err;
  r = mpirun_ember(2, m + " --pp 2 --kv-offload-ram 1GiB");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("serve --pp with --kv-offload-*"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ember
