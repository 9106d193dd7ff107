// A run resumed on another number of workers (docs/design/elastic.md):
// the old workers' cursors, as the coordinator hands them on
// (coordinator/resize_restore.h), give every new worker its part of the
// epoch the old ones were in; with what the old workers had trained, every
// example is trained on exactly once in that epoch and in the next, on the
// new shards. A checkpoint in the middle of the rest of the epoch resumes
// where it was.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "coordinator/resize_restore.h"
#include "sharding/shard_test_util.h"
#include "worker/batch_source.h"

namespace strata {
namespace {

struct ResizeCase {
  std::string method, sampler;
  int from, to;
};

class EpochRemainderTest : public ::testing::TestWithParam<ResizeCase> {
 protected:
  void SetUp() override {
    data_ = testing::SkewedLabels(240, 6, 9);
    data_.name = "ids";
  }
  Config ConfigFor(int workers) const {
    Config c;
    for (const std::string& kv : std::vector<std::string>{
             "cluster.mode=sync", "train.batch_size=24", "data.shuffle=true",
             "data.sampler=" + GetParam().sampler,
             "data.sharding.method=" + GetParam().method,
             "cluster.workers=" + std::to_string(workers)}) {
      EXPECT_TRUE(c.ApplyOverride(kv).ok()) << kv;
    }
    return c;
  }
  Dataset data_;
};

// Draws `count` batches into seen[epoch]; returns the epoch of the last.
int64_t Draw(BatchSource& s, int count,
             std::map<int64_t, std::vector<int64_t>>* seen) {
  Batch b;
  int64_t epoch = -1;
  for (int k = 0; k < count; ++k) {
    EXPECT_TRUE(s.Next(&b, &epoch).ok());
    auto flat = b.inputs.reshape({-1}).contiguous();
    for (int64_t i = 0; i < flat.numel(); ++i)
      (*seen)[epoch].push_back(static_cast<int64_t>(flat.data_ptr<float>()[i]));
    s.Done({});
  }
  return epoch;
}

TEST_P(EpochRemainderTest, EveryExampleOncePerEpochAcrossTheResize) {
  const ResizeCase& p = GetParam();
  const Config old_config = ConfigFor(p.from), new_config = ConfigFor(p.to);
  auto old_o = ClusterRunOptions::FromConfig(old_config);
  auto new_o = ClusterRunOptions::FromConfig(new_config);
  ASSERT_TRUE(old_o.ok() && new_o.ok());
  old_o->iterations = new_o->iterations = 1000;
  auto old_shards = ResolveShards(old_config, data_, p.from);
  auto new_shards = ResolveShards(new_config, data_, p.to);
  ASSERT_TRUE(old_shards.ok() && new_shards.ok());
  ShardsFor shards_for = [&](int n) {
    return ResolveShards(new_config, data_, n);
  };

  // The old workers: all of epoch 0 (10 batches: 240 examples, 24 a step
  // over every worker) and 3 batches of epoch 1; then the checkpoint the
  // coordinator writes.
  std::map<int64_t, std::vector<int64_t>> seen;
  Checkpoint c;
  c.dir = "memory";
  c.step = 0;
  nlohmann::json steps = nlohmann::json::object();
  for (int w = 0; w < p.from; ++w) {
    auto s = MakeBatchSource(*old_o, w, data_, &*old_shards, nullptr);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const int n = 13;
    EXPECT_EQ(Draw(**s, n, &seen), 1);
    c.step = n;
    nlohmann::json state{{"step", n}, {"counters", {{"samples", 1}}}};
    (*s)->SaveState(state);
    c.files["worker-" + std::to_string(w) + ".json"] = state.dump();
    auto empty = EncodeSafetensors({});
    ASSERT_TRUE(empty.ok());
    c.files["worker-" + std::to_string(w) + ".safetensors"] = *empty;
    steps[std::to_string(w)] = n;
  }
  c.files["coordinator.json"] = nlohmann::json{{"worker_steps", steps}}.dump();
  ASSERT_EQ(*CheckpointWorkers(c), p.from);

  // The new workers: the rest of epoch 1 (168 examples, 7 steps of 24),
  // then all of epoch 2 (10 steps); worker 0 is checkpointed after 2
  // batches of the rest and resumed from there.
  for (int w = 0; w < p.to; ++w) {
    auto m = ResizedWorkerState(c, RunMode::kSync, p.from, p.to, w);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const nlohmann::json state =
        nlohmann::json::parse(m->payloads[0].ToString());
    EXPECT_EQ(state["worker"], w);
    if (w >= p.from) EXPECT_EQ(state["counters"].size(), 1u);  // a newcomer
    auto s =
        MakeBatchSource(*new_o, w, data_, &*new_shards, nullptr, shards_for);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->RestoreState(state).ok());
    EXPECT_GE((*s)->replan_examples(), 0);
    int rest = 7;
    if (w == 0) {
      EXPECT_EQ(Draw(**s, 2, &seen), 1);
      rest -= 2;
      nlohmann::json saved{{"step", 0}};
      (*s)->SaveState(saved);
      ASSERT_TRUE(saved.contains("rest")) << saved.dump();
      s = MakeBatchSource(*new_o, w, data_, &*new_shards, nullptr, shards_for);
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE((*s)->RestoreState(saved).ok());
    }
    EXPECT_EQ(Draw(**s, rest, &seen), 1) << "worker " << w;
    EXPECT_EQ(Draw(**s, 10, &seen), 2) << "worker " << w;
    std::map<int64_t, std::vector<int64_t>> after;
    EXPECT_EQ(Draw(**s, 1, &after), 3) << "worker " << w;
  }
  for (int64_t epoch : {0, 1, 2}) {
    std::map<int64_t, int> count;
    for (int64_t i : seen[epoch]) ++count[i];
    EXPECT_EQ(static_cast<int64_t>(count.size()), data_.size())
        << "epoch " << epoch;
    for (const auto& [id, n] : count)
      EXPECT_EQ(n, 1) << "example " << id << " in epoch " << epoch;
  }
}

// A second resize: the `to` workers draw `k` batches (inside their part
// of epoch 1, or past it into epoch 2 on their new shards), are
// checkpointed, and the run goes back to `from` workers. Every example is
// still trained on once per epoch.
void SaveInto(BatchSource& s, int w, int64_t step, Checkpoint* c,
              nlohmann::json* steps) {
  nlohmann::json state{{"step", step}, {"counters", {{"samples", 1}}}};
  s.SaveState(state);
  c->files["worker-" + std::to_string(w) + ".json"] = state.dump();
  c->files["worker-" + std::to_string(w) + ".safetensors"] =
      *EncodeSafetensors({});
  (*steps)[std::to_string(w)] = step;
  c->files["coordinator.json"] =
      nlohmann::json{{"worker_steps", *steps}}.dump();
  c->step = step;
}

TEST_P(EpochRemainderTest, ASecondResizeKeepsEveryEpochExact) {
  const ResizeCase& p = GetParam();
  std::map<int, Config> configs = {{p.from, ConfigFor(p.from)},
                                   {p.to, ConfigFor(p.to)}};
  std::map<int, ClusterRunOptions> opts;
  std::map<int, ShardSet> shards;
  for (auto& [n, config] : configs) {
    auto o = ClusterRunOptions::FromConfig(config);
    auto sh = ResolveShards(config, data_, n);
    ASSERT_TRUE(o.ok() && sh.ok());
    o->iterations = 1000;
    o->iterations_set = true;
    opts[n] = *o;
    shards[n] = *sh;
  }
  ShardsFor shards_for = [&](int n) {
    return ResolveShards(configs.at(p.from), data_, n);
  };
  // The sources of `n` workers resumed from `c` (written by `from`).
  auto resume = [&](const Checkpoint& c, int from, int n) {
    std::vector<std::unique_ptr<BatchSource>> out;
    for (int w = 0; w < n; ++w) {
      auto m = ResizedWorkerState(c, RunMode::kSync, from, n, w);
      EXPECT_TRUE(m.ok()) << m.status().ToString();
      auto s =
          MakeBatchSource(opts[n], w, data_, &shards[n], nullptr, shards_for);
      EXPECT_TRUE(s.ok());
      EXPECT_TRUE(
          (*s)->RestoreState(nlohmann::json::parse(m->payloads[0].ToString()))
              .ok());
      out.push_back(std::move(*s));
    }
    return out;
  };
  for (const int k : {2, 10}) {
    std::map<int64_t, std::vector<int64_t>> seen;
    Checkpoint first, second;
    nlohmann::json steps1 = nlohmann::json::object(), steps2 = steps1;
    for (int w = 0; w < p.from; ++w) {
      auto s =
          MakeBatchSource(opts[p.from], w, data_, &shards[p.from], nullptr);
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(Draw(**s, 13, &seen), 1);
      SaveInto(**s, w, 13, &first, &steps1);
    }
    auto middle = resume(first, p.from, p.to);
    for (int w = 0; w < p.to; ++w) {
      // 7 steps are left in epoch 1 after the old workers' 13.
      EXPECT_EQ(Draw(*middle[w], k, &seen), k <= 7 ? 1 : 2) << "k " << k;
      SaveInto(*middle[w], w, 13 + k, &second, &steps2);
    }
    auto last = resume(second, p.to, p.from);
    // What is left: of epoch 1 (k = 2: 5 steps), or of epoch 2 (k = 10:
    // 7 of its 10 steps), then one whole epoch more.
    const int64_t epoch = k <= 7 ? 1 : 2;
    const int left = k <= 7 ? 7 - k : 17 - k;
    for (int w = 0; w < p.from; ++w) {
      EXPECT_EQ(Draw(*last[w], left, &seen), epoch) << "k " << k;
      EXPECT_EQ(Draw(*last[w], 10, &seen), epoch + 1) << "k " << k;
    }
    for (int64_t e = 0; e <= epoch + 1; ++e) {
      std::map<int64_t, int> count;
      for (int64_t i : seen[e]) ++count[i];
      EXPECT_EQ(static_cast<int64_t>(count.size()), data_.size())
          << "epoch " << e << ", k " << k;
      for (const auto& [id, n] : count)
        EXPECT_EQ(n, 1) << "example " << id << " in epoch " << e;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Methods, EpochRemainderTest,
    ::testing::Values(ResizeCase{"mod", "shuffle", 4, 2},
                      ResizeCase{"stratified", "stratified", 2, 4},
                      ResizeCase{"random", "class-rotation", 2, 3},
                      ResizeCase{"stratified", "loss-aware", 4, 3}),
    [](const auto& info) {
      std::string name = info.param.method + "_" + info.param.sampler + "_" +
                         std::to_string(info.param.from) + "_to_" +
                         std::to_string(info.param.to);
      for (char& ch : name)
        if (ch == '-') ch = '_';
      return name;
    });

}  // namespace
}  // namespace strata
