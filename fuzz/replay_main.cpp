// The harnesses' main() where libFuzzer is not linked (GCC builds, EMBER_FUZZ off):
//   fuzz_<name> [--mutate-seconds S] [--seed N] FILE|DIR...
// runs LLVMFuzzerTestOneInput once on every file named (directories: every file in them), then,
// with --mutate-seconds, for S seconds on random mutations of those inputs (bit flips, byte
// changes, interesting integers, inserted / erased / duplicated ranges, truncation, splices of two
// inputs; seeded, so a run is reproducible). ctest runs each harness over its committed corpus
// this way (fuzz/corpus/<name>/), and the ASan/UBSan build adds a short mutation run:
// coverage-blind fuzzing in CI, next to the coverage-guided libFuzzer runs of scripts/fuzz.sh. A
// crash prints the file it came from, and for a mutation writes the input to fuzz-crash-<name>-<n>
// first.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

Bytes read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// One random edit of `b` (which may grow or shrink); `other` is another input for splices.
void mutate_once(Bytes& b, const Bytes& other, std::mt19937_64& rng) {
  auto below = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  static constexpr uint64_t kInteresting[] = {
      0,          1,          0x7f,       0x80,       0xff,       0x7fff, 0xffff,
      0x7fffffff, 0xffffffff, 1ull << 32, 1ull << 40, ~0ull >> 1, ~0ull};
  switch (rng() % 8) {
    case 0:  // flip a bit
      if (!b.empty()) b[below(b.size())] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    case 1:  // a random byte
      if (!b.empty()) b[below(b.size())] = static_cast<uint8_t>(rng());
      break;
    case 2: {  // an interesting little-endian integer of 1, 2, 4 or 8 bytes
      const size_t width = size_t{1} << (rng() % 4);
      if (b.size() < width) break;
      const size_t at = below(b.size() - width + 1);
      const uint64_t v = kInteresting[below(std::size(kInteresting))];
      std::memcpy(&b[at], &v, width);
      break;
    }
    case 3: {  // insert random bytes
      const size_t at = below(b.size() + 1), n = 1 + below(16);
      Bytes ins(n);
      for (auto& c : ins) c = static_cast<uint8_t>(rng());
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
      break;
    }
    case 4: {  // erase a range
      if (b.empty()) break;
      const size_t at = below(b.size()), n = 1 + below(std::min<size_t>(64, b.size() - at));
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
              b.begin() + static_cast<std::ptrdiff_t>(at + n));
      break;
    }
    case 5: {  // duplicate a range in place (repeated structure: nesting, array items)
      if (b.empty()) break;
      const size_t at = below(b.size()), n = 1 + below(std::min<size_t>(256, b.size() - at));
      const Bytes copy(b.begin() + static_cast<std::ptrdiff_t>(at),
                       b.begin() + static_cast<std::ptrdiff_t>(at + n));
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), copy.begin(), copy.end());
      break;
    }
    case 6:  // truncate
      b.resize(below(b.size() + 1));
      break;
    default: {  // splice: this input's head, the other's tail
      const size_t head = below(b.size() + 1), from = below(other.size() + 1);
      b.resize(head);
      b.insert(b.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
      break;
    }
  }
}

struct Options {
  double mutate_seconds = 0;
  uint64_t seed = 1;
  std::vector<std::filesystem::path> files;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--mutate-seconds" || arg == "--seed") && i + 1 < argc) {
      const std::string value = argv[++i];
      if (arg == "--seed") {
        o.seed = std::strtoull(value.c_str(), nullptr, 10);
      } else {
        o.mutate_seconds = std::strtod(value.c_str(), nullptr);
      }
      continue;
    }
    const std::filesystem::path path(arg);
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(path)) {
        if (entry.is_regular_file()) o.files.push_back(entry.path());
      }
    } else if (std::filesystem::is_regular_file(path)) {
      o.files.push_back(path);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", arg.c_str());
      return false;
    }
  }
  std::sort(o.files.begin(), o.files.end());  // a reproducible order for --seed
  return !o.files.empty();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: %s [--mutate-seconds S] [--seed N] FILE|DIR...\n", argv[0]);
    return 2;
  }
  std::vector<Bytes> inputs;
  for (const auto& path : o.files) {
    std::fprintf(stderr, "input %s\n", path.c_str());
    inputs.push_back(read_file(path));
    LLVMFuzzerTestOneInput(inputs.back().data(), inputs.back().size());
  }
  std::printf("%zu inputs ran without a crash\n", inputs.size());
  if (o.mutate_seconds <= 0) return 0;

  std::mt19937_64 rng(o.seed);
  const std::string name = std::filesystem::path(argv[0]).filename().string();
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(o.mutate_seconds));
  uint64_t runs = 0;
  while (std::chrono::steady_clock::now() < end) {
    Bytes b = inputs[rng() % inputs.size()];
    const Bytes& other = inputs[rng() % inputs.size()];
    for (int edits = 1 + static_cast<int>(rng() % 8); edits > 0; --edits)
      mutate_once(b, other, rng);
    if (b.size() > (1u << 20)) b.resize(1u << 20);
    // Kept on disk while it runs: if it crashes, this file is the reproducer.
    const std::string crash = "fuzz-crash-" + name + "-" + std::to_string(runs);
    std::ofstream(crash, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    LLVMFuzzerTestOneInput(b.data(), b.size());
    std::filesystem::remove(crash);
    ++runs;
  }
  std::printf("%llu mutated inputs (seed %llu, %.0f s) ran without a crash\n",
              static_cast<unsigned long long>(runs), static_cast<unsigned long long>(o.seed),
              o.mutate_seconds);
  return 0;
}
