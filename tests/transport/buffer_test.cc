#include "transport/buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace strata {
namespace {

TEST(TransportBufferTest, EmptyByDefault) {
  Buffer b;
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.data(), nullptr);
}

TEST(TransportBufferTest, AllocateIsAligned) {
  for (size_t size : {1, 3, 64, 1000, 1 << 20}) {
    Buffer b = Buffer::Allocate(size);
    EXPECT_EQ(b.size(), size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % Buffer::kAlignment, 0u);
  }
}

TEST(TransportBufferTest, CopyOfCopiesBytes) {
  std::vector<float> values = {1.5f, -2.0f, 3.25f};
  Buffer b = Buffer::CopyOf(values);
  ASSERT_EQ(b.num_floats(), 3u);
  EXPECT_NE(static_cast<const void*>(b.data()), values.data());
  EXPECT_EQ(b.floats()[2], 3.25f);
}

TEST(TransportBufferTest, FromVectorDoesNotCopy) {
  std::vector<float> values(1000, 7.0f);
  const float* original = values.data();
  Buffer b = Buffer::FromVector(std::move(values));
  EXPECT_EQ(b.floats(), original);
  EXPECT_EQ(b.num_floats(), 1000u);
}

TEST(TransportBufferTest, MoveLeavesSourceEmpty) {
  Buffer a = Buffer::Allocate(100);
  uint8_t* p = a.data();
  Buffer b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): by contract
  EXPECT_EQ(a.data(), nullptr);
  Buffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move): by contract
}

TEST(TransportBufferTest, AdoptKeepsOwnerAlive) {
  auto owner = std::make_shared<std::vector<uint8_t>>(64, 9);
  std::weak_ptr<std::vector<uint8_t>> watch = owner;
  Buffer view = Buffer::Adopt(owner->data(), owner->size(), owner);
  owner.reset();
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(view.data()[63], 9);
  std::shared_ptr<void> token = std::move(view).Release();
  EXPECT_TRUE(view.empty());  // NOLINT(bugprone-use-after-move): by contract
  EXPECT_FALSE(watch.expired());
  token.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(TransportBufferPoolTest, ReusesReturnedBlocks) {
  auto pool = BufferPool::Create(size_t{64} << 20);
  uint8_t* first = nullptr;
  {
    Buffer b = pool->Acquire(3 << 20);
    first = b.data();
    EXPECT_EQ(b.size(), size_t{3} << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % Buffer::kAlignment, 0u);
  }
  EXPECT_EQ(pool->cached_bytes(), size_t{4} << 20);  // capacity class
  Buffer again = pool->Acquire((3 << 20) + 5);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(pool->cached_bytes(), 0u);
}

TEST(TransportBufferPoolTest, RespectsCacheLimit) {
  auto pool = BufferPool::Create(size_t{1} << 20);
  {
    Buffer a = pool->Acquire(1 << 20);
    Buffer b = pool->Acquire(1 << 20);
  }
  EXPECT_EQ(pool->cached_bytes(), size_t{1} << 20);  // the second was freed
}

TEST(TransportBufferPoolTest, BuffersOutliveThePoolHandle) {
  auto pool = BufferPool::Create(size_t{8} << 20);
  Buffer a = pool->Acquire(1 << 20);
  std::memset(a.data(), 1, a.size());
  std::weak_ptr<BufferPool> watch = pool;
  pool.reset();
  EXPECT_FALSE(watch.expired());  // the buffer holds it
  a = Buffer();
  EXPECT_TRUE(watch.expired());
}

TEST(TransportBufferTest, GatherKeepsPiecesWithoutCopying) {
  std::vector<Buffer> pieces;
  std::vector<const uint8_t*> where;
  for (uint8_t p = 0; p < 3; ++p) {
    std::vector<uint8_t> bytes(1000 + p, p);
    pieces.push_back(Buffer::FromVector(std::move(bytes)));
    where.push_back(pieces.back().data());
  }
  pieces.insert(pieces.begin() + 1, Buffer());  // empty pieces are skipped
  Buffer g = Buffer::Gather(std::move(pieces));
  EXPECT_TRUE(g.gathered());
  EXPECT_EQ(g.size(), 3003u);
  std::vector<size_t> offsets;
  std::vector<const uint8_t*> seen;
  g.ForEachPiece([&](size_t offset, const uint8_t* data, size_t size) {
    offsets.push_back(offset);
    seen.push_back(data);
    EXPECT_EQ(size, 1000 + offsets.size() - 1);
  });
  EXPECT_EQ(offsets, (std::vector<size_t>{0, 1000, 2001}));
  EXPECT_EQ(seen, where);  // the very same memory: no copy
  // data() joins the pieces, in order, into one block.
  const uint8_t* joined = g.data();
  EXPECT_FALSE(g.gathered());
  EXPECT_EQ(joined[0], 0);
  EXPECT_EQ(joined[999], 0);
  EXPECT_EQ(joined[1000], 1);
  EXPECT_EQ(joined[2000], 1);
  EXPECT_EQ(joined[2001], 2);
  EXPECT_EQ(joined[3002], 2);
  int calls = 0;
  g.ForEachPiece([&](size_t offset, const uint8_t* data, size_t size) {
    ++calls;
    EXPECT_EQ(offset, 0u);
    EXPECT_EQ(data, joined);
    EXPECT_EQ(size, 3003u);
  });
  EXPECT_EQ(calls, 1);
}

TEST(TransportBufferTest, GatherOfOnePieceIsThatPieceAndMovesKeepPieces) {
  std::vector<Buffer> one;
  one.push_back(Buffer::CopyOf(std::vector<float>{1.0f, 2.0f}));
  const uint8_t* p = one[0].data();
  Buffer single = Buffer::Gather(std::move(one));
  EXPECT_FALSE(single.gathered());
  EXPECT_EQ(single.data(), p);
  EXPECT_TRUE(Buffer::Gather({}).empty());

  std::vector<Buffer> two;
  two.push_back(Buffer::CopyOf(std::vector<float>{1.0f}));
  two.push_back(Buffer::CopyOf(std::vector<float>{2.0f}));
  Buffer g = Buffer::Gather(std::move(two));
  Buffer moved = std::move(g);
  EXPECT_TRUE(g.empty());
  EXPECT_FALSE(g.gathered());
  EXPECT_TRUE(moved.gathered());
  EXPECT_EQ(moved.num_floats(), 2u);
  EXPECT_EQ(moved.floats()[1], 2.0f);
  // Release() hands out a token that keeps the joined bytes alive.
  std::vector<Buffer> three;
  three.push_back(Buffer::CopyOf(std::vector<float>{3.0f}));
  three.push_back(Buffer::CopyOf(std::vector<float>{4.0f}));
  Buffer h = Buffer::Gather(std::move(three));
  std::shared_ptr<void> token = std::move(h).Release();
  EXPECT_NE(token, nullptr);
  EXPECT_TRUE(h.empty());
}

}  // namespace
}  // namespace strata
