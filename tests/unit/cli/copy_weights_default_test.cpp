// When float matrices are copied out of the file by default (neither --mmap nor --no-mmap): from
// 1 GiB of weight files on, and only while the copy fits in half of MemAvailable.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "ember/cli/options.h"

namespace ember::cli {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(CopyWeightsByDefault, LargeModelsThatFitInHalfTheFreeMemoryAreCopied) {
  EXPECT_FALSE(copy_weights_by_default(270'000'000, 20 * kGiB));  // small: stays mapped
  EXPECT_FALSE(copy_weights_by_default(kGiB - 1, 20 * kGiB));
  EXPECT_TRUE(copy_weights_by_default(kGiB, 20 * kGiB));
  EXPECT_TRUE(copy_weights_by_default(4 * kGiB, 8 * kGiB));
  EXPECT_FALSE(copy_weights_by_default(4 * kGiB + 1, 8 * kGiB));  // would crowd the memory
  EXPECT_FALSE(copy_weights_by_default(4 * kGiB, 0));             // MemAvailable unknown
}

TEST(CopyWeightsByDefault, ModelBytesAreTheFileOrTheSafetensorsOfTheDirectory) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("ember_model_bytes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](const std::string& name, size_t bytes) {
    std::ofstream(dir / name, std::ios::binary) << std::string(bytes, 'x');
  };
  write("model-00001-of-00002.safetensors", 1000);
  write("model-00002-of-00002.safetensors", 234);
  write("config.json", 50);
  write("tokenizer.json", 4000);
  write("model.gguf", 777);
  EXPECT_EQ(model_file_bytes(dir.string()), 1234);
  EXPECT_EQ(model_file_bytes((dir / "config.json").string()), 1234);
  EXPECT_EQ(model_file_bytes((dir / "model.gguf").string()), 777);
  EXPECT_EQ(model_file_bytes((dir / "missing.gguf").string()), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ember::cli
