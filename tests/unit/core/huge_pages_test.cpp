#include "ember/core/huge_pages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

namespace ember {
namespace {

bool all_zero(const uint8_t* p, std::size_t n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

TEST(HugePages, BufferIsWholeAlignedHugePagesOfZeros) {
  const std::size_t bytes = 3 * 1024 * 1024 + 5;
  HugePageBuffer buf(bytes);
  ASSERT_NE(buf.data(), nullptr);
  // Rounded up to whole 2 MiB pages; under ASan exactly what was asked for (overruns reported).
  EXPECT_EQ(buf.size(), kHugePagesFromHeap ? bytes : 2 * kHugePageBytes);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buf.data()) % kHugePageBytes, 0u);
  EXPECT_TRUE(all_zero(buf.data(), buf.size()));
  buf.data()[buf.size() - 1] = 7;  // writable to the end

  HugePageBuffer moved = std::move(buf);
  EXPECT_EQ(buf.data(), nullptr);
  EXPECT_EQ(buf.size(), 0u);
  EXPECT_EQ(moved.data()[moved.size() - 1], 7);
  EXPECT_EQ(HugePageBuffer(0).data(), nullptr);
}

TEST(HugePages, ArenaHandsOutAlignedDisjointZeroedRanges) {
  HugePageArena arena;
  std::vector<std::pair<uint8_t*, std::size_t>> got;
  // Small ones share a region; 20 MiB (over a quarter of a region) gets its own.
  for (std::size_t bytes : {std::size_t{1}, std::size_t{100}, std::size_t{4096},
                            std::size_t{20} << 20, std::size_t{65}, std::size_t{3} << 20}) {
    uint8_t* p = arena.allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << bytes;
    EXPECT_TRUE(all_zero(p, bytes)) << bytes;
    std::fill(p, p + bytes, static_cast<uint8_t>(got.size() + 1));
    got.emplace_back(p, bytes);
  }
  // Nothing written through one range shows through another.
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto [p, n] = got[i];
    EXPECT_TRUE(std::all_of(p, p + n, [&](uint8_t b) { return b == i + 1; })) << i;
  }
  // One shared 32 MiB region for the small requests plus the 20 MiB one's own (under ASan a heap
  // block per request, each rounded to 64 bytes).
  const std::size_t reserved =
      kHugePagesFromHeap ? 64 + 128 + 4096 + (std::size_t{20} << 20) + 128 + (std::size_t{3} << 20)
                         : (std::size_t{32} << 20) + (std::size_t{20} << 20);
  EXPECT_EQ(arena.reserved_bytes(), reserved);
  // A small request after the big one still comes from the shared region.
  arena.allocate(64);
  EXPECT_EQ(arena.reserved_bytes(), reserved + (kHugePagesFromHeap ? 64 : 0));
}

TEST(HugePages, ModeIsOneTheKernelNames) {
  const std::set<std::string> known = {"always", "madvise", "never", "unavailable"};
  EXPECT_TRUE(known.count(transparent_huge_pages_mode())) << transparent_huge_pages_mode();
}

TEST(HugePages, PrefaultedBufferIsBackedByHugePagesWhenTheKernelAllows) {
  if (kHugePagesFromHeap) GTEST_SKIP() << "AddressSanitizer build: heap memory, not huge pages";
  HugePageBuffer buf(8 * kHugePageBytes, /*prefault=*/true);
  const std::size_t backed = huge_page_backed_bytes(buf.data(), buf.size());
  EXPECT_LE(backed, buf.size());
  const std::string mode = transparent_huge_pages_mode();
  if (mode != "always" && mode != "madvise") GTEST_SKIP() << "THP mode: " << mode;
  // The kernel may still fall back to 4 KiB pages when it finds no free 2 MiB (fragmented
  // memory); then there is nothing to check here.
  if (backed == 0) GTEST_SKIP() << "THP enabled but no huge page was available";
  EXPECT_EQ(backed % kHugePageBytes, 0u);
}

}  // namespace
}  // namespace ember
