#include "ps/schedule.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(LrScheduleTest, WarmupThenStepDecay) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::kStep;
  s.lr = 1.0;
  s.warmup_steps = 4;
  s.step_every = 10;
  s.step_gamma = 0.5;
  EXPECT_DOUBLE_EQ(s.Rate(0), 0.25);
  EXPECT_DOUBLE_EQ(s.Rate(3), 1.0);
  EXPECT_DOUBLE_EQ(s.Rate(4), 1.0);
  EXPECT_DOUBLE_EQ(s.Rate(13), 1.0);
  EXPECT_DOUBLE_EQ(s.Rate(14), 0.5);
  EXPECT_DOUBLE_EQ(s.Rate(24), 0.25);
}

TEST(LrScheduleTest, CosineGoesFromPeakToMin) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::kCosine;
  s.lr = 0.2;
  s.min_lr = 0.02;
  s.total_steps = 100;
  EXPECT_DOUBLE_EQ(s.Rate(0), 0.2);
  EXPECT_NEAR(s.Rate(50), 0.11, 1e-12);
  EXPECT_NEAR(s.Rate(100), 0.02, 1e-12);
  EXPECT_NEAR(s.Rate(500), 0.02, 1e-12);
  EXPECT_GT(s.Rate(30), s.Rate(31));
}

}  // namespace
}  // namespace strata
