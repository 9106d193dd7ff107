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
  // checkpoint.resume_workers of the resize from -> to (a drain: "0,2,3").
  std::string kept = "";
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
    auto m = ResizedWorkerState(c, RunMode::kSync, p.from, p.to, w,
                                *ResumeWorkers(p.kept, p.from, p.to));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const nlohmann::json state =
        nlohmann::json::parse(m->payloads[0].ToString());
    EXPECT_EQ(state["worker"], w);
    if (w >= p.from) {
      EXPECT_EQ(state["counters"].size(), 1u);  // a newcomer
    }
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
      const std::string kept = from == p.from ? p.kept : "";
      auto m = ResizedWorkerState(c, RunMode::kSync, from, n, w,
                                  *ResumeWorkers(kept, from, n));
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

// checkpoint.resume_workers: which old workers go on, checked.
TEST(ResumeWorkersTest, NamesTheOnesThatGoOnOrSaysWhatIsWrong) {
  EXPECT_EQ(*ResumeWorkers("", 4, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(*ResumeWorkers("", 2, 4), (std::vector<int>{0, 1}));
  EXPECT_EQ(*ResumeWorkers("3,0,2", 4, 3), (std::vector<int>{3, 0, 2}));
  for (const auto& [text, wrong] :
       std::vector<std::pair<std::string, std::string>>{
           {"0,4,1", "'4' is not a worker of the checkpoint's 4"},
           {"0,x,1", "'x' is not a worker"},
           {"0,,1", "'' is not a worker"},
           {"0,2,2", "worker 2 is named twice"},
           {"0,2", "2 workers named; a resume of 4 workers on 3 keeps 3"}}) {
    auto r = ResumeWorkers(text, 4, 3);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(wrong), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("checkpoint.resume_workers"),
              std::string::npos);
  }
}

// A drain: worker 1 of 4 leaves; the new worker 1 continues old worker 2
// (its model, optimizer and residuals), and a newcomer of a growth from
// the drained set starts from a kept worker's model without residuals.
TEST(ResumeWorkersTest, EachNewWorkerContinuesTheOldOneItIsGiven) {
  Checkpoint c;
  c.dir = "memory";
  c.step = 7;
  nlohmann::json steps = nlohmann::json::object();
  for (int w = 0; w < 4; ++w) {
    const float v = static_cast<float>(w);
    c.files["worker-" + std::to_string(w) + ".json"] =
        nlohmann::json{{"step", 7}, {"counters", {{"samples", 10 + w}}}}.dump();
    c.files["worker-" + std::to_string(w) + ".safetensors"] =
        *EncodeSafetensors({SafeTensor::Floats("model/w", {1}, &v),
                            SafeTensor::Floats("exchange/residual", {1}, &v)});
    steps[std::to_string(w)] = 7;
  }
  c.files["coordinator.json"] = nlohmann::json{{"worker_steps", steps}}.dump();
  auto tensors = [&](int to, int index, const std::string& kept) {
    auto m = ResizedWorkerState(c, RunMode::kLocalSgd, 4, to, index,
                                *ResumeWorkers(kept, 4, to));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    auto file = DecodeSafetensors(m->payloads[1].ToString(), "reply");
    EXPECT_TRUE(file.ok());
    return *file;
  };
  const SafetensorsFile kept = tensors(3, 1, "0,2,3");
  ASSERT_NE(kept.Find("model/w"), nullptr);
  EXPECT_EQ(kept.Find("model/w")->ToFloats()[0], 2.0f);
  ASSERT_NE(kept.Find("exchange/residual"), nullptr);
  EXPECT_EQ(kept.Find("exchange/residual")->ToFloats()[0], 2.0f);
  // The control: without the list, new worker 1 is old worker 1.
  EXPECT_EQ(tensors(3, 1, "").Find("model/w")->ToFloats()[0], 1.0f);
  // Growth to 6 keeps all four (in the order named); newcomer 5 takes
  // kept[5 mod 4] = old worker 0's model, and no residuals.
  const SafetensorsFile newcomer = tensors(6, 5, "3,0,1,2");
  EXPECT_EQ(newcomer.Find("model/w")->ToFloats()[0], 0.0f);
  EXPECT_EQ(newcomer.Find("exchange/residual"), nullptr);
  // Free modes: the old workers' clocks differ (7, 5, 9, 5); a newcomer
  // starts at the slowest clock, from a worker there (1 or 3, by turns).
  for (int w : {0, 1, 2, 3}) {
    const int step = std::vector<int>{7, 5, 9, 5}[w];
    c.files["worker-" + std::to_string(w) + ".json"] = nlohmann::json{
        {"step", step},
        {"counters", {{"samples", 10 + w}}}}.dump();
  }
  for (const auto& [index, source] :
       std::vector<std::pair<int, int>>{{4, 1}, {5, 3}}) {
    auto m = ResizedWorkerState(c, RunMode::kSsp, 4, 6, index,
                                *ResumeWorkers("", 4, 6));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const nlohmann::json state =
        nlohmann::json::parse(m->payloads[0].ToString());
    EXPECT_EQ(state["step"], 5) << "newcomer " << index;
    EXPECT_EQ(state["counters"]["iterations"], 5);
    auto file = DecodeSafetensors(m->payloads[1].ToString(), "reply");
    ASSERT_TRUE(file.ok());
    EXPECT_EQ(file->Find("model/w")->ToFloats()[0], static_cast<float>(source))
        << "newcomer " << index;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Methods, EpochRemainderTest,
    ::testing::Values(ResizeCase{"mod", "shuffle", 4, 2},
                      ResizeCase{"stratified", "stratified", 2, 4},
                      ResizeCase{"random", "class-rotation", 2, 3},
                      ResizeCase{"stratified", "loss-aware", 4, 3},
                      // Worker 1 drained: 0, 2 and 3 go on as 0, 1, 2.
                      ResizeCase{"stratified", "shuffle", 4, 3, "0,2,3"}),
    [](const auto& info) {
      std::string name = info.param.method + "_" + info.param.sampler + "_" +
                         std::to_string(info.param.from) + "_to_" +
                         std::to_string(info.param.to) +
                         (info.param.kept.empty() ? "" : "_drain");
      for (char& ch : name)
        if (ch == '-') ch = '_';
      return name;
    });

}  // namespace
}  // namespace strata
