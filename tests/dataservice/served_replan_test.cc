// The data service on another number of workers
// (dataservice/served_replan.h): two data servers fed 4 workers, each at
// its own point of its epoch with a batch out on lease; the run goes on
// with 3 or 6. Whatever was acknowledged before, and everything the new
// data servers serve after, covers every example exactly once per epoch,
// and every new worker is served the same number of batches.
#include "dataservice/served_replan.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "cluster/role_table.h"
#include "sharding/methods.h"

namespace strata {
namespace {

constexpr int64_t kExamples = 240;
constexpr int kDataServers = 2;
constexpr int64_t kEpochs = 3;

Dataset FourClasses() {
  Dataset d;
  d.num_classes = 4;
  for (int64_t i = 0; i < kExamples; ++i) d.labels.push_back((i * 7) % 4);
  d.features.assign(static_cast<size_t>(kExamples), 0.f);
  return d;
}

ShardSet Shards(const Dataset& d, int workers) {
  ShardOptions so;
  so.method = ShardMethod::kStratified;
  so.num_workers = workers;
  so.seed = 5;
  auto plan = ComputeShardPlan(d, so);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  ShardSet set;
  set.plan = std::move(plan).value();
  for (int w = 0; w < workers; ++w)
    set.worker_indices.push_back(set.plan.WorkerShard(w));
  return set;
}

ClusterRunOptions Options(int workers, int64_t batch) {
  ClusterRunOptions o;
  o.roles = RoleTable::Standard(1, workers, true, kDataServers);
  o.data_servers = kDataServers;
  o.sampler = SamplerKind::kStratified;
  o.seed = 7;
  o.shuffle = true;
  o.epochs = kEpochs;
  o.worker_batch = batch;
  o.iterations =
      kEpochs * ((kExamples / workers + batch - 1) / batch);  // SetIterations
  return o;
}

// Data server k's cursor over its workers (w mod m == k), as the data role
// makes it.
std::unique_ptr<BatchCursor> Cursor(const ClusterRunOptions& o,
                                    const ShardSet& shards, const Dataset& d,
                                    int k) {
  BatchCursorOptions co;
  co.sampler = o.sampler;
  co.batch_size = o.worker_batch;
  co.seed = o.seed;
  co.shuffle = o.shuffle;
  co.epochs = o.epochs;
  co.batches = o.iterations;
  std::vector<std::vector<int64_t>> own;
  for (int w = k; w < o.roles.num_workers(); w += kDataServers) {
    co.seed_workers.push_back(w);
    own.push_back(shards.worker_indices[w]);
  }
  co.num_workers = static_cast<int>(own.size());
  auto c = BatchCursor::Make(co, std::move(own), d.labels, {});
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(c).value();
}

using PerEpoch = std::map<int64_t, std::map<int64_t, int>>;

void Count(PerEpoch& seen, int64_t epoch, const std::vector<int64_t>& ids) {
  for (int64_t id : ids) ++seen[epoch][id];
}

// 4 old workers (batch 6: 10 batches an epoch each) that acknowledged
// `acked` batches, then took one more out on lease (none for a worker that
// had finished), go on as 3 or 6: every example once per epoch, the new
// shards from `next_epoch`.
void ExpectEveryExampleOnce(const std::vector<int>& acked, int64_t next_epoch) {
  const Dataset d = FourClasses();
  for (int to : {3, 6}) {
    SCOPED_TRACE(to);
    const ClusterRunOptions old_o = Options(4, 6);
    const ShardSet old_shards = Shards(d, 4);
    PerEpoch seen;
    nlohmann::json old_states = nlohmann::json::array();
    for (int k = 0; k < kDataServers; ++k) {
      auto c = Cursor(old_o, old_shards, d, k);
      for (int local = 0; local < 2; ++local) {
        const int w = k + local * kDataServers;
        for (int b = 0; b < acked[w]; ++b) {
          BatchCursor::Lease l = c->Next(local);
          ASSERT_EQ(l.kind, BatchCursor::Lease::Kind::kBatch);
          ASSERT_TRUE(c->Ack(local, l.seq, nullptr, 0).ok());
          Count(seen, l.epoch, l.ids);
        }
        c->Next(local);  // out on lease
      }
      old_states.push_back(c->SaveState());
    }
    const ClusterRunOptions o = Options(to, 24 / to);
    const ShardSet new_shards = Shards(d, to);
    const nlohmann::json resize{
        {"from_workers", 4},
        {"to_workers", to},
        {"steps", std::vector<int64_t>(static_cast<size_t>(to), 10)},
        {"old", old_states}};
    std::vector<int64_t> batches;  // per new worker
    int64_t examples = -1;
    for (int k = 0; k < kDataServers; ++k) {
      auto c = Cursor(o, new_shards, d, k);
      auto r = ReplanServed(o, resize, k, d, old_shards, *c);
      ASSERT_TRUE(r.ok()) << r.status().message();
      // Every data server computes the same split.
      if (examples >= 0) {
        EXPECT_EQ(r->examples, examples);
      }
      examples = r->examples;
      EXPECT_EQ(r->next_epoch, next_epoch);
      EXPECT_LT(r->max_tv, 0.1);
      // A checkpoint right after the re-plan resumes it.
      auto again = Cursor(o, new_shards, d, k);
      ASSERT_TRUE(again->RestoreState(c->SaveState()).ok());
      for (int local = 0; k + local * kDataServers < to; ++local) {
        int64_t count = 0;
        for (;;) {
          BatchCursor::Lease l = again->Next(local);
          if (l.kind != BatchCursor::Lease::Kind::kBatch) break;
          ASSERT_TRUE(again->Ack(local, l.seq, nullptr, 0).ok());
          Count(seen, l.epoch, l.ids);
          ++count;
        }
        batches.push_back(count);
      }
    }
    EXPECT_GT(examples, 60);
    for (int64_t e = 0; e < kEpochs; ++e) {
      SCOPED_TRACE(e);
      EXPECT_EQ(static_cast<int64_t>(seen[e].size()), kExamples);
      for (const auto& [id, times] : seen[e]) EXPECT_EQ(times, 1) << id;
    }
    for (int64_t b : batches) EXPECT_EQ(b, batches[0]);
  }
}

TEST(ReplanServedTest, EveryExampleLeftIsServedOnceOverTheNewWorkers) {
  // Workers 0, 1 and 3 are into epoch 1; worker 2 has just ended epoch 0.
  // Left: epoch 0's leases, the rest of epoch 1 (all of worker 2's).
  ExpectEveryExampleOnce({13, 12, 10, 14}, 2);
}

TEST(ReplanServedTest, AWorkerThatHadFinishedIsNotServedItsEpochsAgain) {
  // Free modes: worker 0 trained all 3 epochs (30 batches) while the
  // others are in epoch 1. The new shards start after the run's last
  // epoch; what the others had left of epochs 1 and 2 is re-planned (when
  // the finished worker was not counted, its epoch-2 examples were served
  // again).
  ExpectEveryExampleOnce({30, 12, 13, 14}, 3);
}

TEST(ReplanServedTest, AStateThatDoesNotFitIsRefused) {
  const Dataset d = FourClasses();
  const ClusterRunOptions o = Options(3, 8);
  const ShardSet old_shards = Shards(d, 4);
  auto c = Cursor(o, Shards(d, 3), d, 0);
  const nlohmann::json one_cursor{{"from_workers", 4},
                                  {"steps", {1, 1, 1}},
                                  {"old", nlohmann::json::array({{}})}};
  auto r = ReplanServed(o, one_cursor, 0, d, old_shards, *c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kDataLoss);
  EXPECT_NE(r.status().message().find("1 old cursors for 2 data servers"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace strata
