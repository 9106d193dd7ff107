#include <gtest/gtest.h>

#include "ps/shard.h"

namespace strata {
namespace {

using State = ParameterShard::PushOutcome::State;

UpdatePolicy FollowerPolicy() {
  UpdatePolicy p;
  p.mode = UpdatePolicy::Mode::kSync;
  p.num_workers = 4;
  p.updates_per_step = 3;
  p.follower = true;
  return p;
}

LrSchedule Rate(double lr) {
  LrSchedule s;
  s.lr = lr;
  return s;
}

// A follower applies exactly the steps the leader chose, in step order,
// whatever order the tagged gradients arrive in.
TEST(FollowerShardTest, ClosesTaggedStepsInOrderWhateverTheArrivalOrder) {
  ParameterShard a({0, 1}, {0.0f}, OptimizerOptions{}, Rate(1.0),
                   FollowerPolicy());
  ParameterShard b({0, 1}, {0.0f}, OptimizerOptions{}, Rate(1.0),
                   FollowerPolicy());
  // Step 0 = {1, 2, 6} (size 3), step 1 = {10, 20} (size 2, the end of a run).
  struct G {
    float g;
    int64_t step, size;
  };
  std::vector<G> order_a = {
      {1, 0, 3}, {2, 0, 3}, {6, 0, 3}, {10, 1, 2}, {20, 1, 2}};
  std::vector<G> order_b = {
      {10, 1, 2}, {6, 0, 3}, {20, 1, 2}, {1, 0, 3}, {2, 0, 3}};
  for (const G& g : order_a) a.PushTagged(&g.g, g.step, g.size);
  // b: step 1 complete before step 0: it must wait for step 0.
  EXPECT_EQ(b.PushTagged(&order_b[0].g, 1, 2).state, State::kPending);
  EXPECT_EQ(b.PushTagged(&order_b[1].g, 0, 3).state, State::kPending);
  EXPECT_EQ(b.PushTagged(&order_b[2].g, 1, 2).state, State::kPending);
  EXPECT_EQ(b.version(), 0);
  EXPECT_EQ(b.PushTagged(&order_b[3].g, 0, 3).state, State::kPending);
  auto last = b.PushTagged(&order_b[4].g, 0, 3);
  EXPECT_EQ(last.state, State::kApplied);
  EXPECT_EQ(b.version(), 2);  // step 0 and then the waiting step 1 closed
  float pa, pb;
  a.ReadIfAtLeast(2, &pa);
  b.ReadIfAtLeast(2, &pb);
  EXPECT_FLOAT_EQ(pa, -3.0f - 15.0f);  // mean(1,2,6) then mean(10,20)
  EXPECT_FLOAT_EQ(pa, pb);
  EXPECT_EQ(b.stats().gradients_per_update.at(3), 1);
  EXPECT_EQ(b.stats().tail_updates, 1);
}

TEST(FollowerShardTest, LeaderReportsTheSizeOfEachStep) {
  UpdatePolicy p = FollowerPolicy();
  p.follower = false;
  ParameterShard leader({0, 1}, {0.0f}, OptimizerOptions{}, Rate(1.0), p);
  float g = 1;
  EXPECT_EQ(leader.Push(&g, 0).state, State::kPending);
  EXPECT_EQ(leader.Push(&g, 0).state, State::kPending);
  auto closed = leader.Push(&g, 0);
  EXPECT_EQ(closed.state, State::kApplied);
  EXPECT_EQ(closed.step_size, 3);
  EXPECT_EQ(leader.last_step_size(), 3);
  // A follower's WorkerLeft never closes a step on its own.
  ParameterShard follower({0, 1}, {0.0f}, OptimizerOptions{}, Rate(1.0),
                          FollowerPolicy());
  follower.PushTagged(&g, 0, 3);
  EXPECT_FALSE(follower.WorkerLeft());
  EXPECT_EQ(follower.version(), 0);
}

}  // namespace
}  // namespace strata
