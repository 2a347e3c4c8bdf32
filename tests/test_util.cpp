#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/core/error.h"

namespace ember::test {

bool backend_available(const std::string& name, std::string* why) {
  try {
    BackendOptions o;
    o.name = name;
    make_backend(o);
    return true;
  } catch (const Error& e) {
    if (why != nullptr) *why = e.what();
    return false;
  }
}

static std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// Directories scratch_dir made in this process, and the pid that made them: a forked child that
// exits must not delete its parent's files.
struct ScratchRegistry {
  pid_t owner = ::getpid();
  std::vector<std::filesystem::path> dirs;
};

ScratchRegistry& scratch_registry() {
  static ScratchRegistry registry;
  return registry;
}

void remove_scratch_dirs() {
  auto& registry = scratch_registry();
  if (registry.owner != ::getpid()) return;
  if (const char* keep = std::getenv("EMBER_KEEP_SCRATCH"); keep != nullptr && *keep != '\0')
    return;
  for (const auto& dir : registry.dirs) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
}

}  // namespace

std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("ember-test-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto& registry = scratch_registry();
  if (registry.dirs.empty()) std::atexit(remove_scratch_dirs);
  registry.dirs.push_back(dir);
  return dir;
}

CommandResult run_ember(const std::string& args) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path();
  std::string stem = "ember-run-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  auto out_path = dir / (stem + ".out");
  auto err_path = dir / (stem + ".err");
  std::string cmd = shell_quote(ember_binary()) + " " + args + " >" + shell_quote(out_path) +
                    " 2>" + shell_quote(err_path) + " </dev/null";
  int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_all(out_path);
  r.err = read_all(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return r;
}

std::vector<float> read_f32_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v;
  float f;
  while (in.read(reinterpret_cast<char*>(&f), sizeof f)) v.push_back(f);
  return v;
}

std::vector<int32_t> read_ids_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<int32_t> ids;
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

double worst_relative_logit_error(const std::vector<float>& a, const std::vector<float>& b,
                                  const std::vector<float>& exact, int64_t V) {
  double worst = 0;
  for (size_t p = 0; p * V < exact.size(); ++p) {
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < V; ++i) {
      const size_t k = p * V + i;
      scale = std::max(scale, std::fabs(static_cast<double>(exact[k])));
      diff = std::max(diff, std::fabs(static_cast<double>(a[k]) - b[k]));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace ember::test
