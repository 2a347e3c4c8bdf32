// MappedFile: a read-only mapping whose pages can be released after load without losing data.
#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "ember/core/error.h"
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
