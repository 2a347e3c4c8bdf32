#include "ember/core/bandwidth_probe.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace ember {
namespace {

TEST(BandwidthProbe, BuffersAreWholeLinesInTheAskedPagesAndReadBack) {
  for (bool huge : {false, true}) {
    SCOPED_TRACE(huge);
    BandwidthProbe probe((8u << 20) + 100, huge);
    EXPECT_EQ(probe.bytes(), 8u << 20);  // rounded down to whole 128-byte lines
    EXPECT_EQ(probe.huge_pages(), huge);
    if (huge) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(probe.data()) % kHugePageBytes, 0u);
    }
    // The buffer holds the pattern it was filled with (every page mapped before timing).
    const auto* f = static_cast<const float*>(probe.data());
    EXPECT_EQ(f[0], 0.0f);
    EXPECT_EQ(f[1023], 1023.0f);
    EXPECT_EQ(f[1024], 0.0f);
    for (int threads : {1, 2, 3}) EXPECT_GT(probe.measure(threads), 0.0) << threads;
  }
}

}  // namespace
}  // namespace ember
