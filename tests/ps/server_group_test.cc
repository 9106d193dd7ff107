// ServerGroup: one server node holding several ranges of its share of the
// keys (layer-wise pipelining). A gradient pushed range by range, in any
// order, is applied range by range exactly as a whole push would be; a
// push-pull brings each range's parameters back with its ack (async, and
// sync once the range's step closes); messages for keys that are not one
// of the node's ranges are refused, naming them; a checkpoint of the
// share can be restored with the share cut differently.
#include "ps/server_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ps/client.h"
#include "ps/protocol.h"
#include "ps/server.h"
#include "transport/inproc/transport.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kTimeout{20000};
constexpr int64_t kKeys = 1000;

// One server node (id 0) with its share cut into ranges of `bucket` keys,
// and `workers` clients (ids 100..) with the same layout.
class GroupFixture {
 public:
  // `k` > 0 (sync): k-of-n steps, leader-first as a pipelined cluster runs
  // them: the last range leads.
  GroupFixture(int64_t bucket, int workers, UpdatePolicy::Mode mode, int k = 0,
               bool defer_late = false) {
    layout_ = *KeyLayout::Bucketed(kKeys, 1, bucket);
    auto st = fabric_.NewTransport(0);
    EXPECT_TRUE(st.ok());
    EXPECT_TRUE((*st)->Bind("inproc://*").ok());
    server_rpc_ = std::make_unique<RpcEndpoint>(
        std::move(*st), [this](Message m) { group_->Handle(std::move(m)); });
    ServerOptions so;
    so.schedule.lr = 0.5;
    so.policy.mode = mode;
    so.policy.num_workers = workers;
    so.policy.updates_per_step = k > 0 ? k : workers;
    so.policy.defer_late = defer_late;
    const int lead = layout_.num_ranges() - 1;
    group_ = std::make_unique<ServerGroup>(so, *server_rpc_);
    group_->Configure(layout_.RangesOf(0), so.schedule,
                      k > 0 ? layout_.range(lead).begin : -1);
    for (int w = 0; w < workers; ++w) {
      auto wt = fabric_.NewTransport(100 + w);
      EXPECT_TRUE(wt.ok());
      EXPECT_TRUE((*wt)->Bind("inproc://*").ok());
      EXPECT_TRUE((*wt)->Connect(0, server_rpc_->transport().endpoint()).ok());
      EXPECT_TRUE(
          server_rpc_->transport().Connect(100 + w, (*wt)->endpoint()).ok());
      rpcs_.push_back(
          std::make_unique<RpcEndpoint>(std::move(*wt), [](Message) {}));
      clients_.push_back(std::make_unique<PsClient>(
          *rpcs_.back(), layout_, std::vector<NodeId>{0}, k > 0, lead));
    }
    server_rpc_->Start();
    for (auto& r : rpcs_) r->Start();
  }
  ~GroupFixture() {
    for (auto& r : rpcs_) r->Stop();
    server_rpc_->Stop();
  }

  std::vector<float> Pull(int w = 0) {
    std::vector<float> out(kKeys, -1.0f);
    auto p =
        clients_[static_cast<size_t>(w)]->Pull(out.data(), {})->Wait(kTimeout);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return out;
  }

  KeyLayout layout_;
  InProcFabric fabric_;
  std::unique_ptr<RpcEndpoint> server_rpc_;
  std::unique_ptr<ServerGroup> group_;
  std::vector<std::unique_ptr<RpcEndpoint>> rpcs_;
  std::vector<std::unique_ptr<PsClient>> clients_;
};

std::vector<float> Ramp(float scale, float offset) {
  std::vector<float> v(kKeys);
  for (int64_t i = 0; i < kKeys; ++i)
    v[static_cast<size_t>(i)] = offset + scale * static_cast<float>(i % 97);
  return v;
}

TEST(ServerGroupTest, RangesPushedOutOfOrderApplyLikeOneWholePush) {
  GroupFixture f(/*bucket=*/300, /*workers=*/1, UpdatePolicy::Mode::kAsync);
  ASSERT_EQ(f.group_->num_ranges(), 4);  // 250 keys each
  const std::vector<float> init = Ramp(0.01f, -0.3f);
  const std::vector<float> grad = Ramp(-0.002f, 0.05f);
  PsClient& c = *f.clients_[0];
  ASSERT_TRUE(c.PushInitial(init.data())->Wait(kTimeout).ok());
  // Last range first, as a backward pass produces them; each a push-pull.
  std::vector<float> dest(kKeys, -7.0f);
  auto h = c.BeginPush(std::vector<int64_t>(4, 0), dest.data());
  for (int r = 3; r >= 0; --r)
    EXPECT_TRUE(c.PushRange(*h, r, grad.data(), kTimeout).ok());
  auto pushed = h->Wait(kTimeout);
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
  EXPECT_EQ(pushed->versions, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(pushed->pulled_bytes, sizeof(float) * kKeys);
  // Exactly what the optimizer does to the whole vector in one push.
  std::vector<float> want(kKeys);
  for (size_t i = 0; i < want.size(); ++i) want[i] = init[i] - 0.5f * grad[i];
  EXPECT_EQ(dest, want);
  EXPECT_EQ(f.Pull(), want);
  // The node's statistics are its share's.
  nlohmann::json stats = nlohmann::json::parse(f.group_->StatsJson());
  EXPECT_EQ(stats["range"], (nlohmann::json{0, kKeys}));
  EXPECT_EQ(stats["ranges"], 4);
  EXPECT_EQ(stats["applied_gradients"], 1);
}

TEST(ServerGroupTest, SyncPushPullOfARangeAnswersWhenItsStepCloses) {
  GroupFixture f(/*bucket=*/500, /*workers=*/2, UpdatePolicy::Mode::kSync);
  const std::vector<float> init = Ramp(0.01f, 0.1f);
  const std::vector<float> g0 = Ramp(0.003f, -0.2f);
  const std::vector<float> g1 = Ramp(-0.001f, 0.4f);
  ASSERT_TRUE(f.clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  std::vector<float> d0(kKeys), d1(kKeys);
  auto h0 = f.clients_[0]->BeginPush({0, 0}, d0.data());
  auto h1 = f.clients_[1]->BeginPush({0, 0}, d1.data());
  EXPECT_TRUE(f.clients_[0]->PushRange(*h0, 1, g0.data(), kTimeout).ok());
  EXPECT_TRUE(f.clients_[0]->PushRange(*h0, 0, g0.data(), kTimeout).ok());
  // Worker 0's range 1 waits for worker 1's gradient of that range.
  EXPECT_TRUE(f.clients_[1]->PushRange(*h1, 1, g1.data(), kTimeout).ok());
  auto early = h0->Wait(milliseconds(200));
  EXPECT_EQ(early.status().code(), Status::Code::kDeadlineExceeded)
      << early.status().ToString();
  EXPECT_TRUE(f.clients_[1]->PushRange(*h1, 0, g1.data(), kTimeout).ok());
  auto a = h1->Wait(kTimeout);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->versions, (std::vector<int64_t>{1, 1}));
  std::vector<float> want(kKeys);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = init[i] - 0.5f * ((g0[i] + g1[i]) / 2.0f);
  EXPECT_EQ(d1, want);
  EXPECT_EQ(f.Pull(0), want);
}

// Sync k-of-n pushed range by range: the last range leads (it is pushed
// first and chooses the step), the others are pushed tagged with its choice
// and bring their parameters back when that step closes; a gradient the
// lead drops as late goes nowhere else.
TEST(ServerGroupTest, KOfNRangeByRangeFollowsTheLeadRangesChoice) {
  GroupFixture f(/*bucket=*/500, /*workers=*/3, UpdatePolicy::Mode::kSync,
                 /*k=*/2);
  ASSERT_EQ(f.layout_.num_ranges(), 2);
  const std::vector<float> init = Ramp(0.01f, 0.1f);
  const std::vector<float> g0 = Ramp(0.003f, -0.2f);
  const std::vector<float> g1 = Ramp(-0.001f, 0.4f);
  const std::vector<float> g2 = Ramp(0.002f, 0.9f);
  ASSERT_TRUE(f.clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  std::vector<float> d0(kKeys, -5.0f), d1(kKeys, -5.0f), d2(kKeys, -5.0f);
  auto h0 = f.clients_[0]->BeginPush({0, 0}, d0.data());
  auto h1 = f.clients_[1]->BeginPush({0, 0}, d1.data());
  auto h2 = f.clients_[2]->BeginPush({0, 0}, d2.data());
  // Worker 0's lead push waits for a second gradient to close the step.
  auto lead0 = std::async(std::launch::async, [&] {
    return f.clients_[0]->PushRange(*h0, 1, g0.data(), kTimeout);
  });
  EXPECT_EQ(lead0.wait_for(milliseconds(200)), std::future_status::timeout);
  // Worker 1 gives range 0 first: it waits for the lead's choice.
  EXPECT_TRUE(f.clients_[1]->PushRange(*h1, 0, g1.data(), kTimeout).ok());
  EXPECT_TRUE(f.clients_[1]->PushRange(*h1, 1, g1.data(), kTimeout).ok());
  Status first = lead0.get();
  ASSERT_TRUE(first.ok()) << first.ToString();
  // Worker 2 is late: the lead drops it, range 0 never sees it.
  EXPECT_TRUE(f.clients_[2]->PushRange(*h2, 1, g2.data(), kTimeout).ok());
  EXPECT_TRUE(f.clients_[2]->PushRange(*h2, 0, g2.data(), kTimeout).ok());
  auto late = h2->Wait(kTimeout);
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_EQ(late->dropped_ranges, 2);
  EXPECT_EQ(late->versions, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(late->pulled_bytes, 0u);
  EXPECT_EQ(d2, std::vector<float>(kKeys, -5.0f));
  // Range 0's step closes with worker 0's tagged gradient.
  auto b = h1->Wait(milliseconds(200));
  EXPECT_EQ(b.status().code(), Status::Code::kDeadlineExceeded)
      << b.status().ToString();
  EXPECT_TRUE(f.clients_[0]->PushRange(*h0, 0, g0.data(), kTimeout).ok());
  std::vector<float> want(kKeys);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = init[i] - 0.5f * ((g0[i] + g1[i]) / 2.0f);
  for (auto* h : {h0.get(), h1.get()}) {
    auto done = h->Wait(kTimeout);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(done->versions, (std::vector<int64_t>{1, 1}));
    EXPECT_EQ(done->dropped_ranges, 0);
    EXPECT_EQ(done->pulled_bytes, sizeof(float) * kKeys);
  }
  EXPECT_EQ(d0, want);
  EXPECT_EQ(d1, want);
  EXPECT_EQ(f.Pull(2), want);
  nlohmann::json stats = nlohmann::json::parse(f.group_->StatsJson());
  EXPECT_EQ(stats["dropped"], 1) << stats.dump();
  // A checkpoint keeps the lead's counters (range 0, a follower, has none).
  auto saved = f.group_->SaveState();
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  GroupFixture resumed(500, 3, UpdatePolicy::Mode::kSync, /*k=*/2);
  ASSERT_TRUE(resumed.group_->RestoreState(*saved).ok());
  stats = nlohmann::json::parse(resumed.group_->StatsJson());
  EXPECT_EQ(stats["dropped"], 1) << stats.dump();
  EXPECT_EQ(resumed.Pull(), want);
}

// Sync k-of-n around a checkpoint round (docs/design/checkpoints.md): workers
// waiting in the round leave the servers (kPushDone), so the steps of the
// ones still training close without them; once the round is over they
// rejoin (kPushRejoin) and are counted again. A rejoin from a worker that
// had not left, or a second one, counts nothing.
TEST(ServerGroupTest, KOfNWorkersPausedForARoundAreNotWaitedForTillTheyRejoin) {
  GroupFixture f(/*bucket=*/500, /*workers=*/4, UpdatePolicy::Mode::kSync,
                 /*k=*/3);
  ASSERT_EQ(f.layout_.num_ranges(), 2);
  const std::vector<float> init(kKeys, 1.0f);
  ASSERT_TRUE(f.clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  std::vector<std::vector<float>> dest(4, std::vector<float>(kKeys));
  // Worker w pushes the constant gradient w + 1 on parameters of `version`,
  // range by range (the lead, range 1, first), and waits for its step.
  auto push = [&](int w, int64_t version) {
    return std::async(std::launch::async, [&f, &dest, w, version] {
      PsClient& c = *f.clients_[static_cast<size_t>(w)];
      const std::vector<float> grad(kKeys, static_cast<float>(w + 1));
      auto h =
          c.BeginPush({version, version}, dest[static_cast<size_t>(w)].data());
      for (int r : {1, 0}) {
        Status st = c.PushRange(*h, r, grad.data(), kTimeout);
        if (!st.ok()) return Result<PushResult>(st);
      }
      return h->Wait(kTimeout);
    });
  };
  auto call = [](std::unique_ptr<PushHandle> h) {
    auto r = h->Wait(kTimeout);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
  };
  // Workers 1-3 wait in a round: worker 0's step closes with its gradient.
  for (int w : {1, 2, 3}) call(f.clients_[static_cast<size_t>(w)]->Leave());
  auto alone = push(0, 0).get();
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ(alone->versions, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(dest[0], std::vector<float>(kKeys, 1.0f - 0.5f * 1.0f));
  // Worker 3 rejoins (twice), worker 0 "rejoins" without having left: two
  // workers are counted, so a step takes min(k, 2) = 2 gradients.
  call(f.clients_[3]->Rejoin());
  call(f.clients_[3]->Rejoin());
  call(f.clients_[0]->Rejoin());
  auto a = push(0, 1);
  EXPECT_EQ(a.wait_for(milliseconds(200)), std::future_status::timeout);
  auto b = push(3, 1).get();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(a.get().ok());
  EXPECT_EQ(b->versions, (std::vector<int64_t>{2, 2}));
  const float after_two = 0.5f - 0.5f * ((1.0f + 4.0f) / 2.0f);
  EXPECT_EQ(dest[3], std::vector<float>(kKeys, after_two));
  // Workers 1 and 2 are back: steps take k = 3 gradients again.
  call(f.clients_[1]->Rejoin());
  call(f.clients_[2]->Rejoin());
  auto c0 = push(0, 2);
  auto c3 = push(3, 2);
  EXPECT_EQ(c3.wait_for(milliseconds(200)), std::future_status::timeout);
  auto c1 = push(1, 2).get();
  ASSERT_TRUE(c1.ok()) << c1.status().ToString();
  ASSERT_TRUE(c0.get().ok());
  ASSERT_TRUE(c3.get().ok());
  EXPECT_EQ(c1->versions, (std::vector<int64_t>{3, 3}));
  // The mean of (1 + 4 + 2) / 3 (to float tolerance: the server multiplies
  // the sum by 1/3).
  for (float v : f.Pull(2)) ASSERT_NEAR(v, after_two - 0.5f * 7.0f / 3, 1e-6);
  // Steps closed while fewer than k workers were counted are tail updates.
  nlohmann::json stats = nlohmann::json::parse(f.group_->StatsJson());
  EXPECT_EQ(stats["tail_updates"], 2) << stats.dump();
  EXPECT_EQ(stats["gradients_per_update"], (nlohmann::json{{"3", 1}}))
      << stats.dump();
}

// Three workers pushing range by range at once, k = 2, late gradients
// dropped or deferred: whatever order the gradients arrive in, every range
// takes the same two gradients at every step (each worker's gradient is one
// value on every key, so the ranges end equal only if they chose alike; the
// step sizes say 2 each time).
class KOfNRangesTest : public ::testing::TestWithParam<bool> {};

TEST_P(KOfNRangesTest, ChooseTheSameGradientsWhateverTheOrder) {
  constexpr int kWorkers = 3, kSteps = 30;
  GroupFixture f(/*bucket=*/300, kWorkers, UpdatePolicy::Mode::kSync,
                 /*k=*/2, /*defer_late=*/GetParam());
  const int ranges = f.layout_.num_ranges();
  ASSERT_EQ(ranges, 4);
  ASSERT_TRUE(f.clients_[0]
                  ->PushInitial(std::vector<float>(kKeys, 0.0f).data())
                  ->Wait(kTimeout)
                  .ok());
  std::vector<Status> errors(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      PsClient& c = *f.clients_[static_cast<size_t>(w)];
      // Worker w's gradient: w + 1 (1, 2 or 4 would also tell the pairs
      // apart; the means 1.5, 2 and 2.5 do).
      const std::vector<float> grad(kKeys, static_cast<float>(w + 1));
      std::vector<float> dest(kKeys);
      std::vector<int64_t> step(static_cast<size_t>(ranges), 0);
      for (int s = 0; s < kSteps && errors[w].ok(); ++s) {
        auto h = c.BeginPush(step, dest.data());
        // Backward order, except that worker 1 starts before the lead.
        for (int r = ranges - 1; r >= 0; --r) {
          const int range = w == 1 && r >= ranges - 2 ? 2 * ranges - 3 - r : r;
          Status st = c.PushRange(*h, range, grad.data(), kTimeout);
          if (!st.ok()) errors[w] = st;
        }
        auto done = h->Wait(kTimeout);
        if (!done.ok()) {
          errors[w] = done.status();
          break;
        }
        step = done->versions;
        if (done->dropped_ranges > 0) {
          auto p = c.Pull(dest.data(), step)->Wait(kTimeout);
          if (!p.ok()) errors[w] = p.status();
        }
      }
      auto left = c.Leave()->Wait(kTimeout);
      if (!left.ok() && errors[w].ok()) errors[w] = left.status();
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kWorkers; ++w)
    ASSERT_TRUE(errors[w].ok())
        << "worker " << w << ": " << errors[w].ToString();
  const std::vector<float> final_params = f.Pull();
  for (int64_t i = 1; i < kKeys; ++i)
    ASSERT_EQ(final_params[i], final_params[0]) << "key " << i;
  // The node's counters are the lead range's: every step while 2 or more
  // workers ran used exactly 2 gradients.
  nlohmann::json stats = nlohmann::json::parse(f.group_->StatsJson());
  EXPECT_FALSE(stats.value("follower", false)) << stats.dump();
  const int64_t updates = stats["updates"];
  for (const auto& [size, count] : stats["gradients_per_update"].items())
    EXPECT_EQ(size, "2") << stats.dump();
  EXPECT_GE(updates, kSteps / 2);
  EXPECT_EQ(stats.value(GetParam() ? "dropped" : "deferred", -1), 0);
}

INSTANTIATE_TEST_SUITE_P(ServerGroupTest, KOfNRangesTest,
                         ::testing::Values(false, true), [](const auto& info) {
                           return info.param ? "Defer" : "Drop";
                         });

TEST(ServerGroupTest, KeysThatAreNotOneOfItsRangesAreRefused) {
  GroupFixture f(/*bucket=*/400, /*workers=*/1, UpdatePolicy::Mode::kAsync);
  const std::vector<float> init = Ramp(0.01f, 0.0f);
  ASSERT_TRUE(f.clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  // [0, 500) spans two of its ranges ([0, 334), [334, 667), [667, 1000)).
  Message m;
  m.header.type = MessageType::kPullRequest;
  m.header.key_begin = 0;
  m.header.key_end = 500;
  auto reply = f.rpcs_[0]->Request(0, std::move(m))->Wait(kTimeout);
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("owns keys [0, 1000) in 3 ranges"),
            std::string::npos)
      << reply.status().message();
  EXPECT_NE(reply.status().message().find("[0, 500)"), std::string::npos);
}

TEST(ServerGroupTest, ACheckpointOfTheShareRestoresCutDifferently) {
  std::vector<Buffer> saved;
  std::vector<float> params;
  {
    GroupFixture f(/*bucket=*/300, /*workers=*/1, UpdatePolicy::Mode::kAsync);
    const std::vector<float> init = Ramp(0.01f, 0.0f);
    const std::vector<float> grad = Ramp(0.001f, 0.2f);
    PsClient& c = *f.clients_[0];
    ASSERT_TRUE(c.PushInitial(init.data())->Wait(kTimeout).ok());
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(c.Push(grad.data(), std::vector<int64_t>(4, step))
                      ->Wait(kTimeout)
                      .ok());
    }
    params = f.Pull();
    auto s = f.group_->SaveState();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    saved = std::move(*s);
    // One more push to range 2 alone: the ranges' versions now differ.
    auto h = c.BeginPush(std::vector<int64_t>(4, 3));
    EXPECT_TRUE(c.PushRange(*h, 2, grad.data(), kTimeout).ok());
    ASSERT_TRUE(h->Wait(kTimeout).ok());
    auto uneven = f.group_->SaveState();
    ASSERT_TRUE(uneven.ok());
    // The same cut restores an uneven state; another cut cannot.
    GroupFixture same(300, 1, UpdatePolicy::Mode::kAsync);
    EXPECT_TRUE(same.group_->RestoreState(*uneven).ok());
    GroupFixture other(600, 1, UpdatePolicy::Mode::kAsync);
    Status refused = other.group_->RestoreState(*uneven);
    EXPECT_EQ(refused.code(), Status::Code::kDataLoss);
    EXPECT_NE(refused.message().find("different versions"), std::string::npos)
        << refused.message();
  }
  for (int64_t bucket : {int64_t{0}, int64_t{300}, int64_t{150}}) {
    GroupFixture g(bucket, 1, UpdatePolicy::Mode::kAsync);
    Status restored = g.group_->RestoreState(saved);
    ASSERT_TRUE(restored.ok()) << bucket << ": " << restored.ToString();
    EXPECT_EQ(g.Pull(), params) << bucket;
    nlohmann::json stats = nlohmann::json::parse(g.group_->StatsJson());
    EXPECT_EQ(stats["updates"], 3) << bucket;
  }
}

// A damaged "ranges" entry in a saved state is refused, naming it, and
// leaves the node as it was.
TEST(ServerGroupTest, ADamagedStateIsRefusedAndChangesNothing) {
  GroupFixture f(/*bucket=*/300, /*workers=*/1, UpdatePolicy::Mode::kAsync);
  const std::vector<float> init = Ramp(0.01f, 0.0f);
  ASSERT_TRUE(f.clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  auto saved = f.group_->SaveState();
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  auto decoded = DecodeServerState(*saved, "test");
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ShardState changed = decoded->state;
  for (float& v : changed.params) v += 1.0f;
  const std::pair<std::string, std::string> cases[] = {
      {R"({"ranges": 7})", "\"ranges\" is not a list"},
      {R"({"ranges": [1, 2, 3]})", "bad entry 0"}};
  for (const auto& [extra, expected] : cases) {
    auto bad = EncodeServerState(decoded->range, changed, extra);
    ASSERT_TRUE(bad.ok());
    Status refused = f.group_->RestoreState(*bad);
    EXPECT_EQ(refused.code(), Status::Code::kDataLoss) << extra;
    EXPECT_NE(refused.message().find(expected), std::string::npos)
        << refused.message();
    EXPECT_EQ(f.Pull(), init) << extra;
  }
}

}  // namespace
}  // namespace strata
