// Shared by the fuzz harnesses: the loaders under test open paths (they map files), so an input
// is handed to them as an anonymous in-memory file (memfd) reached through /proc/self/fd. And the
// rule every harness checks: bad input may throw ember::Error (a clear message), never anything
// else — a std::exception of another type escaping a loader is a bug the harness reports by
// aborting, as a crash would be.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "ember/core/error.h"

namespace ember::fuzz {

// An in-memory file holding `size` bytes of `data`, closed when the object goes.
class InputFile {
 public:
  InputFile(const uint8_t* data, size_t size) : fd_(memfd_create("ember-fuzz", 0)) {
    if (fd_ < 0) std::abort();
    for (size_t done = 0; done < size;) {
      const ssize_t n = write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }
  ~InputFile() { close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// Runs `body`; ember::Error is the expected refusal of bad input. Any other exception aborts with
// its message (libFuzzer then saves the input as a crash).
template <typename Body>
void expect_clean_refusal(Body&& body) {
  try {
    body();
  } catch (const ember::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an exception other than ember::Error escaped: %s\n", e.what());
    std::abort();
  }
}

}  // namespace ember::fuzz
