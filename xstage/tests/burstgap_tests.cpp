#include <gtest/gtest.h>
TEST(BurstGap, Placeholder) { EXPECT_TRUE(true); }
