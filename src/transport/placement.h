#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>

#include "transport/message.h"

namespace strata {

// Receive in place: memory the receiver of a message already owns, where one
// of the message's payloads should be written as its bytes arrive, instead of
// being kept in receive buffers and copied by the caller afterwards. A
// stream transport (ZeroMQ) copies each frame into it as soon as the frame is
// in, while later frames are still on the wire and while the frame is still
// in cache; the delivered message's payload is then a view of `dest`.
//
// The owner of `dest` calls Revoke() before the memory may go away or be
// used for something else; once Revoke() returns nothing writes into it any
// more, and the rest of that payload is dropped (the message is delivered
// with that payload empty). Thread-safe.
class PayloadPlacement {
 public:
  PayloadPlacement(size_t payload_index, uint8_t* dest, uint64_t size)
      : payload_index_(payload_index), dest_(dest), size_(size) {}

  size_t payload_index() const { return payload_index_; }
  uint8_t* dest() const { return dest_; }
  uint64_t size() const { return size_; }

  // Copies `n` bytes to `offset` in dest. False, writing nothing, once
  // revoked or when the bytes do not fit.
  bool Write(uint64_t offset, const uint8_t* data, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    if (revoked_ || offset > size_ || n > size_ - offset) return false;
    std::memcpy(dest_ + offset, data, n);
    return true;
  }

  // After this returns, no Write() touches dest. Idempotent.
  void Revoke() {
    std::lock_guard<std::mutex> lock(mu_);
    revoked_ = true;
  }

 private:
  const size_t payload_index_;
  uint8_t* const dest_;
  const uint64_t size_;
  std::mutex mu_;
  bool revoked_ = false;  // Guarded by mu_.
};

// Asked with each incoming message's (validated) header: where, if
// anywhere, one of its payloads goes. Null: nowhere (the usual buffers).
using PlacementLookup =
    std::function<std::shared_ptr<PayloadPlacement>(const MessageHeader&)>;

}  // namespace strata
