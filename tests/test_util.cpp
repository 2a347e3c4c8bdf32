#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace ember::test {

static std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

}  // namespace ember::test
