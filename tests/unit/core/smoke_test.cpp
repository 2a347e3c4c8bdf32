#include <gtest/gtest.h>

#include "ember/core/dtype.h"
#include "ember/core/half.h"

TEST(DType, RowBytes) {
  EXPECT_EQ(ember::dtype_row_bytes(ember::DType::Q8_0, 64), 68);
  EXPECT_EQ(ember::dtype_row_bytes(ember::DType::Q4_0, 64), 36);
  EXPECT_EQ(ember::dtype_row_bytes(ember::DType::BF16, 3), 6);
  EXPECT_THROW(ember::dtype_row_bytes(ember::DType::Q4_0, 33), std::runtime_error);
}
