#include "data/batch_cursor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

namespace strata {
namespace {

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Labels 0..classes-1 in turn.
std::vector<int64_t> RoundRobinLabels(int64_t n, int64_t classes) {
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[i] = i % classes;
  return labels;
}

BatchCursorOptions Dynamic(const std::string& sampler, int workers,
                           int64_t batch, int64_t epochs = 1) {
  BatchCursorOptions o;
  o.assignment = Assignment::kDynamic;
  o.sampler = ParseSamplerKind(sampler).value();
  o.num_workers = workers;
  o.batch_size = batch;
  o.seed = 11;
  o.epochs = epochs;
  return o;
}

// Serves `cursor` round-robin over `workers` (acking at once) and returns
// every acknowledged example per epoch.
std::map<int64_t, std::vector<int64_t>> ServeAll(BatchCursor& cursor,
                                                 const std::set<int>& workers) {
  std::map<int64_t, std::vector<int64_t>> seen;
  std::set<int> ended;
  for (int guard = 0; guard < 1000000 && ended.size() < workers.size();
       ++guard) {
    for (int w : workers) {
      if (ended.count(w)) continue;
      BatchCursor::Lease l = cursor.Next(w);
      if (l.kind == BatchCursor::Lease::Kind::kEnd) {
        ended.insert(w);
        continue;
      }
      if (l.kind == BatchCursor::Lease::Kind::kWait) continue;
      auto acked = cursor.Ack(w, l.seq, nullptr, 0);
      EXPECT_TRUE(acked.ok()) << acked.status().message();
      auto& e = seen[acked->epoch];
      e.insert(e.end(), acked->ids.begin(), acked->ids.end());
    }
  }
  return seen;
}

void ExpectEveryOnce(std::vector<int64_t> ids, int64_t n) {
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, Iota(n));
}

TEST(BatchCursorTest, DynamicEpochCoversEveryExampleOnce) {
  const int64_t n = 1000;
  auto labels = RoundRobinLabels(n, 10);
  for (const char* sampler :
       {"shuffle", "stratified", "cluster-stratified", "class-rotation"}) {
    auto cursor =
        BatchCursor::Make(Dynamic(sampler, 4, 16, 2), {Iota(n)}, labels, {});
    ASSERT_TRUE(cursor.ok()) << cursor.status().message();
    auto seen = ServeAll(**cursor, {0, 1, 2, 3});
    ASSERT_EQ(seen.size(), 2u) << sampler;
    ExpectEveryOnce(seen[0], n);
    ExpectEveryOnce(seen[1], n);
  }
}

TEST(BatchCursorTest, LostWorkersLeasesAreServedToOthersOnce) {
  const int64_t n = 997;
  auto labels = RoundRobinLabels(n, 10);
  auto cursor =
      BatchCursor::Make(Dynamic("shuffle", 4, 16), {Iota(n)}, labels, {});
  ASSERT_TRUE(cursor.ok());
  BatchCursor& c = **cursor;
  std::vector<int64_t> seen;
  // Every worker takes two batches (one training, one prefetched); worker 2
  // acknowledges its first, then dies holding the second.
  std::vector<BatchCursor::Lease> held;
  for (int round = 0; round < 2; ++round)
    for (int w = 0; w < 4; ++w) held.push_back(c.Next(w));
  for (const auto& l : held) {
    if (l.seq == 6) continue;  // worker 2's second batch, never acked
    auto a = c.Ack(static_cast<int>(l.seq % 4), l.seq, nullptr, 0);
    ASSERT_TRUE(a.ok()) << a.status().message();
    seen.insert(seen.end(), a->ids.begin(), a->ids.end());
  }
  EXPECT_EQ(c.leases_out(), 1);
  // Another worker's ack of the dead worker's lease is refused.
  EXPECT_FALSE(c.Ack(1, 6, nullptr, 0).ok());
  EXPECT_EQ(c.ReturnLeases(2), 1);
  auto rest = ServeAll(c, {0, 1, 3});
  seen.insert(seen.end(), rest[0].begin(), rest[0].end());
  ExpectEveryOnce(seen, n);
  EXPECT_EQ(c.returned(), 1);
}

TEST(BatchCursorTest, WaitsWhileAnotherWorkerHoldsTheLastLease) {
  auto labels = RoundRobinLabels(20, 2);
  auto cursor =
      BatchCursor::Make(Dynamic("shuffle", 2, 10), {Iota(20)}, labels, {});
  ASSERT_TRUE(cursor.ok());
  BatchCursor& c = **cursor;
  auto a = c.Next(0);
  auto b = c.Next(1);
  ASSERT_EQ(b.kind, BatchCursor::Lease::Kind::kBatch);
  EXPECT_EQ(c.Next(0).kind, BatchCursor::Lease::Kind::kWait);
  ASSERT_TRUE(c.Ack(0, a.seq, nullptr, 0).ok());
  EXPECT_EQ(c.ReturnLeases(1), 1);
  auto again = c.Next(0);
  ASSERT_EQ(again.kind, BatchCursor::Lease::Kind::kBatch);
  EXPECT_EQ(again.ids, b.ids);
  EXPECT_EQ(again.epoch, 0);
  ASSERT_TRUE(c.Ack(0, again.seq, nullptr, 0).ok());
  EXPECT_EQ(c.Next(0).kind, BatchCursor::Lease::Kind::kEnd);
}

// A worker in a checkpoint round gives back its prefetched batch: the
// worker that waited for it gets it next, and the epoch still ends with
// every example once. Only the holder can give a lease back.
TEST(BatchCursorTest, AGivenBackBatchGoesToTheWorkerThatWaits) {
  auto labels = RoundRobinLabels(30, 2);
  auto cursor =
      BatchCursor::Make(Dynamic("shuffle", 2, 10), {Iota(30)}, labels, {});
  ASSERT_TRUE(cursor.ok());
  BatchCursor& c = **cursor;
  auto a = c.Next(0);
  auto b = c.Next(0);  // prefetched
  auto d = c.Next(1);
  ASSERT_EQ(d.kind, BatchCursor::Lease::Kind::kBatch);
  ASSERT_TRUE(c.Ack(1, d.seq, nullptr, 0).ok());
  EXPECT_EQ(c.Next(1).kind, BatchCursor::Lease::Kind::kWait);
  EXPECT_FALSE(c.GiveBack(1, b.seq).ok());  // worker 0's
  EXPECT_FALSE(c.GiveBack(0, 99).ok());     // never leased
  ASSERT_TRUE(c.Ack(0, a.seq, nullptr, 0).ok());
  ASSERT_TRUE(c.GiveBack(0, b.seq).ok());
  EXPECT_EQ(c.leases_out(), 0);
  auto again = c.Next(1);
  ASSERT_EQ(again.kind, BatchCursor::Lease::Kind::kBatch);
  EXPECT_EQ(again.ids, b.ids);
  ASSERT_TRUE(c.Ack(1, again.seq, nullptr, 0).ok());
  EXPECT_EQ(c.Next(0).kind, BatchCursor::Lease::Kind::kEnd);
  EXPECT_EQ(c.Next(1).kind, BatchCursor::Lease::Kind::kEnd);
  std::vector<int64_t> seen = a.ids;
  seen.insert(seen.end(), d.ids.begin(), d.ids.end());
  seen.insert(seen.end(), again.ids.begin(), again.ids.end());
  ExpectEveryOnce(seen, 30);
}

TEST(BatchCursorTest, StaticAssignmentDrawsWhatAWorkersOwnSamplerDraws) {
  const int64_t n = 400;
  auto labels = RoundRobinLabels(n, 4);
  std::vector<std::vector<int64_t>> shards(2);
  for (int64_t i = 0; i < n; ++i) shards[i % 2].push_back(i);
  BatchCursorOptions o;
  o.sampler = SamplerKind::kStratified;
  o.num_workers = 2;
  o.batch_size = 7;
  o.seed = 5;
  o.batches = 40;
  auto cursor = BatchCursor::Make(o, shards, labels, {});
  ASSERT_TRUE(cursor.ok());
  for (int w = 0; w < 2; ++w) {
    auto own = MakeBatchSampler("stratified", shards[w], labels, {},
                                BatchCursor::SamplerSeed(5, w));
    ASSERT_TRUE(own.ok());
    std::vector<int64_t> expect;
    for (int b = 0; b < 40; ++b) {
      const int64_t epoch = (*own)->Next(7, &expect);
      auto l = (*cursor)->Next(w);
      ASSERT_EQ(l.kind, BatchCursor::Lease::Kind::kBatch);
      EXPECT_EQ(l.ids, expect);
      EXPECT_EQ(l.epoch, epoch);
    }
    EXPECT_EQ((*cursor)->Next(w).kind, BatchCursor::Lease::Kind::kEnd);
  }
}

TEST(BatchCursorTest, SaveAndRestoreMidEpochServesTheRestExactlyOnce) {
  const int64_t n = 1203;
  auto labels = RoundRobinLabels(n, 7);
  std::vector<int32_t> clusters(n);
  for (int64_t i = 0; i < n; ++i) clusters[i] = static_cast<int32_t>(i / 7 % 3);
  for (const char* sampler : {"shuffle", "stratified", "cluster-stratified",
                              "loss-aware", "class-rotation"}) {
    SCOPED_TRACE(sampler);
    auto opts = Dynamic(sampler, 3, 32);
    auto first = BatchCursor::Make(opts, {Iota(n)}, labels, clusters);
    ASSERT_TRUE(first.ok()) << first.status().message();
    BatchCursor& c = **first;
    std::vector<int64_t> seen;
    std::vector<float> losses(32, 1.0f);
    for (int k = 0; k < 12; ++k) {
      auto l = c.Next(k % 3);
      auto a = c.Ack(k % 3, l.seq, c.wants_losses() ? losses.data() : nullptr,
                     l.ids.size());
      ASSERT_TRUE(a.ok()) << a.status().message();
      seen.insert(seen.end(), a->ids.begin(), a->ids.end());
    }
    // Two leases out (never acknowledged): served again after the restore.
    c.Next(0);
    c.Next(1);
    const nlohmann::json state = c.SaveState();
    auto second = BatchCursor::Make(opts, {Iota(n)}, labels, clusters);
    ASSERT_TRUE(second.ok());
    ASSERT_TRUE(
        (*second)->RestoreState(nlohmann::json::parse(state.dump())).ok());
    auto rest = ServeAll(**second, {0, 1, 2});
    seen.insert(seen.end(), rest[0].begin(), rest[0].end());
    ExpectEveryOnce(seen, n);
    // A state saved for another run is refused, naming the difference.
    auto other =
        BatchCursor::Make(Dynamic(sampler, 4, 32), {Iota(n)}, labels, clusters);
    ASSERT_TRUE(other.ok());
    Status st = (*other)->RestoreState(state);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("4 workers"), std::string::npos)
        << st.message();
  }
}

// After a resize a static worker serves its parts first, under their own
// epochs, then its sampler from the epoch offset, for its budget; a
// checkpoint inside a part keeps the part and its cursor.
TEST(BatchCursorTest, AResizedWorkerServesItsPartsThenItsShard) {
  const int64_t n = 40;
  auto labels = RoundRobinLabels(n, 4);
  BatchCursorOptions o;
  o.sampler = SamplerKind::kStratified;
  o.num_workers = 1;
  o.batch_size = 4;
  o.seed = 3;
  o.epochs = 4;
  auto make = [&] {
    auto c = BatchCursor::Make(o, {Iota(20)}, labels, {});
    EXPECT_TRUE(c.ok()) << c.status().message();
    return std::move(c).value();
  };
  auto cursor = make();
  std::vector<int64_t> part{21, 22, 25, 27, 30, 33, 38};  // 2 batches
  // Epoch 1's part, then the shard from epoch 2: 2 + 2 x 5 batches.
  ASSERT_TRUE(cursor->Continue(0, {{1, part}}, 2, 12).ok());
  // The first batch, then a checkpoint inside the part.
  BatchCursor::Lease first = cursor->Next(0);
  ASSERT_EQ(first.kind, BatchCursor::Lease::Kind::kBatch);
  EXPECT_EQ(first.epoch, 1);
  ASSERT_TRUE(cursor->Ack(0, first.seq, nullptr, 0).ok());
  auto resumed = make();
  ASSERT_TRUE(resumed->RestoreState(cursor->SaveState()).ok());
  auto seen = ServeAll(*resumed, {0});
  seen[1].insert(seen[1].end(), first.ids.begin(), first.ids.end());
  std::sort(seen[1].begin(), seen[1].end());
  EXPECT_EQ(seen[1], part);
  ASSERT_EQ(seen.size(), 3u);
  ExpectEveryOnce(seen[2], 20);
  ExpectEveryOnce(seen[3], 20);
  // A dynamic cursor has no parts.
  auto dynamic =
      BatchCursor::Make(Dynamic("shuffle", 2, 4), {Iota(n)}, labels, {});
  ASSERT_TRUE(dynamic.ok());
  EXPECT_EQ((*dynamic)->Continue(0, {}, 0, -1).code(),
            Status::Code::kInvalidArgument);
}

// A cursor of another run gives what it had left before an epoch: its
// leases, and the rest of each sampler's epochs; Where says where the
// samplers were.
TEST(BatchCursorTest, DrainBeforeGivesEverythingLeftOnce) {
  const int64_t n = 60;
  auto labels = RoundRobinLabels(n, 3);
  BatchCursorOptions o;
  o.num_workers = 2;
  o.batch_size = 5;
  o.seed = 9;
  o.batches = 100;
  auto cursor = BatchCursor::Make(o, {Iota(30), Iota(60)}, labels, {});
  ASSERT_TRUE(cursor.ok());
  // Worker 0 (examples 0..29) ends epoch 0 in 6 batches, the last one out
  // on lease; worker 1 (0..59) is 2 batches into its epoch 0.
  std::vector<int64_t> acked0;
  for (int b = 0; b < 6; ++b) {
    BatchCursor::Lease l = (*cursor)->Next(0);
    if (b == 5) break;  // out on lease
    ASSERT_TRUE((*cursor)->Ack(0, l.seq, nullptr, 0).ok());
    acked0.insert(acked0.end(), l.ids.begin(), l.ids.end());
  }
  std::vector<int64_t> acked1;
  for (int b = 0; b < 2; ++b) {
    BatchCursor::Lease l = (*cursor)->Next(1);
    ASSERT_TRUE((*cursor)->Ack(1, l.seq, nullptr, 0).ok());
    acked1.insert(acked1.end(), l.ids.begin(), l.ids.end());
  }
  // Worker 0's sampler is at epoch 1, not started; worker 1's at 0.
  EXPECT_EQ((*cursor)->Where().epoch, 1);
  EXPECT_FALSE((*cursor)->Where().started);
  std::map<int64_t, std::vector<int64_t>> left;
  (*cursor)->DrainBefore(1, &left);
  ASSERT_EQ(left.size(), 1u);
  std::vector<int64_t> all = left[0];
  all.insert(all.end(), acked0.begin(), acked0.end());
  all.insert(all.end(), acked1.begin(), acked1.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> want = Iota(30);
  const std::vector<int64_t> second = Iota(60);
  want.insert(want.end(), second.begin(), second.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(all, want);
}

TEST(BatchCursorTest, CorruptStateIsRefused) {
  auto labels = RoundRobinLabels(50, 5);
  auto cursor =
      BatchCursor::Make(Dynamic("stratified", 1, 8), {Iota(50)}, labels, {});
  ASSERT_TRUE(cursor.ok());
  nlohmann::json state = (*cursor)->SaveState();
  state["slots"][0]["sampler"]["taken"][0] = 1000;
  Status st = (*cursor)->RestoreState(state);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("past its end"), std::string::npos)
      << st.message();
  EXPECT_FALSE((*cursor)->RestoreState(nlohmann::json::object()).ok());
}

TEST(BatchSamplerTest, ClassRotationWindowsAreClassBalanced) {
  // 25 classes of 40 examples, batch 8: windows of ceil(25 / 8) = 4
  // batches hold every class, and no class twice more than another.
  const int64_t classes = 25, per = 40, batch = 8;
  auto labels = RoundRobinLabels(classes * per, classes);
  auto s =
      MakeBatchSampler("class-rotation", Iota(classes * per), labels, {}, 3);
  ASSERT_TRUE(s.ok());
  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> b, all;
  for (int k = 0; k < (*s)->BatchesPerEpoch(batch); ++k) {
    (*s)->Next(batch, &b);
    batches.push_back(b);
    all.insert(all.end(), b.begin(), b.end());
  }
  ExpectEveryOnce(all, classes * per);
  const size_t window = (classes + batch - 1) / batch;
  int checked = 0;
  for (size_t start = 0; start + window <= batches.size(); ++start) {
    std::vector<int> count(classes, 0);
    for (size_t k = start; k < start + window; ++k)
      for (int64_t id : batches[k]) ++count[labels[id]];
    // Only while every class still has examples (the epoch's tail cannot).
    if ((start + window) * batch > static_cast<size_t>(classes * (per - 1)))
      break;
    const auto [lo, hi] = std::minmax_element(count.begin(), count.end());
    EXPECT_GE(*lo, 1) << "window " << start;
    EXPECT_LE(*hi - *lo, 1) << "window " << start;
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

TEST(BatchSamplerTest, StratifiedBatchesMatchGlobalProportions) {
  // Classes of 500, 300 and 200 examples: a batch of 10 holds 5, 3, 2.
  std::vector<int64_t> labels;
  for (int c = 0; c < 3; ++c)
    labels.insert(labels.end(), c == 0 ? 500 : c == 1 ? 300 : 200, c);
  auto cursor = BatchCursor::Make(Dynamic("stratified", 4, 10),
                                  {Iota(static_cast<int64_t>(labels.size()))},
                                  labels, {});
  ASSERT_TRUE(cursor.ok());
  for (int k = 0; k < 100; ++k) {
    auto l = (*cursor)->Next(k % 4);
    std::vector<int> count(3, 0);
    for (int64_t id : l.ids) ++count[labels[id]];
    EXPECT_EQ(count, (std::vector<int>{5, 3, 2})) << "batch " << k;
    ASSERT_TRUE((*cursor)->Ack(k % 4, l.seq, nullptr, 0).ok());
  }
}

TEST(BatchSamplerTest, LossAwareServesAHardStratumSoonerAndCoversTheEpoch) {
  // 10 classes x 4 sub-clusters of 50; sub-cluster 3 of class 0 (2% of the
  // data) is hard: its examples report loss 3, the rest 0.3.
  const int64_t classes = 10, subs = 4, per = 50;
  const int64_t n = classes * subs * per;
  std::vector<int64_t> labels(n);
  std::vector<int32_t> clusters(n);
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = i % classes;
    clusters[i] = static_cast<int32_t>(i / classes % subs);
  }
  auto hard = [&](int64_t id) { return labels[id] == 0 && clusters[id] == 3; };
  BatchCursorOptions o = Dynamic("loss-aware", 2, 32);
  o.max_boost = 4;
  auto cursor = BatchCursor::Make(o, {Iota(n)}, labels, clusters);
  ASSERT_TRUE(cursor.ok());
  int64_t served = 0, hard_served = 0, first_half_hard = 0;
  std::vector<int64_t> all;
  for (int k = 0;; ++k) {
    auto l = (*cursor)->Next(k % 2);
    if (l.kind != BatchCursor::Lease::Kind::kBatch) break;
    std::vector<float> losses;
    for (int64_t id : l.ids) {
      losses.push_back(hard(id) ? 3.0f : 0.3f);
      hard_served += hard(id);
      if (served < n / 2) first_half_hard += hard(id);
      ++served;
    }
    all.insert(all.end(), l.ids.begin(), l.ids.end());
    ASSERT_TRUE(
        (*cursor)->Ack(k % 2, l.seq, losses.data(), losses.size()).ok());
  }
  ExpectEveryOnce(all, n);
  EXPECT_EQ(hard_served, per);
  // Its share of the first half of the epoch is well above its 2% share
  // of the data (plain stratified would serve about half of it there).
  const double share = static_cast<double>(first_half_hard) / (n / 2);
  EXPECT_GT(share, 1.5 * per / static_cast<double>(n)) << share;
  auto losses = (*cursor)->StratumLosses();
  ASSERT_TRUE(losses.contains("loss"));
  EXPECT_EQ(losses["loss"].size(), static_cast<size_t>(classes * subs));
  EXPECT_EQ(losses["class"].size(), static_cast<size_t>(classes * subs));
  EXPECT_EQ(losses["cluster"][3], 3);
}

TEST(BatchCursorTest, BadAcksAreRefused) {
  auto labels = RoundRobinLabels(40, 2);
  auto cursor =
      BatchCursor::Make(Dynamic("loss-aware", 2, 8), {Iota(40)}, labels, {});
  ASSERT_TRUE(cursor.ok());
  auto l = (*cursor)->Next(0);
  EXPECT_FALSE((*cursor)->Ack(0, 999, nullptr, 0).ok());
  float one = 1;
  EXPECT_FALSE((*cursor)->Ack(0, l.seq, &one, 1).ok());  // 8 expected
  EXPECT_TRUE((*cursor)->Ack(0, l.seq, nullptr, 0).ok());
  EXPECT_FALSE((*cursor)->Ack(0, l.seq, nullptr, 0).ok());  // twice
  // An unknown sampler is refused where its name is parsed (the cursor
  // takes the parsed kind).
  EXPECT_FALSE(ParseSamplerKind("nope").ok());
}

}  // namespace
}  // namespace strata
