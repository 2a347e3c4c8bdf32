// MappedFile: a read-only mapping whose pages can be released after load without losing data.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ember/core/error.h"
#include "ember/core/huge_pages.h"
#include "ember/core/mapped_file.h"
#include "test_util.h"

namespace ember {
namespace {

TEST(MappedFile, ReleasedPagesReadBackFromTheFile) {
  const auto path = test::scratch_dir("mapped-file") / "data.bin";
  std::vector<uint32_t> values(3 * 4096);  // 48 KiB: several whole pages
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint32_t>(i * 2654435761u);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(values.data()),
             static_cast<std::streamsize>(values.size() * sizeof(uint32_t)));
  MappedFile file(path.string());
  ASSERT_EQ(file.size(), values.size() * sizeof(uint32_t));
  const auto* mapped = reinterpret_cast<const uint32_t*>(file.data());
  uint64_t before = 0;
  for (size_t i = 0; i < values.size(); ++i) before += mapped[i];  // fault every page in
  // An unaligned range inside the mapping: released, and every value still reads the same.
  EXPECT_TRUE(file.release_pages(file.data() + 100, file.size() - 200));
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(mapped[i], values[i]) << i;
  uint64_t after = 0;
  for (size_t i = 0; i < values.size(); ++i) after += mapped[i];
  EXPECT_EQ(before, after);
  // Ranges not inside this mapping are refused (heap memory must never be dropped).
  EXPECT_FALSE(file.release_pages(values.data(), 64));
  EXPECT_FALSE(file.release_pages(file.data() + 8, file.size()));
}

// The VmFlags line /proc/self/smaps gives the mapping that starts at `start` ("" if none).
std::string vm_flags_of_mapping_at(const void* start) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0;
    char dash = 0;
    std::istringstream head(line);
    if (line.find('-') != std::string::npos && (head >> std::hex >> lo >> dash) && dash == '-') {
      inside = lo == reinterpret_cast<std::uintptr_t>(start);
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

// Decode reads the weights through this mapping; advised MADV_HUGEPAGE, the kernel reads the file
// ahead in 2 MiB folios where the file system allows and maps them with 2 MiB pages (smaps: "hg").
TEST(MappedFile, MappingIsAdvisedForHugePages) {
  if (transparent_huge_pages_mode() == "unavailable") GTEST_SKIP() << "kernel without THP";
  const auto path = test::scratch_dir("mapped-file-huge") / "data.bin";
  std::vector<char> bytes(4 * kHugePageBytes, 7);
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  MappedFile file(path.string());
  const std::string flags = vm_flags_of_mapping_at(file.data());
  ASSERT_FALSE(flags.empty()) << "no smaps entry starts at the mapping";
  EXPECT_NE((flags + " ").find(" hg "), std::string::npos) << flags;
  // What bench reports: never more than the mapping, in whole huge pages.
  const std::size_t huge = huge_page_backed_bytes(file.data(), file.size());
  EXPECT_LE(huge, file.size());
  EXPECT_EQ(huge % kHugePageBytes, 0u);
}

TEST(MappedFile, MissingFileNamesThePath) {
  const auto missing = (test::scratch_dir("mapped-missing") / "no-such-model.gguf").string();
  try {
    MappedFile f(missing);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos);
  }
}

}  // namespace
}  // namespace ember
