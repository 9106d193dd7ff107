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
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ps/client.h"
#include "ps/protocol.h"
#include "ps/server.h"
#include "transport/inproc_transport.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kTimeout{20000};
constexpr int64_t kKeys = 1000;

// One server node (id 0) with its share cut into ranges of `bucket` keys,
// and `workers` clients (ids 100..) with the same layout.
class GroupFixture {
 public:
  GroupFixture(int64_t bucket, int workers, UpdatePolicy::Mode mode) {
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
    so.policy.updates_per_step = workers;
    group_ = std::make_unique<ServerGroup>(so, *server_rpc_);
    group_->Configure(layout_.RangesOf(0), so.schedule);
    for (int w = 0; w < workers; ++w) {
      auto wt = fabric_.NewTransport(100 + w);
      EXPECT_TRUE(wt.ok());
      EXPECT_TRUE((*wt)->Bind("inproc://*").ok());
      EXPECT_TRUE((*wt)->Connect(0, server_rpc_->transport().endpoint()).ok());
      EXPECT_TRUE(
          server_rpc_->transport().Connect(100 + w, (*wt)->endpoint()).ok());
      rpcs_.push_back(
          std::make_unique<RpcEndpoint>(std::move(*wt), [](Message) {}));
      clients_.push_back(std::make_unique<PsClient>(*rpcs_.back(), layout_,
                                                    std::vector<NodeId>{0}));
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
  for (int r = 3; r >= 0; --r) c.PushRange(*h, r, grad.data());
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
  f.clients_[0]->PushRange(*h0, 1, g0.data());
  f.clients_[0]->PushRange(*h0, 0, g0.data());
  // Worker 0's range 1 waits for worker 1's gradient of that range.
  f.clients_[1]->PushRange(*h1, 1, g1.data());
  auto early = h0->Wait(milliseconds(200));
  EXPECT_EQ(early.status().code(), Status::Code::kDeadlineExceeded)
      << early.status().ToString();
  f.clients_[1]->PushRange(*h1, 0, g1.data());
  auto a = h1->Wait(kTimeout);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->versions, (std::vector<int64_t>{1, 1}));
  std::vector<float> want(kKeys);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = init[i] - 0.5f * ((g0[i] + g1[i]) / 2.0f);
  EXPECT_EQ(d1, want);
  EXPECT_EQ(f.Pull(0), want);
}

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
    c.PushRange(*h, 2, grad.data());
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
