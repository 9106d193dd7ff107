// The timeline's recorder, its clock estimate and its wire format
// (common/timeline.h, common/timeline_wire.h).
#include "common/timeline.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/timeline_wire.h"

namespace strata::timeline {
namespace {

TEST(TimelineTest, RecordsOnlyWhileOnAndPerNode) {
  Disable();
  SetThread(7, "main");
  { Span off("off", "test"); }
  Enable(100);
  EXPECT_TRUE(Take(7).events.empty());  // Enable() dropped nothing real
  {
    Span a("a", "test", 3);
    Span b("b", "test", -1, 8);  // another node's, on this thread
  }
  // A thread with no node records only spans that name one.
  std::thread([] {
    Add("lost", "test", 1, 2);
    Add("kept", "test", 1, 2, -1, 8, "helper");
  }).join();
  Disable();
  { Span late("late", "test"); }
  Taken seven = Take(7);
  ASSERT_EQ(seven.events.size(), 1u);
  EXPECT_STREQ(seven.events[0].name, "a");
  EXPECT_STREQ(seven.events[0].track, "main");
  EXPECT_EQ(seven.events[0].arg, 3);
  EXPECT_EQ(seven.events[0].node, 7);
  EXPECT_GE(seven.events[0].dur_ns, 0);
  Taken eight = Take(8);
  ASSERT_EQ(eight.events.size(), 2u);
  EXPECT_STREQ(eight.events[0].name, "b");
  EXPECT_STREQ(eight.events[1].name, "kept");
  EXPECT_STREQ(eight.events[1].track, "helper");
  EXPECT_TRUE(Take(8).events.empty());  // taken out
  SetThread(-1, "");
}

TEST(TimelineTest, TheBufferKeepsTheNewestAndCountsTheDropped) {
  Enable(4);
  SetThread(3, "main");
  for (int i = 0; i < 10; ++i) Add("s", "test", i, i + 1, i);
  Add("other", "test", 0, 1, -1, 4);  // drops node 3's oldest
  Disable();
  Taken t = Take(3);
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].arg, 7);
  EXPECT_EQ(t.events[2].arg, 9);
  EXPECT_EQ(t.dropped, 7);
  EXPECT_EQ(Take(4).events.size(), 1u);
  SetThread(-1, "");
}

TEST(TimelineTest, InternedNamesAreStable) {
  const char* a = Intern("push to node 3");
  const char* b = Intern(std::string("push to node ") + "3");
  EXPECT_EQ(a, b);
  EXPECT_STREQ(a, "push to node 3");
}

TEST(ClockEstimateTest, KeepsTheShortestRoundTrip) {
  ClockEstimate c;
  c.Add(1000, 0, 1100);  // no stamp: ignored
  EXPECT_EQ(c.samples, 0);
  // Remote clock = local + 5000; round trips of 400, 100 and 300 ns, the
  // replies stamped at different points of the trip.
  c.Add(1000, 1000 + 5000 + 350, 1400);
  EXPECT_EQ(c.offset_ns, 5000 + 350 - 200);
  c.Add(2000, 2000 + 5000 + 60, 2100);
  EXPECT_EQ(c.rtt_ns, 100);
  EXPECT_EQ(c.offset_ns, 5000 + 60 - 50);  // within half the round trip
  c.Add(3000, 3000 + 5000 + 10, 3300);     // longer: not taken
  EXPECT_EQ(c.rtt_ns, 100);
  EXPECT_EQ(c.samples, 3);
}

TEST(TimelineWireTest, RoundTripsAndNamesMalformedInput) {
  NodeTimeline t;
  t.node = 5;
  t.clock.offset_ns = -1234;
  t.clock.rtt_ns = 99;
  t.clock.samples = 4;
  t.taken.dropped = 2;
  Event e;
  e.name = "forward";
  e.cat = "step";
  e.track = "main";
  e.start_ns = 10;
  e.dur_ns = 20;
  e.arg = 3;
  e.node = 5;
  t.taken.events.push_back(e);
  e.name = "push";
  e.async = true;
  e.arg = -1;
  t.taken.events.push_back(e);
  Result<NodeTimeline> back = Decode(Encode(t));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->node, 5);
  EXPECT_EQ(back->clock.offset_ns, -1234);
  EXPECT_EQ(back->clock.rtt_ns, 99);
  EXPECT_EQ(back->taken.dropped, 2);
  ASSERT_EQ(back->taken.events.size(), 2u);
  EXPECT_STREQ(back->taken.events[0].name, "forward");
  EXPECT_EQ(back->taken.events[0].dur_ns, 20);
  EXPECT_EQ(back->taken.events[0].arg, 3);
  EXPECT_TRUE(back->taken.events[1].async);
  EXPECT_FALSE(Decode("not json").ok());
  Result<NodeTimeline> bad =
      Decode(R"({"node":1,"offset_ns":0,"rtt_ns":0,"samples":0,"dropped":0,)"
             R"("strings":["a"],"events":[[0,0,5,1,1,-1,0]]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("string index 5"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace strata::timeline
