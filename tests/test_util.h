// Shared helpers for tests: where the fixtures are, where to write scratch files, running the CLI.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace ember::test {

// ../shared beside the repo, or $EMBER_FIXTURES.
inline std::filesystem::path fixtures_dir() {
  if (const char* env = std::getenv("EMBER_FIXTURES"); env != nullptr && *env != '\0') return env;
  return EMBER_DEFAULT_FIXTURES;
}

inline std::filesystem::path fixture(const std::string& relative) {
  return fixtures_dir() / relative;
}

// The source tree the tests were built from, or $EMBER_SOURCE_DIR (binaries run on another
// machine: scripts/cuda_device_check.sh points it at the repository there).
inline std::filesystem::path source_dir() {
  if (const char* env = std::getenv("EMBER_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
  return EMBER_SOURCE_DIR;
}

// A whole file's bytes ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Skips the calling test with a clear message when a fixture is absent (never a silent pass).
#define EMBER_REQUIRE_FIXTURE(path)                                             \
  do {                                                                          \
    if (!std::filesystem::exists(path))                                         \
      GTEST_SKIP() << "fixture not found: " << (path)                           \
                   << " (set EMBER_FIXTURES to the shared fixtures directory)"; \
  } while (0)

// A fresh scratch directory for one test, under the system temp dir. It is removed when the test
// process exits (ctest runs one test per process), unless EMBER_KEEP_SCRATCH is set to look at it.
std::filesystem::path scratch_dir(const std::string& name);

// A file of raw little-endian float32 values (the fixtures' *.f64ref.f32 / *.logits.f32).
std::vector<float> read_f32_file(const std::filesystem::path& path);
// A file of comma-separated token ids (the zoos' *.ids).
std::vector<int32_t> read_ids_file(const std::filesystem::path& path);
// n floats drawn uniformly from [lo, hi) by a generator seeded with `seed`.
inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// max over positions of max_i |a - b| / max_i |exact| for [positions, V] logits: how far two runs
// are apart, relative to each position's largest exact logit (the zoos' tolerance).
double worst_relative_logit_error(const std::vector<float>& a, const std::vector<float>& b,
                                  const std::vector<float>& exact, int64_t V);

// The backends that backend-parametrized tests run on: cpu and reference, plus cuda in builds with
// it (-DEMBER_CUDA=ON). Use with EMBER_REQUIRE_BACKEND: a cuda instance on a machine without a GPU
// skips, naming why.
inline std::vector<std::string> backends_under_test() {
#ifdef EMBER_CUDA
  return {"cpu", "reference", "cuda"};
#else
  return {"cpu", "reference"};
#endif
}

// Whether backend `name` can be made here; `why` gets the reason when not.
bool backend_available(const std::string& name, std::string* why);

#define EMBER_REQUIRE_BACKEND(name)                                                     \
  do {                                                                                  \
    std::string ember_why_;                                                             \
    if (!::ember::test::backend_available(name, &ember_why_))                           \
      GTEST_SKIP() << "backend " << (name) << " is not available here: " << ember_why_; \
  } while (0)

// The ember binary the e2e tests run: the one this build made, or $EMBER_BINARY (binaries copied to
// another machine, such as a GPU one, whose build path does not exist there).
inline std::string ember_binary() {
  if (const char* env = std::getenv("EMBER_BINARY"); env != nullptr && *env != '\0') return env;
  return EMBER_BINARY;
}

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `args` (already shell-quoted) through the ember binary, capturing stdout and stderr.
CommandResult run_ember(const std::string& args);

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

}  // namespace ember::test
