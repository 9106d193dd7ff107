// Gradients that arrive in pieces (the frames of a network message) give
// exactly the update of the joined gradient, and pulls share snapshots.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "ps/optimizer.h"
#include "ps/protocol.h"
#include "ps/shard.h"

namespace strata {
namespace {

std::vector<float> Values(int64_t n, float scale, float offset) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = offset + scale * static_cast<float>(i % 97);
  }
  return v;
}

// Uneven pieces covering [0, n): sizes 1, 7, 30, ... then the rest.
std::vector<FloatPiece> Split(const std::vector<float>& g) {
  std::vector<FloatPiece> pieces;
  const int64_t n = static_cast<int64_t>(g.size());
  int64_t at = 0;
  for (int64_t size : {int64_t{1}, int64_t{7}, int64_t{30}, int64_t{100}}) {
    if (at + size > n) break;
    pieces.push_back({at, g.data() + at, size});
    at += size;
  }
  pieces.push_back({at, g.data() + at, n - at});
  return pieces;
}

TEST(FloatPiecesTest, EveryOptimizerGivesTheSameStepOnPieces) {
  const int64_t n = 500;
  std::vector<OptimizerOptions> variants(4);
  variants[1].momentum = 0.9;
  variants[1].weight_decay = 1e-3;
  variants[2].momentum = 0.9;
  variants[2].nesterov = true;
  variants[3].kind = OptimizerOptions::Kind::kAdam;
  variants[3].weight_decay = 1e-2;
  for (size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE(v);
    auto whole = MakeOptimizer(variants[v], n);
    auto pieced = MakeOptimizer(variants[v], n);
    std::vector<float> a = Values(n, 0.01f, 1.0f), b = a;
    for (int step = 0; step < 4; ++step) {  // momentum/moments carry over
      const std::vector<float> g = Values(n, 0.003f * (step + 1), -0.1f);
      whole->Step(a.data(), g.data(), 0.05);
      const std::vector<FloatPiece> pieces = Split(g);
      pieced->StepPieces(b.data(), pieces.data(), pieces.size(), 0.05);
      ASSERT_EQ(a, b) << "step " << step;  // bit for bit
    }
  }
}

// SGD with momentum is applied in one pass over the parameters, gradient
// and buffer; it must give bit for bit what LibTorch's formula gives when
// computed pass by pass: d = g + wd * p; b = d on the first step, else
// mu * b + d; p -= lr * b (Nesterov: p -= lr * (d + mu * b)).
TEST(FloatPiecesTest, MomentumSgdMatchesTheFormulaPassByPass) {
  const int64_t n = 1000;
  for (const bool nesterov : {false, true}) {
    for (const float wd : {0.0f, 1e-3f}) {
      SCOPED_TRACE(::testing::Message()
                   << "nesterov " << nesterov << " wd " << wd);
      OptimizerOptions o;
      o.momentum = 0.9;
      o.nesterov = nesterov;
      o.weight_decay = wd;
      auto opt = MakeOptimizer(o, n);
      std::vector<float> p = Values(n, 0.01f, 1.0f), ref = p;
      std::vector<float> buf(n, 0.0f);
      const float mu = 0.9f, lr = 0.05f;
      for (int step = 0; step < 5; ++step) {
        const std::vector<float> g = Values(n, 0.003f * (step + 1), -0.1f);
        const std::vector<FloatPiece> pieces = Split(g);
        opt->StepPieces(p.data(), pieces.data(), pieces.size(), lr);
        std::vector<float> d(n);
        for (int64_t i = 0; i < n; ++i) d[i] = g[i] + wd * ref[i];
        for (int64_t i = 0; i < n; ++i) {
          buf[i] = step == 0 ? d[i] : mu * buf[i] + d[i];
        }
        for (int64_t i = 0; i < n; ++i) {
          ref[i] -= nesterov ? lr * (d[i] + mu * buf[i]) : lr * buf[i];
        }
        ASSERT_EQ(p, ref) << "step " << step;  // bit for bit
      }
    }
  }
}

TEST(FloatPiecesTest, ShardPushOfPiecesEqualsPushOfTheWhole) {
  for (auto mode : {UpdatePolicy::Mode::kAsync, UpdatePolicy::Mode::kSync}) {
    UpdatePolicy p;
    p.mode = mode;
    p.num_workers = 2;
    p.updates_per_step = 2;
    LrSchedule s;
    s.lr = 0.1;
    OptimizerOptions o;
    o.momentum = 0.9;
    const int64_t n = 300;
    ParameterShard whole({0, n}, Values(n, 0.5f, 0.0f), o, s, p);
    ParameterShard pieced({0, n}, Values(n, 0.5f, 0.0f), o, s, p);
    for (int i = 0; i < 4; ++i) {
      const std::vector<float> g = Values(n, 0.01f * (i + 1), 0.2f);
      const int64_t base = whole.version();
      auto a = whole.Push(g.data(), base);
      const std::vector<FloatPiece> pieces = Split(g);
      auto b = pieced.Push(pieces.data(), pieces.size(), base);
      EXPECT_EQ(a.state, b.state);
      EXPECT_EQ(a.version, b.version);
    }
    std::vector<float> x(n), y(n);
    ASSERT_EQ(whole.ReadIfAtLeast(0, x.data()),
              pieced.ReadIfAtLeast(0, y.data()));
    EXPECT_EQ(x, y);
    EXPECT_GT(whole.version(), 0);
  }
}

TEST(FloatPiecesTest, PayloadPiecesAreViewsUnlessTheyCutAFloat) {
  std::vector<Buffer> frames;
  frames.push_back(Buffer::CopyOf(std::vector<float>{1, 2, 3}));
  frames.push_back(Buffer::CopyOf(std::vector<float>{4, 5}));
  const uint8_t* second = frames[1].data();
  Buffer gathered = Buffer::Gather(std::move(frames));
  std::vector<FloatPiece> pieces = FloatPieces(gathered);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[1].offset, 3);
  EXPECT_EQ(pieces[1].size, 2);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(pieces[1].data), second);
  EXPECT_TRUE(gathered.gathered());  // not joined

  // A piece boundary inside a float (a sender's odd framing): joined first.
  const std::vector<float> values{1.5f, 2.5f, 3.5f};
  std::vector<Buffer> odd;
  const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
  odd.push_back(Buffer::CopyOf(bytes, 6));
  odd.push_back(Buffer::CopyOf(bytes + 6, 6));
  Buffer cut = Buffer::Gather(std::move(odd));
  pieces = FloatPieces(cut);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].offset, 0);
  EXPECT_EQ(pieces[0].size, 3);
  EXPECT_EQ(std::vector<float>(pieces[0].data, pieces[0].data + 3), values);
}

TEST(ShardSnapshotTest,
     SnapshotsAreSharedAndCopiedOnlyWhenAnUpdateFindsThemHeld) {
  UpdatePolicy p;
  LrSchedule s;
  s.lr = 1.0;
  ParameterShard shard({0, 4}, {1, 2, 3, 4}, OptimizerOptions{}, s, p);
  int64_t v1 = -1, v2 = -1;
  auto a = shard.SnapshotIfAtLeast(0, &v1);
  auto b = shard.SnapshotIfAtLeast(0, &v2);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a.get(), b.get());  // one copy serves both
  EXPECT_EQ(v1, 0);
  EXPECT_EQ(*a, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(shard.SnapshotIfAtLeast(1, &v2), nullptr);
  const float g[4] = {1, 1, 1, 1};
  shard.Push(g, 0);
  auto c = shard.SnapshotIfAtLeast(1, &v2);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(v2, 1);
  // The old snapshot is still held: it is not overwritten.
  EXPECT_NE(c.get(), a.get());
  EXPECT_EQ(*a, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(*c, (std::vector<float>{0, 1, 2, 3}));
  // Overwrite invalidates the snapshot too.
  ASSERT_TRUE(shard.Overwrite(g, 4).ok());
  auto d = shard.SnapshotIfAtLeast(0, &v2);
  EXPECT_EQ(*d, (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(*c, (std::vector<float>{0, 1, 2, 3}));
  // Copy on write: once every reply is gone, an update works in place, so
  // the next snapshot is the same buffer (no copy was made).
  const std::vector<float>* where = d.get();
  a.reset();
  b.reset();
  c.reset();
  d.reset();
  shard.Push(g, 1);
  auto e = shard.SnapshotIfAtLeast(0, &v2);
  EXPECT_EQ(e.get(), where);
  EXPECT_EQ(*e, (std::vector<float>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace strata
