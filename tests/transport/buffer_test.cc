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

}  // namespace
}  // namespace strata
