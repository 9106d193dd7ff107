#pragma once

// The models a gossip or tree-easgd worker sends to its peers, kept until
// the peer merged them, so that a checkpoint loses none that was on its way
// (docs/design/checkpoints.md, "Gossip and tree-easgd").
//
// A checkpoint round stops each worker at a step boundary, one after the
// other, and a model sent before the sender stopped may not have reached
// the receiver when the receiver stopped. So with checkpoints on:
//   - every model carries a sequence number per (sender, receiver) pair,
//     and the sender keeps a copy until the receiver acknowledges it;
//   - the receiver merges a model once: it remembers the last number it
//     merged from each sender, and drops one it already merged;
//   - a checkpoint keeps the copies not yet acknowledged and the numbers
//     merged; a resumed worker sends its copies again first.
// So every model sent before the round is merged exactly once, whichever
// side of the cut it was on: gossip's weights still sum to one. Without
// checkpoints nothing is kept and nothing is acknowledged. At most 64
// copies are kept per peer: one that finished or was lost acknowledges
// nothing more (a live one does within a few steps), and beyond that a
// checkpoint may miss its oldest unacknowledged models.
//
// Not thread-safe: the worker's thread only.

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include "common/status.h"
#include "exchange/exchange.h"

namespace strata {

class PeerOutbox {
 public:
  // `type`: the strategy's model messages (kGossipModel, kTreeModel).
  // `keep`: the run writes checkpoints.
  PeerOutbox(const ExchangeEnv& env, MessageType type, bool keep);

  // Sends the model (and a gossip weight, may be null) to worker `peer`
  // at step `it`; keeps a copy until it is acknowledged. Errors name the
  // peer.
  Status Send(int peer, int64_t it, const float* params, int64_t size,
              const float* weight);
  // The models that arrived and were not merged before: acknowledges them
  // and drops copies the peers acknowledged.
  std::vector<Message> Receive();

  // Into / from a checkpoint's strategy state ("outbox/...", "merged").
  void Save(ExchangeState& state) const;
  // DataLoss naming what does not fit.
  Status Restore(const ExchangeState& state);
  // After a restore: the copies not acknowledged, sent again.
  Status Resend();

  int64_t kept() const { return static_cast<int64_t>(kept_.size()); }

 private:
  struct Kept {
    int peer = 0;
    int64_t seq = 0;
    int64_t it = 0;
    std::vector<float> params;
    float weight = 0;
    bool has_weight = false;
  };
  // One model to worker `peer` (`seq` 0: no sequence number).
  Status SendModel(int peer, int64_t seq, int64_t it, const float* params,
                   int64_t size, const float* weight);
  Status SendKept(const Kept& k);
  void TakeAcks();

  // The most copies kept for one peer: a peer that finished or was lost
  // acknowledges nothing more, and memory must not grow with the run.
  static constexpr int64_t kMaxKeptPerPeer = 64;

  const ExchangeEnv env_;
  const MessageType type_;
  const bool keep_;
  std::set<int> warned_;             // peers past kMaxKeptPerPeer, said once
  std::map<int, int64_t> next_seq_;  // per receiving worker
  std::map<int, int64_t> merged_;    // per sending worker: the last merged
  std::deque<Kept> kept_;            // in send order
};

}  // namespace strata
