#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"

namespace strata {

// A contiguous run of bytes that a Message carries, with exactly one owner at a
// time. Buffers are move-only: sending a Message moves its buffers, so the
// in-process transport hands the very same memory to the receiver (zero copy)
// and the ZeroMQ transport can pass it to the wire without copying.
//
// The memory is released by whatever produced it (the heap, a BufferPool, a
// received ZeroMQ frame, or an owner handed to Adopt()) when the last Buffer
// (or ownership token, see Release()) referring to it goes away.
//
// Alignment: Allocate(), CopyOf() and BufferPool buffers are 64-byte aligned;
// buffers received from a transport are at least 8-byte aligned, enough for
// float, double and int64 payloads.
//
// Thread safety: a Buffer is thread-compatible (one thread at a time); it may
// be destroyed on any thread.
class Buffer {
 public:
  // Byte alignment of Allocate(), CopyOf() and BufferPool::Acquire().
  static constexpr size_t kAlignment = 64;

  // An empty buffer: size() == 0, data() == nullptr.
  Buffer() = default;

  // `size` uninitialized bytes from the heap. Like operator new, throws
  // std::bad_alloc when the heap is exhausted (callers bound sizes first).
  static Buffer Allocate(size_t size);
  // A heap copy of [data, data + size).
  static Buffer CopyOf(const void* data, size_t size);
  // A copy of `values` (handy for floats in tests and small messages).
  template <typename T>
  static Buffer CopyOf(const std::vector<T>& values) {
    return CopyOf(values.data(), values.size() * sizeof(T));
  }
  // Takes `values` without copying its elements; the vector is kept alive
  // inside the buffer.
  template <typename T>
  static Buffer FromVector(std::vector<T> values);
  // Wraps memory owned by someone else: [data, data + size) stays valid while
  // `owner` (any shared_ptr, e.g. to a tensor or a parameter shard) lives, and
  // this Buffer holds a reference to it. Used for zero-copy views: the caller
  // promises not to write the bytes while the Buffer is in flight. A null
  // `owner` means the caller guarantees the memory outlives every use.
  static Buffer Adopt(void* data, size_t size, std::shared_ptr<void> owner);
  // One buffer made of several pieces kept apart, without copying them: how a
  // transport hands over a payload that arrived as several frames. size() is
  // the sum of the pieces. ForEachPiece() visits them in order; data() first
  // joins them into one contiguous block (one copy), so code that does not
  // care about pieces still sees plain bytes. Empty pieces are skipped; zero
  // or one piece gives a plain buffer.
  static Buffer Gather(std::vector<Buffer> pieces);

  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() = default;

  // The bytes, contiguous (a gathered buffer is joined first: see Gather()).
  uint8_t* data() {
    if (!pieces_.empty()) Join();
    return data_;
  }
  const uint8_t* data() const {
    if (!pieces_.empty()) Join();
    return data_;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // True while the bytes are held as separate pieces (see Gather()).
  bool gathered() const { return !pieces_.empty(); }
  // Calls fn(offset, data, size) for every contiguous run of bytes, in order,
  // without joining: once for a plain buffer, once per piece for a gathered
  // one. Nothing for an empty buffer.
  template <typename Fn>
  void ForEachPiece(Fn&& fn) const;

  // The bytes viewed as floats (size() / 4 of them; a trailing partial float
  // is not counted).
  float* floats() { return reinterpret_cast<float*>(data()); }
  const float* floats() const { return reinterpret_cast<const float*>(data()); }
  size_t num_floats() const { return size_ / sizeof(float); }

  // Another Buffer over the same bytes, sharing their ownership (no copy; a
  // gathered buffer is joined first). For keeping a message to send again.
  Buffer Share() const {
    if (!pieces_.empty()) Join();
    return Buffer(data_, size_, owner_);
  }
  // A copy of the bytes as a string (JSON text, an encoded file).
  std::string ToString() const {
    return size_ == 0
               ? std::string()
               : std::string(reinterpret_cast<const char*>(data()), size_);
  }
  // Gives up this buffer and returns its ownership token: the bytes stay valid
  // while the token (or a Buffer made from it with Adopt()) lives. For
  // transports that split a buffer into zero-copy frames. Leaves this empty.
  std::shared_ptr<void> Release() &&;

 private:
  Buffer(uint8_t* data, size_t size, std::shared_ptr<void> owner)
      : data_(data), size_(size), owner_(std::move(owner)) {}
  // Copies the pieces of a gathered buffer into one block and drops them.
  // Logically const: the bytes do not change, only how they are held.
  void Join() const;

  // A gathered buffer holds its bytes in pieces_ (data_ null, owner_ empty)
  // until Join().
  mutable uint8_t* data_ = nullptr;
  size_t size_ = 0;
  mutable std::shared_ptr<void> owner_;
  mutable std::vector<Buffer> pieces_;
};

template <typename Fn>
void Buffer::ForEachPiece(Fn&& fn) const {
  if (pieces_.empty()) {
    if (size_ > 0) fn(size_t{0}, static_cast<const uint8_t*>(data_), size_);
    return;
  }
  size_t offset = 0;
  for (const Buffer& piece : pieces_) {
    fn(offset, static_cast<const uint8_t*>(piece.data_), piece.size_);
    offset += piece.size_;
  }
}

template <typename T>
Buffer Buffer::FromVector(std::vector<T> values) {
  auto holder = std::make_shared<std::vector<T>>(std::move(values));
  void* data = holder->data();
  const size_t size = holder->size() * sizeof(T);
  return Adopt(data, size, std::move(holder));
}

// Recycles large buffers (a receive path reassembles multi-MiB payloads into
// them) so that steady traffic does not pay for fresh pages on every message.
// Buffers are bucketed by capacity (a power of two); a Buffer from Acquire()
// returns its memory to the pool when it is destroyed, or frees it when the
// pool already caches `max_cached_bytes`. Buffers keep the pool alive.
//
// Thread-safe: Acquire() and buffer destruction may happen on any thread.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Smallest capacity the pool manages; smaller requests should just use
  // Buffer::Allocate().
  static constexpr size_t kMinCapacity = 64 * 1024;

  static std::shared_ptr<BufferPool> Create(size_t max_cached_bytes);
  ~BufferPool();

  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of exactly `size` bytes (uninitialized, 64-byte aligned), reusing
  // a cached block of the same capacity class when there is one.
  Buffer Acquire(size_t size) EXCLUDES(mu_);

  // Bytes held in the cache (not lent out).
  size_t cached_bytes() const EXCLUDES(mu_);

 private:
  explicit BufferPool(size_t max_cached_bytes)
      : max_cached_bytes_(max_cached_bytes) {}
  void Return(void* block, size_t capacity) EXCLUDES(mu_);

  const size_t max_cached_bytes_;
  mutable Mutex mu_;
  std::map<size_t, std::vector<void*>> free_ GUARDED_BY(mu_);
  size_t cached_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace strata
