#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "transport/message.h"

namespace strata {

// Receive in place: memory the receiver of a message already owns, where one
// of the message's payloads should be written as its bytes arrive, instead of
// being kept in receive buffers and copied by the caller afterwards. A
// stream transport (ZeroMQ) copies each frame into it as soon as the frame is
// in, while later frames are still on the wire and while the frame is still
// in cache; the delivered message's payload is then a view of `dest`. A
// transport whose library writes the bytes itself, later (UCX's
// rendezvous), pins the placement while that write is under way.
//
// The owner of `dest` calls Revoke() before the memory may go away or be
// used for something else; once Revoke() returns true nothing writes into
// it any more, and the rest of that payload is dropped (the message is
// delivered with that payload empty). Thread-safe.
class PayloadPlacement {
 public:
  // How long Revoke() waits, by default, for a pinned write to end. A
  // rendezvous into `dest` ends in milliseconds, or fails once the
  // transport finds its sender lost.
  static constexpr std::chrono::milliseconds kRevokeWait{60000};

  PayloadPlacement(size_t payload_index, uint8_t* dest, uint64_t size)
      : payload_index_(payload_index), dest_(dest), size_(size) {}

  size_t payload_index() const { return payload_index_; }

  // Whether it fits a message with these payload sizes: its payload is
  // there, not empty, and exactly its size. One that does not is ignored.
  bool Fits(const std::vector<uint64_t>& payload_sizes) const {
    return payload_index_ < payload_sizes.size() &&
           payload_sizes[payload_index_] == size_ && size_ > 0;
  }
  uint8_t* dest() const { return dest_; }
  uint64_t size() const { return size_; }

  // Copies `n` bytes to `offset` in dest. False, writing nothing, once
  // revoked or when the bytes do not fit.
  bool Write(uint64_t offset, const uint8_t* data, size_t n) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (revoked_ || offset > size_ || n > size_ - offset) return false;
    std::memcpy(dest_ + offset, data, n);
    return true;
  }

  // Before handing dest to something that writes into it later: true, and
  // Revoke() waits for the matching Unpin(); false, pinning nothing, once
  // revoked.
  bool Pin() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (revoked_) return false;
    ++pins_;
    return true;
  }

  // That write is over (done or failed). Returns whether the placement was
  // revoked meanwhile: then its owner may have reused dest already, and the
  // payload must be delivered empty.
  bool Unpin() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    --pins_;
    if (pins_ == 0) unpinned_.SignalAll();
    return revoked_;
  }

  // After this returns true, nothing writes into dest: no Write(), and no
  // pinned write is still under way (it waits up to `wait` for them).
  // False when a pinned write has not ended after `wait`: dest may still
  // be written, and the caller should say so. Idempotent.
  bool Revoke(std::chrono::milliseconds wait = kRevokeWait) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    revoked_ = true;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (pins_ != 0) {
      if (!unpinned_.WaitUntil(deadline)) break;
    }
    return pins_ == 0;
  }

 private:
  const size_t payload_index_;
  uint8_t* const dest_;
  const uint64_t size_;
  Mutex mu_;
  CondVar unpinned_{&mu_};
  bool revoked_ GUARDED_BY(mu_) = false;
  int pins_ GUARDED_BY(mu_) = 0;
};

// Asked with each incoming message's (validated) header: where, if
// anywhere, one of its payloads goes. Null: nowhere (the usual buffers).
using PlacementLookup =
    std::function<std::shared_ptr<PayloadPlacement>(const MessageHeader&)>;

}  // namespace strata
