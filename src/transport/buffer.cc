#include "transport/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace strata {
namespace {

size_t RoundUp(size_t n, size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

void* AlignedAlloc(size_t size) {
  // std::aligned_alloc wants a multiple of the alignment; zero is not portable.
  void* p = std::aligned_alloc(
      Buffer::kAlignment, RoundUp(size == 0 ? 1 : size, Buffer::kAlignment));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

size_t CapacityClass(size_t size) {
  size_t capacity = BufferPool::kMinCapacity;
  while (capacity < size) capacity *= 2;
  return capacity;
}

}  // namespace

Buffer Buffer::Allocate(size_t size) {
  if (size == 0) return Buffer();
  void* p = AlignedAlloc(size);
  std::shared_ptr<void> owner(p, [](void* q) { std::free(q); });
  return Buffer(static_cast<uint8_t*>(p), size, std::move(owner));
}

Buffer Buffer::CopyOf(const void* data, size_t size) {
  Buffer b = Allocate(size);
  if (size > 0) std::memcpy(b.data(), data, size);
  return b;
}

Buffer Buffer::Adopt(void* data, size_t size, std::shared_ptr<void> owner) {
  if (size == 0) return Buffer();
  return Buffer(static_cast<uint8_t*>(data), size, std::move(owner));
}

Buffer Buffer::Gather(std::vector<Buffer> pieces) {
  std::vector<Buffer> kept;
  size_t size = 0;
  for (Buffer& piece : pieces) {
    if (piece.empty()) continue;
    piece.Join();  // a piece is itself plain
    size += piece.size_;
    kept.push_back(std::move(piece));
  }
  if (kept.empty()) return Buffer();
  if (kept.size() == 1) return std::move(kept[0]);
  Buffer out;
  out.size_ = size;
  out.pieces_ = std::move(kept);
  return out;
}

void Buffer::Join() const {
  if (pieces_.empty()) return;
  void* p = AlignedAlloc(size_);
  std::shared_ptr<void> owner(p, [](void* q) { std::free(q); });
  auto* dest = static_cast<uint8_t*>(p);
  for (const Buffer& piece : pieces_) {
    std::memcpy(dest, piece.data_, piece.size_);
    dest += piece.size_;
  }
  pieces_.clear();
  data_ = static_cast<uint8_t*>(p);
  owner_ = std::move(owner);
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owner_(std::move(other.owner_)),
      pieces_(std::move(other.pieces_)) {
  other.pieces_.clear();
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_ = std::move(other.owner_);
    pieces_ = std::move(other.pieces_);
    other.pieces_.clear();
  }
  return *this;
}

std::shared_ptr<void> Buffer::Release() && {
  Join();
  data_ = nullptr;
  size_ = 0;
  return std::move(owner_);
}

std::shared_ptr<BufferPool> BufferPool::Create(size_t max_cached_bytes) {
  return std::shared_ptr<BufferPool>(new BufferPool(max_cached_bytes));
}

BufferPool::~BufferPool() {
  for (auto& [capacity, blocks] : free_) {
    for (void* block : blocks) std::free(block);
  }
}

Buffer BufferPool::Acquire(size_t size) {
  if (size == 0) return Buffer();
  const size_t capacity = CapacityClass(size);
  void* block = nullptr;
  {
    MutexLock lock(&mu_);
    auto it = free_.find(capacity);
    if (it != free_.end() && !it->second.empty()) {
      block = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= capacity;
    }
  }
  if (block == nullptr) block = AlignedAlloc(capacity);
  // The deleter holds the pool, so a buffer may outlive every other owner of
  // the pool and still find it on return.
  std::shared_ptr<BufferPool> self = shared_from_this();
  std::shared_ptr<void> owner(
      block, [self, capacity](void* p) { self->Return(p, capacity); });
  return Buffer::Adopt(block, size, std::move(owner));
}

size_t BufferPool::cached_bytes() const {
  MutexLock lock(&mu_);
  return cached_bytes_;
}

void BufferPool::Return(void* block, size_t capacity) {
  {
    MutexLock lock(&mu_);
    if (cached_bytes_ + capacity <= max_cached_bytes_) {
      free_[capacity].push_back(block);
      cached_bytes_ += capacity;
      return;
    }
  }
  std::free(block);
}

}  // namespace strata
