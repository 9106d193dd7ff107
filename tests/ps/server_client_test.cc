// ParameterServer and PsClient end to end over each transport: values
// survive the round trip exactly (several servers; ranges below and above
// the buffer pools' minimum, and ranges of several transport frames), pushes
// apply the optimizer, recycled buffers never leak one operation's bytes into
// another's, and bad pushes are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ps/client.h"
#include "ps/compression.h"
#include "ps/protocol.h"
#include "ps/server.h"
#include "transport/inproc/transport.h"
#include "transport/spin_wait.h"
#include "transport/ucx/transport.h"
#include "transport/zmq/transport.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kTimeout{20000};

// kInProcSpin: in-process with spin-then-block waiting on (cluster.spin_us).
// kUcx: UCX as a cluster makes it (shared memory and CMA on loopback);
// kUcxTcp: UCX with shared memory off (UcxOptions::shared_memory).
enum class Backend { kInProc, kInProcSpin, kTcp, kUcx, kUcxTcp };

std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kInProc       ? "inproc"
         : info.param == Backend::kInProcSpin ? "inproc_spin"
         : info.param == Backend::kTcp        ? "tcp"
         : info.param == Backend::kUcx        ? "ucx"
                                              : "ucx_tcp";
}

// S servers (node ids 0..S-1) and W workers (100..) wired directly.
class PsOverTransportTest : public ::testing::TestWithParam<Backend> {
 protected:
  // First member, so that it outlives the endpoints: 2 ms for kInProcSpin
  // (longer than most round trips here, so that they are received by
  // spinning), else none.
  ScopedSpinWait spin_{
      std::chrono::microseconds(GetParam() == Backend::kInProcSpin ? 2000 : 0)};

  void SetUp() override {
    if ((GetParam() == Backend::kUcx || GetParam() == Backend::kUcxTcp) &&
        !HaveUcx())
      GTEST_SKIP() << "this build has no UCX (libucx-dev not found)";
  }

  std::unique_ptr<Transport> NewTransport(NodeId id) {
    std::unique_ptr<Transport> t;
    if (GetParam() == Backend::kUcx || GetParam() == Backend::kUcxTcp) {
      UcxOptions options;
      options.shared_memory = GetParam() == Backend::kUcxTcp
                                  ? UcxOptions::SharedMemory::kOff
                                  : UcxOptions::SharedMemory::kAuto;
      auto r = NewUcxTransport(id, options);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      t = std::move(r).value();
      EXPECT_TRUE(t->Bind("ucx://127.0.0.1:*").ok());
    } else if (GetParam() == Backend::kInProc ||
               GetParam() == Backend::kInProcSpin) {
      auto r = fabric_.NewTransport(id);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      t = std::move(r).value();
      EXPECT_TRUE(t->Bind("inproc://*").ok());
    } else {
      auto r = NewZmqTransport(id, ZmqOptions{});
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      t = std::move(r).value();
      EXPECT_TRUE(t->Bind("tcp://127.0.0.1:*").ok());
    }
    return t;
  }

  // `lr` and plain SGD (no momentum) on every server, async mode.
  void Start(int64_t keys, int servers, int workers, double lr) {
    auto layout = KeyLayout::Balanced(keys, servers);
    ASSERT_TRUE(layout.ok());
    std::vector<std::unique_ptr<Transport>> st, wt;
    for (int s = 0; s < servers; ++s) st.push_back(NewTransport(s));
    for (int w = 0; w < workers; ++w) wt.push_back(NewTransport(100 + w));
    for (auto& w : wt) {
      for (auto& s : st) {
        ASSERT_TRUE(w->Connect(s->node_id(), s->endpoint()).ok());
        ASSERT_TRUE(s->Connect(w->node_id(), w->endpoint()).ok());
      }
    }
    std::vector<NodeId> ids;
    for (int s = 0; s < servers; ++s) {
      ServerOptions so;
      so.range = layout->range(s);
      so.schedule.lr = lr;
      so.policy.mode = UpdatePolicy::Mode::kAsync;
      so.policy.num_workers = workers;
      servers_.push_back(
          std::make_unique<ParameterServer>(so, std::move(st[s])));
      servers_.back()->Start();
      ids.push_back(s);
    }
    for (int w = 0; w < workers; ++w) {
      rpcs_.push_back(
          std::make_unique<RpcEndpoint>(std::move(wt[w]), [](Message) {}));
      rpcs_.back()->Start();
      clients_.push_back(
          std::make_unique<PsClient>(*rpcs_.back(), *layout, ids));
    }
  }

  void TearDown() override {
    for (auto& r : rpcs_) r->Stop();
    for (auto& s : servers_) s->Stop();
  }

  std::vector<float> Pull(int worker) {
    std::vector<float> out(clients_[worker]->layout().total(), -1.0f);
    auto pulled = clients_[worker]->Pull(out.data(), {})->Wait(kTimeout);
    EXPECT_TRUE(pulled.ok()) << pulled.status().ToString();
    if (pulled.ok()) {
      EXPECT_EQ(pulled->bytes, out.size() * sizeof(float));
    }
    return out;
  }

  InProcFabric fabric_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::unique_ptr<RpcEndpoint>> rpcs_;
  std::vector<std::unique_ptr<PsClient>> clients_;
};

std::vector<float> Ramp(int64_t n, float scale, float offset) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = offset + scale * static_cast<float>(i % 9973);
  }
  return v;
}

// Sizes: a small range (below the buffer pools' minimum) and ranges of
// 1.5 MiB and a few bytes (several transport frames).
TEST_P(PsOverTransportTest, InitialModelRoundTripsExactly) {
  for (const int64_t keys : {int64_t{1000}, int64_t{3 * (1 << 18) + 77}}) {
    SCOPED_TRACE(keys);
    Start(keys, 2, 1, 0.1);
    const std::vector<float> init = Ramp(keys, 0.25f, -3.0f);
    auto pushed = clients_[0]->PushInitial(init.data())->Wait(kTimeout);
    ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
    EXPECT_EQ(Pull(0), init);
    TearDown();
    servers_.clear();
    clients_.clear();
    rpcs_.clear();
  }
}

TEST_P(PsOverTransportTest, PushesApplySgdAndBuffersAreNotMixedUp) {
  // 2 servers of 1.5 MiB each (two transport frames per message), 2
  // workers.
  const int64_t keys = 3 * (1 << 18);
  Start(keys, 2, 2, 0.5);
  std::vector<float> expected = Ramp(keys, 1.0f, 0.0f);
  ASSERT_TRUE(clients_[0]->PushInitial(expected.data())->Wait(kTimeout).ok());
  // Every round pushes a different gradient from each worker; recycled push
  // and reply buffers must carry exactly this round's bytes. All values are
  // small integers and halves, so float arithmetic is exact.
  for (int round = 1; round <= 6; ++round) {
    for (int w = 0; w < 2; ++w) {
      const std::vector<float> grad =
          Ramp(keys, 0.0f, static_cast<float>(2 * round + w));
      auto pushed = clients_[w]->Push(grad.data(), {0, 0})->Wait(kTimeout);
      ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
      EXPECT_EQ(pushed->bytes, static_cast<uint64_t>(keys) * sizeof(float));
      for (float& p : expected) p -= 0.5f * static_cast<float>(2 * round + w);
    }
    for (int w = 0; w < 2; ++w) {
      const std::vector<float> got = Pull(w);
      ASSERT_EQ(got, expected) << "round " << round << " worker " << w;
    }
  }
}

TEST_P(PsOverTransportTest, AcksReportEachGradientsStaleness) {
  // Async: a gradient computed on version b and applied at version v has
  // staleness v - b; the push reports it (the largest over the ranges).
  const int64_t keys = 64;
  Start(keys, 2, 2, 0.1);
  const std::vector<float> init(keys, 0.0f), grad(keys, 1.0f);
  ASSERT_TRUE(clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  struct Case {
    int worker;
    std::vector<int64_t> base;
    int64_t staleness;
  };
  for (const Case& c :
       {Case{0, {0, 0}, 0}, Case{1, {0, 0}, 1}, Case{0, {0, 0}, 2},
        Case{1, {3, 3}, 0}, Case{0, {1, 3}, 3}}) {
    auto pushed = clients_[c.worker]->Push(grad.data(), c.base)->Wait(kTimeout);
    ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
    EXPECT_EQ(pushed->staleness, c.staleness)
        << "worker " << c.worker << " base " << c.base[0];
  }
  // The push-pull round trip reports it too.
  std::vector<float> params(keys);
  auto both = clients_[1]
                  ->PushPull(grad.data(), {4, 4}, params.data(), nullptr)
                  ->Wait(kTimeout);
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(both->staleness, 1);
}

TEST_P(PsOverTransportTest, PullWaitsForTheVersionItAsksFor) {
  const int64_t keys = 1 << 16;
  Start(keys, 1, 1, 1.0);
  const std::vector<float> init(keys, 5.0f);
  ASSERT_TRUE(clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  std::vector<float> out(keys, 0.0f);
  auto handle = clients_[0]->Pull(out.data(), {1});
  EXPECT_EQ(handle->Wait(milliseconds(200)).status().code(),
            Status::Code::kDeadlineExceeded);
  const std::vector<float> grad(keys, 1.0f);
  auto pushed = clients_[0]->Push(grad.data(), {0})->Wait(kTimeout);
  ASSERT_TRUE(pushed.ok());
  EXPECT_EQ(pushed->versions, std::vector<int64_t>{1});
  auto again = clients_[0]->Pull(out.data(), {1})->Wait(kTimeout);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->versions, std::vector<int64_t>{1});
  EXPECT_EQ(out, std::vector<float>(keys, 4.0f));
}

TEST_P(PsOverTransportTest, PullWaitResumesAfterATimeoutWithTheRangesLeft) {
  // Two servers; range 1 gets asked for a version it reaches only later. The
  // first Wait() copies range 0 and times out on range 1; the second picks
  // up range 1 without consuming range 0's reply twice.
  const int64_t keys = 3 * (1 << 18);  // 1.5 MiB per range: several frames
  Start(keys, 2, 1, 1.0);
  const std::vector<float> init(keys, 5.0f);
  ASSERT_TRUE(clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  std::vector<float> out(keys, 0.0f);
  auto handle = clients_[0]->Pull(out.data(), {0, 1});
  EXPECT_EQ(handle->Wait(milliseconds(200)).status().code(),
            Status::Code::kDeadlineExceeded);
  const std::vector<float> grad(keys, 1.0f);
  ASSERT_TRUE(clients_[0]->Push(grad.data(), {0, 0})->Wait(kTimeout).ok());
  auto pulled = handle->Wait(kTimeout);
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  EXPECT_EQ(pulled->versions, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(pulled->bytes, keys * sizeof(float));
  const int64_t half = clients_[0]->layout().range(1).begin;
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + half),
            std::vector<float>(half, 5.0f));
  EXPECT_EQ(std::vector<float>(out.begin() + half, out.end()),
            std::vector<float>(keys - half, 4.0f));
}

// cluster.layer_wait: WaitFor(k) returns once the first k ranges are in
// the destination, while a later range is still to come (here: held back
// by the version it asks for), which is what lets the forward pass start.
// The rest arrives after it, and Wait() then has every range, each once.
TEST_P(PsOverTransportTest, PullWaitForHasTheFirstRangesWhileOthersAreToCome) {
  const int64_t keys = 3 * (1 << 18);  // 1.5 MiB per range: several frames
  Start(keys, 2, 1, 1.0);
  const std::vector<float> init(keys, 5.0f);
  ASSERT_TRUE(clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  std::vector<float> out(keys, 0.0f);
  auto handle = clients_[0]->Pull(out.data(), {0, 1});
  ASSERT_EQ(handle->num_ranges(), 2u);
  ASSERT_TRUE(handle->WaitFor(1, kTimeout).ok());
  const int64_t half = clients_[0]->layout().range(1).begin;
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + half),
            std::vector<float>(half, 5.0f));
  EXPECT_EQ(handle->WaitFor(2, milliseconds(200)).code(),
            Status::Code::kDeadlineExceeded);
  EXPECT_EQ(std::vector<float>(out.begin() + half, out.end()),
            std::vector<float>(keys - half, 0.0f));  // nothing of range 1 yet
  const std::vector<float> grad(keys, 1.0f);
  ASSERT_TRUE(clients_[0]->Push(grad.data(), {0, 0})->Wait(kTimeout).ok());
  ASSERT_TRUE(handle->WaitFor(2, kTimeout).ok());
  auto pulled = handle->Wait(milliseconds(0));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  EXPECT_EQ(pulled->versions, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(pulled->bytes, keys * sizeof(float));
  EXPECT_EQ(std::vector<float>(out.begin() + half, out.end()),
            std::vector<float>(keys - half, 4.0f));
}

TEST_P(PsOverTransportTest, PullReplyFollowsTheProtocol) {
  // Asked directly over RPC: one payload holding the whole range (5 MiB and
  // a few bytes, several transport frames), with its version and keys.
  const int64_t keys = (5 << 20) / 4 + 3;
  Start(keys, 1, 1, 0.1);
  const std::vector<float> init = Ramp(keys, 0.5f, 1.0f);
  ASSERT_TRUE(clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  Message req;
  req.header.type = MessageType::kPullRequest;
  req.header.key_begin = 0;
  req.header.key_end = keys;
  auto reply = rpcs_[0]->Request(0, std::move(req))->Wait(kTimeout);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->header.type, MessageType::kPullReply);
  EXPECT_EQ(reply->header.clock, 0);
  EXPECT_EQ(reply->header.key_begin, 0);
  EXPECT_EQ(reply->header.key_end, keys);
  ASSERT_EQ(reply->payloads.size(), 1u);
  const Buffer& b = reply->payloads[0];
  EXPECT_EQ(std::vector<float>(b.floats(), b.floats() + b.num_floats()), init);
}

TEST_P(PsOverTransportTest, PushOfTheWrongSizeIsRefusedWithAReason) {
  Start(1000, 1, 1, 0.1);
  const std::vector<float> init(1000, 1.0f);
  ASSERT_TRUE(clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  // A client that believes the model is larger than the server's range.
  auto wrong = KeyLayout::Balanced(1001, 1);
  ASSERT_TRUE(wrong.ok());
  PsClient confused(*rpcs_[0], *wrong, {0});
  const std::vector<float> grad(1001, 1.0f);
  auto pushed = confused.Push(grad.data(), {0})->Wait(kTimeout);
  ASSERT_FALSE(pushed.ok());
  EXPECT_NE(pushed.status().message().find("owns keys [0, 1000)"),
            std::string::npos)
      << pushed.status().ToString();
  // The server is still serving, unchanged.
  EXPECT_EQ(Pull(0), init);
}

// A restarted server may get a push twice (a worker's resend, and what
// ZeroMQ queued for it): the second copy, same sender and request id, is
// dropped.
TEST_P(PsOverTransportTest, APushArrivingTwiceIsAppliedOnce) {
  Start(100, 1, 1, 0.5);
  const std::vector<float> init(100, 1.0f);
  ASSERT_TRUE(clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  const std::vector<float> grad(100, 1.0f);
  for (int copy = 0; copy < 2; ++copy) {
    Message m;
    m.header.type = MessageType::kPush;
    m.header.key_begin = 0;
    m.header.key_end = 100;
    m.header.clock = 0;  // base version
    m.header.request_id = 4242;
    m.payloads.push_back(Buffer::CopyOf(grad));
    ASSERT_TRUE(rpcs_[0]->transport().Send(0, std::move(m)).ok());
  }
  // A different request after them: once it is applied, both copies were
  // handled (one connection delivers in order).
  ASSERT_TRUE(clients_[0]->Push(grad.data(), {1})->Wait(kTimeout).ok());
  std::vector<float> out(100);
  auto pulled = clients_[0]->Pull(out.data(), {})->Wait(kTimeout);
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  EXPECT_EQ(pulled->versions[0], 2);              // the copy was not applied
  EXPECT_EQ(out, std::vector<float>(100, 0.0f));  // 1 - 0.5 - 0.5
}

// cluster.compression: the server applies exactly the decoded gradient,
// the push counts the encoded bytes, and int8 carries what it dropped from
// one push into the next (error feedback, per range).
TEST_P(PsOverTransportTest, CompressedPushesApplyTheDecodedGradient) {
  for (const Compression c : {Compression::kFp16, Compression::kInt8}) {
    SCOPED_TRACE(CompressionName(c));
    const int64_t keys = 3 * (1 << 18) + 77;  // several frames per range
    Start(keys, 2, 1, 0.5);
    clients_[0]->SetCompression(c);
    const KeyLayout& layout = clients_[0]->layout();
    std::vector<float> expected = Ramp(keys, 0.25f, -3.0f);
    ASSERT_TRUE(clients_[0]->PushInitial(expected.data())->Wait(kTimeout).ok());
    EXPECT_EQ(Pull(0), expected);  // the initial model is never compressed
    std::vector<ErrorFeedback> feedback;
    for (int s = 0; s < 2; ++s)
      feedback.emplace_back(c, static_cast<size_t>(layout.range(s).size()));
    for (int round = 0; round < 3; ++round) {
      // Mostly small values next to a large one per block: int8 zeroes
      // most of them, so the residual matters from the second push on.
      std::vector<float> grad = Ramp(keys, 1e-4f, 1e-3f * (round + 1));
      for (size_t i = 0; i < grad.size(); i += 300) grad[i] = 40.0f;
      auto pushed =
          clients_[0]->Push(grad.data(), {round, round})->Wait(kTimeout);
      ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
      uint64_t bytes = 0;
      for (int s = 0; s < 2; ++s) {
        const KeyRange& r = layout.range(s);
        const size_t n = static_cast<size_t>(r.size());
        bytes += CompressedBytes(c, n);
        std::vector<uint8_t> encoded(CompressedBytes(c, n));
        if (c == Compression::kInt8) {
          feedback[s].Encode(grad.data() + r.begin, encoded.data());
        } else {
          Encode(c, grad.data() + r.begin, n, encoded.data());
        }
        std::vector<float> decoded(n);
        Decode(c, encoded.data(), n, decoded.data());
        for (size_t i = 0; i < n; ++i)
          expected[r.begin + i] -= 0.5f * decoded[i];
      }
      EXPECT_EQ(pushed->bytes, bytes);
      ASSERT_EQ(Pull(0), expected) << "round " << round;
    }
    const std::vector<std::vector<float>> residuals = clients_[0]->Residuals();
    if (c == Compression::kInt8) {
      ASSERT_EQ(residuals.size(), 2u);
      EXPECT_EQ(residuals[1], feedback[1].residual());
    } else {
      EXPECT_TRUE(residuals.empty());
    }
    TearDown();
    servers_.clear();
    clients_.clear();
    rpcs_.clear();
  }
}

// cluster.compress_pulls: after a first full pull, each pull brings the
// difference to the worker's copy, encoded; the server mirrors that copy,
// so the worker holds exactly copy + decode(encode(params - copy)) (one
// codec error, not a sum of them). A reply that never arrives makes the
// next pull a full one. Push-pulls follow the same rule.
TEST_P(PsOverTransportTest, CompressedPullsBringTheDifferenceToTheWorkersCopy) {
  const int64_t keys = 3 * (1 << 18) + 77;
  Start(keys, 2, 2, 0.5);
  PsClient& worker = *clients_[0];
  worker.SetCompression(Compression::kInt8, /*pulls=*/true);
  const KeyLayout& layout = worker.layout();
  const std::vector<float> init = Ramp(keys, 0.25f, -3.0f);
  ASSERT_TRUE(clients_[1]->PushInitial(init.data())->Wait(kTimeout).ok());
  std::vector<float> held(keys, 0.0f);
  auto first = worker.Pull(held.data(), {})->Wait(kTimeout);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->bytes, keys * sizeof(float));  // nothing to differ from
  EXPECT_EQ(held, init);
  const uint64_t delta_bytes =
      CompressedBytes(Compression::kInt8, layout.range(0).size()) +
      CompressedBytes(Compression::kInt8, layout.range(1).size());
  // What the worker must hold after a delta pull of `exact`.
  const auto apply_delta = [&](const std::vector<float>& exact) {
    std::vector<float> want = held;
    for (int s = 0; s < 2; ++s) {
      const KeyRange& r = layout.range(s);
      const size_t n = static_cast<size_t>(r.size());
      std::vector<float> d(n), back(n);
      for (size_t i = 0; i < n; ++i)
        d[i] = exact[r.begin + i] - held[r.begin + i];
      std::vector<uint8_t> enc(CompressedBytes(Compression::kInt8, n));
      Encode(Compression::kInt8, d.data(), n, enc.data());
      Decode(Compression::kInt8, enc.data(), n, back.data());
      for (size_t i = 0; i < n; ++i) want[r.begin + i] += back[i];
    }
    return want;
  };
  for (int round = 0; round < 3; ++round) {
    // Another (uncompressed) worker moves the model.
    const std::vector<float> grad = Ramp(keys, 1e-3f, 0.1f * (round + 1));
    ASSERT_TRUE(
        clients_[1]->Push(grad.data(), {round, round})->Wait(kTimeout).ok());
    const std::vector<float> exact = Pull(1);
    const std::vector<float> want = apply_delta(exact);
    float largest = 0;  // the largest difference to the worker's copy
    for (size_t i = 0; i < held.size(); ++i)
      largest = std::max(largest, std::abs(exact[i] - held[i]));
    auto pulled = worker.Pull(held.data(), {})->Wait(kTimeout);
    ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
    EXPECT_EQ(pulled->bytes, delta_bytes);
    ASSERT_EQ(held, want) << "round " << round;
    // Lossy, by at most one codec error: half an int8 step of the largest
    // difference.
    EXPECT_NE(held, exact);
    float worst = 0;
    for (size_t i = 0; i < held.size(); ++i)
      worst = std::max(worst, std::abs(held[i] - exact[i]));
    EXPECT_LE(worst, 1.001f * largest / 254);
  }
  {
    // A pull whose reply is dropped unread: the server's mirror moved on,
    // so the next pull is a full one and exact again.
    std::vector<float> lost(keys);
    auto dropped = worker.Pull(lost.data(), {});
    ASSERT_TRUE(clients_[1]->Pull(lost.data(), {})->Wait(kTimeout).ok());
  }
  std::this_thread::sleep_for(milliseconds(100));
  auto full = worker.Pull(held.data(), {})->Wait(kTimeout);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->bytes, keys * sizeof(float));
  EXPECT_EQ(held, Pull(1));
  // Push-pull: the ack's parameters are a difference too.
  const std::vector<float> grad(keys, 0.5f);
  std::vector<float> exact_after = Pull(1);
  for (float& p : exact_after) p -= 0.25f;
  const std::vector<float> want = apply_delta(exact_after);
  auto both = worker.PushPull(grad.data(), {3, 3}, held.data(), nullptr)
                  ->Wait(kTimeout);
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(both->pulled_bytes, delta_bytes);
  EXPECT_EQ(held, want);
}

TEST_P(PsOverTransportTest, AMalformedCompressedPushIsRefusedWithAReason) {
  Start(1000, 1, 1, 0.5);
  const std::vector<float> init(1000, 1.0f);
  ASSERT_TRUE(clients_[0]->PushInitial(init.data())->Wait(kTimeout).ok());
  struct Case {
    uint32_t flags;
    size_t bytes;
    const char* says;
  };
  for (const Case& c :
       {Case{kPushInt8, 1000, "1016 expected, int8"},
        Case{kPushFp16, 4000, "2000 expected, fp16"},
        Case{kPushFp16 | kPushInt8, 2000, "both compression flags"},
        Case{kPushInit | kPushInt8, CompressedBytes(Compression::kInt8, 1000),
             "initial model is never compressed"}}) {
    Message m;
    m.header.type = MessageType::kPush;
    m.header.flags = c.flags;
    m.header.key_begin = 0;
    m.header.key_end = 1000;
    m.payloads.push_back(Buffer::CopyOf(std::vector<uint8_t>(c.bytes, 7)));
    auto reply = rpcs_[0]->Request(0, std::move(m))->Wait(kTimeout);
    ASSERT_FALSE(reply.ok()) << c.says;
    EXPECT_NE(reply.status().message().find(c.says), std::string::npos)
        << reply.status().ToString();
  }
  EXPECT_EQ(Pull(0), init);  // nothing was applied
}

TEST_P(PsOverTransportTest, ResidualsOfTheWrongShapeAreRefused) {
  Start(1000, 2, 1, 0.5);
  clients_[0]->SetCompression(Compression::kInt8);
  EXPECT_FALSE(clients_[0]->RestoreResiduals({std::vector<float>(500)}).ok());
  const Status st = clients_[0]->RestoreResiduals(
      {std::vector<float>(500), std::vector<float>(499)});
  EXPECT_NE(st.message().find("residual 1 has 499 values; range 1 has 500"),
            std::string::npos)
      << st.ToString();
  EXPECT_TRUE(clients_[0]
                  ->RestoreResiduals(
                      {std::vector<float>(500, 1.0f), std::vector<float>(500)})
                  .ok());
  EXPECT_EQ(clients_[0]->Residuals()[0], std::vector<float>(500, 1.0f));
}

INSTANTIATE_TEST_SUITE_P(All, PsOverTransportTest,
                         ::testing::Values(Backend::kInProc,
                                           Backend::kInProcSpin, Backend::kTcp,
                                           Backend::kUcx, Backend::kUcxTcp),
                         BackendName);

}  // namespace
}  // namespace strata
