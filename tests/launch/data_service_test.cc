// The mini-batch streaming service in a threaded cluster: static assignment
// trains exactly as in-worker loading does, dynamic assignment serves every
// example once per epoch (also when a worker is lost), and bad settings are
// refused. The wire header's codec is checked against corruption.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "dataservice/batch_stream.h"
#include "launch/cluster_test_util.h"

namespace strata {
namespace {

using testing_util::Base;
using testing_util::MaxAbsDiff;
using testing_util::RunConfig;
using testing_util::ServedCounts;
using testing_util::TempRoot;
using testing_util::With;

void ExpectEachOnce(const std::map<int64_t, int>& epoch, int64_t n) {
  EXPECT_EQ(static_cast<int64_t>(epoch.size()), n);
  int64_t twice = 0;
  for (const auto& [id, times] : epoch) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, n);
    twice += times != 1;
  }
  EXPECT_EQ(twice, 0);
}

struct StaticCase {
  std::string sampler;
  bool shuffle;
  int data_servers;
};

class StaticServiceTest : public ::testing::TestWithParam<StaticCase> {};

// Sync PS, 4 workers: the service with static assignment hands each worker
// the batches its own sampler would have drawn, so the parameters agree
// with in-worker loading to float tolerance (sync sums the same gradients;
// only their arrival order may differ). Not loss-aware: through the
// service its loss feedback arrives `data.prefetch` batches later than in
// a worker's own sampler, so its batches differ (docs/design/data_service.md).
TEST_P(StaticServiceTest, SameParametersAsInWorkerLoading) {
  const StaticCase& p = GetParam();
  std::string root = TempRoot();
  Config c = With(
      Base(root),
      {"cluster.mode=sync", "cluster.workers=4", "data.sampler=" + p.sampler,
       std::string("data.shuffle=") + (p.shuffle ? "true" : "false")});
  auto expected = RunConfig(c);
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  auto got = RunConfig(
      With(c, {"cluster.data_servers=" + std::to_string(p.data_servers)}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GT(MaxAbsDiff(expected->final_params,
                       std::vector<float>(expected->final_params.size(), 0.0f)),
            0.0);
  EXPECT_LT(MaxAbsDiff(expected->final_params, got->final_params), 1e-5);
  EXPECT_EQ(got->samples, expected->samples);
  // A control: another sampler seed order gives other parameters.
  auto other = RunConfig(With(c, {"cluster.data_servers=1", "run.seed=2"}));
  ASSERT_TRUE(other.ok());
  EXPECT_GT(MaxAbsDiff(expected->final_params, other->final_params), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    All, StaticServiceTest,
    ::testing::Values(StaticCase{"shuffle", false, 1},
                      StaticCase{"shuffle", true, 2},
                      StaticCase{"stratified", true, 1},
                      StaticCase{"cluster-stratified", true, 1}),
    [](const auto& info) {
      std::string name = info.param.sampler;
      std::replace(name.begin(), name.end(), '-', '_');
      return name + (info.param.shuffle ? "_shuffled" : "_fixed") + "_" +
             std::to_string(info.param.data_servers);
    });

TEST(DataServiceTest, DynamicEpochsServeEveryExampleOnceAcrossFourWorkers) {
  for (int data_servers : {1, 2}) {
    SCOPED_TRACE(data_servers);
    std::string root = TempRoot();
    Config c =
        With(Base(root),
             {"cluster.mode=async", "cluster.workers=4", "cluster.servers=1",
              "cluster.data_servers=" + std::to_string(data_servers),
              "data.assignment=dynamic", "data.sampler=stratified",
              "data.served_log=ids", "train.iterations=0", "train.epochs=2",
              "run.name=dyn"});
    auto got = RunConfig(c);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    auto counts = ServedCounts(root + "/dyn");
    ASSERT_EQ(counts.size(), 2u);
    ExpectEachOnce(counts[0], 512);
    ExpectEachOnce(counts[1], 512);
    EXPECT_EQ(got->samples, 2 * 512);
    auto summary = nlohmann::json::parse(*ReadFile(root + "/dyn/summary.json"));
    ASSERT_TRUE(summary.contains("data_service")) << summary.dump();
    EXPECT_EQ(summary["data_service"]["data_servers"].size(),
              static_cast<size_t>(data_servers));
    EXPECT_GT(summary["data_service"]["data_servers"][0]["batches_per_s"]
                  .get<double>(),
              0.0);
    for (const auto& w : summary["workers"]) {
      EXPECT_TRUE(w["finished"].get<bool>()) << w.dump();
      EXPECT_TRUE(w.contains("data_wait_s"));
    }
  }
}

TEST(DataServiceTest, ALostWorkersBatchesAreServedToTheOthersOnce) {
  // Worker 1 vanishes at its 5th step (no leave, heartbeats stop): the
  // coordinator declares it lost and the data server re-serves the batches
  // it held. Every example is still acknowledged exactly once per epoch.
  std::string root = TempRoot();
  Config c =
      With(Base(root),
           {"cluster.mode=async", "cluster.workers=3", "cluster.servers=1",
            "cluster.data_servers=1", "data.assignment=dynamic",
            "data.served_log=ids", "train.iterations=0", "train.epochs=2",
            "train.batch_size=24", "cluster.worker_delay_ms=20",
            "cluster.fail_worker=1", "cluster.fail_at=5",
            "cluster.heartbeat_interval_ms=50",
            "cluster.heartbeat_timeout_ms=500", "run.name=lost"});
  auto got = RunConfig(c);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto summary = nlohmann::json::parse(*ReadFile(root + "/lost/summary.json"));
  ASSERT_EQ(summary["lost_workers"].size(), 1u) << summary.dump();
  const auto& ds = summary["data_service"]["data_servers"][0];
  EXPECT_GE(ds["returned"].get<int64_t>(), 1) << ds.dump();
  auto counts = ServedCounts(root + "/lost");
  ASSERT_EQ(counts.size(), 2u);
  ExpectEachOnce(counts[0], 512);
  ExpectEachOnce(counts[1], 512);
}

// Dynamic assignment with a checkpoint round at every step, and worker 1
// five times slower: at each round worker 0 waits, holding its prefetched
// batches, for worker 1 to reach the round's step. Near the epoch's end
// every batch left is one of those; before, worker 1 then waited for them
// until the request timeout while the round waited for it. A worker in a
// round now gives its prefetched batches back, and the run ends with
// every example once per epoch.
TEST(DataServiceTest, CheckpointRoundsDoNotHoldTheLastBatches) {
  std::string root = TempRoot();
  Config c =
      With(Base(root),
           {"cluster.mode=async", "cluster.workers=2", "cluster.servers=1",
            "cluster.data_servers=1", "data.assignment=dynamic",
            "data.served_log=ids", "train.iterations=0", "train.epochs=2",
            "train.batch_size=32", "data.prefetch=3", "workers.speed=1,0.2",
            "cluster.worker_delay_ms=2", "checkpoint.every_updates=1",
            "cluster.request_timeout_ms=4000", "run.name=rounds"});
  auto got = RunConfig(c);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto counts = ServedCounts(root + "/rounds");
  ASSERT_EQ(counts.size(), 2u);
  ExpectEachOnce(counts[0], 512);
  ExpectEachOnce(counts[1], 512);
  EXPECT_EQ(got->samples, 2 * 512);
}

// Each worker's batches in order, from served.jsonl (full ids).
std::map<int, std::vector<std::vector<int64_t>>> BatchesPerWorker(
    const std::string& run_dir) {
  std::map<int, std::vector<std::vector<int64_t>>> out;
  auto text = ReadFile(run_dir + "/served.jsonl");
  EXPECT_TRUE(text.ok()) << run_dir;
  if (!text.ok()) return out;
  std::map<int, std::map<int64_t, std::vector<int64_t>>> by_seq;
  size_t start = 0;
  while (start < text->size()) {
    size_t end = text->find('\n', start);
    if (end == std::string::npos) end = text->size();
    auto j = nlohmann::json::parse(text->substr(start, end - start));
    by_seq[j["worker"].get<int>()][j["seq"].get<int64_t>()] =
        j["ids"].get<std::vector<int64_t>>();
    start = end + 1;
  }
  // Sequence numbers are handed out in lease order; a worker's own batches
  // come in its order whatever the interleaving with the others.
  for (auto& [w, seqs] : by_seq)
    for (auto& [seq, ids] : seqs) out[w].push_back(ids);
  return out;
}

TEST(DataServiceTest, StaticAssignmentServesTheSameBatchesRunAfterRun) {
  // Async, so the workers interleave differently every run; each worker's
  // own sequence of batches does not change.
  std::string root = TempRoot();
  Config c =
      With(Base(root), {"cluster.mode=async", "cluster.workers=3",
                        "cluster.data_servers=1", "data.sampler=stratified",
                        "data.shuffle=true", "data.served_log=ids"});
  ASSERT_TRUE(RunConfig(With(c, {"run.name=a"})).ok());
  ASSERT_TRUE(RunConfig(With(c, {"run.name=b"})).ok());
  ASSERT_TRUE(RunConfig(With(c, {"run.name=c", "run.seed=9"})).ok());
  auto a = BatchesPerWorker(root + "/a");
  auto b = BatchesPerWorker(root + "/b");
  auto other = BatchesPerWorker(root + "/c");
  ASSERT_EQ(a.size(), 3u);
  for (int w = 0; w < 3; ++w) {
    EXPECT_EQ(a[w].size(), 20u);
    EXPECT_EQ(a[w], b[w]) << "worker " << w;
    EXPECT_NE(a[w], other[w]) << "worker " << w << " (another seed)";
  }
}

TEST(DataServiceTest, BadSettingsAreRefusedWithTheirNames) {
  std::string root = TempRoot();
  struct Bad {
    std::vector<std::string> kv;
    std::string says;
  };
  for (const Bad& b :
       std::vector<Bad>{{{"cluster.mode=async", "data.assignment=dynamic"},
                         "cluster.data_servers"},
                        {{"cluster.mode=sync", "cluster.data_servers=1",
                          "data.assignment=dynamic"},
                         "cluster.mode = \"async\""},
                        {{"cluster.mode=async", "cluster.workers=2",
                          "cluster.data_servers=3"},
                         "cluster.data_servers = 3"}}) {
    Config c = Base(root);
    for (const auto& kv : b.kv) ASSERT_TRUE(c.ApplyOverride(kv).ok()) << kv;
    auto got = RunConfig(c);
    ASSERT_FALSE(got.ok()) << b.says;
    EXPECT_NE(got.status().message().find(b.says), std::string::npos)
        << got.status().message();
  }
}

TEST(DataServiceTest, BatchHeaderRoundTripsAndRefusesCorruption) {
  BatchHeader h;
  h.epoch = 3;
  h.seq = 77;
  h.channels = 1;
  h.height = 28;
  h.width = 28;
  h.ids = {5, 1, 9999};
  Buffer b = EncodeBatchHeader(h);
  auto back = DecodeBatchHeader(b);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->epoch, 3);
  EXPECT_EQ(back->seq, 77);
  EXPECT_EQ(back->height, 28);
  EXPECT_EQ(back->ids, h.ids);
  // Truncated, wrong magic, and a count that does not fit the bytes.
  EXPECT_FALSE(DecodeBatchHeader(Buffer::CopyOf(b.data(), 20)).ok());
  std::vector<uint8_t> bytes(b.data(), b.data() + b.size());
  bytes[0] ^= 0xff;
  EXPECT_FALSE(DecodeBatchHeader(Buffer::CopyOf(bytes)).ok());
  bytes[0] ^= 0xff;
  bytes[24] = 200;  // N
  auto bad = DecodeBatchHeader(Buffer::CopyOf(bytes));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("200 examples"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace strata
