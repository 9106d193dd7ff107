#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace strata {

// Receives each parameter's gradient while the backward pass produces it
// (exchange.h, Exchange::gradient_sink()).
class GradientSink {
 public:
  virtual ~GradientSink() = default;
  // The gradient of the `count` floats at `offset` of the flat parameter
  // vector; called on the backward pass's thread, usually late layers
  // first. A parameter used twice in the graph reports twice; both add up.
  // For a sink that works in place (in_place()), `grad` is null: the
  // gradient is already accumulated in the model's flat gradient buffer
  // (the caller hooks autograd after the accumulation, not before).
  virtual void Ready(int64_t offset, const float* grad, int64_t count) = 0;
  virtual bool in_place() const { return false; }
};

// The bounds of buckets of `bucket_floats` (at least 1) over `size` floats:
// 0, bucket_floats, ..., size (the last bucket may be shorter).
std::vector<int64_t> EvenBucketBounds(int64_t size, int64_t bucket_floats);

// Overlaps the reduction of gradient buckets with the backward pass, as
// PyTorch DDP's reducer does: the flat gradient is cut into buckets of
// `bucket_floats`; as soon as every parameter of the last bucket has
// reported (Ready), the reducer's thread reduces it (`reduce`, e.g. a Gloo
// all-reduce) while the backward pass goes on with earlier layers; then the
// next bucket, down to the first. Buckets are always reduced in that fixed
// order, so every member of a collective issues the same calls in the same
// order whatever order its hooks fire in. Parameters that get no gradient in
// a step count as zero once FinishStep() is called.
// Thread-safety: Ready() from the backward thread, BeginStep()/FinishStep()
// from the worker's thread; one step at a time. The destructor joins the
// reducer's thread.
class BucketReducer final : public GradientSink {
 public:
  using ReduceFn = std::function<Status(float* data, size_t count)>;

  BucketReducer(int64_t size, int64_t bucket_floats, ReduceFn reduce);
  // Buckets with given bounds: bucket b is [bounds[b], bounds[b + 1]),
  // bounds[0] = 0 and the last bound the size (e.g. a layout's ranges).
  // With `in_place` (the model's flat gradient, of bounds.back() floats,
  // and what owns it), the reducer works in place: the gradients are in
  // that buffer already when Ready() is called (in_place() is true),
  // Ready() only counts them, and data() is that buffer; the worker zeroes
  // it before each step.
  BucketReducer(std::vector<int64_t> bounds, ReduceFn reduce,
                float* in_place = nullptr,
                std::shared_ptr<void> in_place_owner = nullptr);
  bool in_place() const override { return in_place_ != nullptr; }
  // The setting that turns this reducer off, named in the error for a
  // gradient that arrives after its bucket was sent.
  void set_off_switch(std::string setting) { off_switch_ = std::move(setting); }
  // The caller finishes: the reducer's thread takes a full bucket only
  // while an earlier one is still waiting for gradients (the backward pass
  // goes on), and once FinishStep() is called the buckets it has not begun
  // are reduced on the calling thread (still last bucket first). The
  // backward pass's last buckets are then read on the core that wrote
  // them, with no hand-off between threads when the backward pass ends. Only
  // for a `reduce` that may run on either thread (parameter-server pushes; not
  // collectives whose members must call in one fixed order: that order is
  // kept, but the calls come from two threads). FinishStep()'s timeout then
  // bounds its wait for the reducer's thread; its own `reduce` calls take
  // what they take (a push bounds its own waits). Before the first step.
  void set_caller_finishes(bool on) { caller_finishes_ = on; }
  // With set_caller_finishes: buckets are reduced in the order they fill
  // (the first bucket to fill first), not last bucket first. For
  // parameter-server pushes, where each range is its own message: a model
  // whose backward pass reports its first layer's row slices first
  // (cluster.slice_kb) then sends them in the order the next forward pass
  // reads them. For a backward pass that fills the last buckets first it is
  // the same order. Before the first step.
  void set_fill_order(bool on) { fill_order_ = on; }
  // With set_fill_order and set_caller_finishes (otherwise ignored): each
  // bucket is reduced on the thread that filled it (Ready()), at once, and
  // the reducer's thread never is: no thread
  // hand-off per bucket, for a `reduce` that only hands the bytes on (a
  // push over a network transport, whose own I/O thread sends them). Not
  // where `reduce` may work long on the caller's thread (an in-process
  // server handling a push inline) or block it (a GPU worker's wait for
  // its gradient copies). Before the first step.
  void set_send_on_fill(bool on) { send_on_fill_ = on; }
  // Buckets sent that way so far, by every reducer of this process (a
  // diagnostic: tests check that the path is taken).
  static uint64_t SentOnFill();
  ~BucketReducer() override;
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  // Before the forward pass: clears the buffer for a new step.
  void BeginStep() EXCLUDES(mu_);
  void Ready(int64_t offset, const float* grad, int64_t count) override
      EXCLUDES(mu_);
  // After the backward pass: waits until every bucket is reduced (up to
  // `timeout`). The first failed reduction (or a gradient that arrived
  // after its bucket was sent: a parameter shared across layers) is the
  // error, naming the bucket.
  Status FinishStep(std::chrono::milliseconds timeout) EXCLUDES(mu_);
  // The reducer's thread is done with every step begun (after FinishStep()
  // returned anything but its own timeout): what it sent into may go.
  bool idle() EXCLUDES(mu_);
  // The reduced gradient (valid after FinishStep() succeeded).
  float* data() { return in_place_ != nullptr ? in_place_ : buffer_->data(); }
  // Owns data(): a zero-copy send of a bucket keeps it alive.
  std::shared_ptr<void> owner() const {
    return in_place_ != nullptr ? in_place_owner_ : buffer_;
  }
  int num_buckets() const { return static_cast<int>(begin_.size()) - 1; }

 private:
  void Loop() EXCLUDES(mu_);
  // Reduces bucket `b` with mu_ released meanwhile, and keeps the first
  // error, naming the bucket.
  void ReduceBucket(int b) REQUIRES(mu_);
  // Whether a bucket below `b` is still waiting for gradients.
  bool BackwardGoesOn(int b) const REQUIRES(mu_);
  // Last-first order: whether the reducer's thread may take bucket `b`
  // (or must stop waiting for it).
  bool BucketReady(int b) const REQUIRES(mu_);
  // Fill order: the reducer thread's part of a step.
  void ServeInFillOrder() REQUIRES(mu_);
  int64_t BucketSize(int b) const { return begin_[b + 1] - begin_[b]; }

  const ReduceFn reduce_;
  const std::shared_ptr<std::vector<float>> buffer_;  // empty in place
  float* const in_place_;
  std::string off_switch_ = "cluster.bucket_overlap = false";
  bool caller_finishes_ = false;
  bool fill_order_ = false;
  bool send_on_fill_ = false;
  std::vector<int> full_ GUARDED_BY(mu_);  // fill order: the full buckets
  size_t next_full_ GUARDED_BY(mu_) = 0;   // full_[next_full_] is next
  const std::shared_ptr<void> in_place_owner_;
  std::vector<int64_t> begin_;  // bucket b is [begin_[b], begin_[b + 1])
  Mutex mu_;
  CondVar cv_{&mu_};
  std::vector<int64_t> filled_ GUARDED_BY(mu_);  // floats reported
  std::vector<bool> launched_ GUARDED_BY(mu_);
  bool finishing_ GUARDED_BY(mu_) = false;  // FinishStep() was called
  int64_t step_ GUARDED_BY(mu_) = 0;        // steps begun
  int64_t done_ GUARDED_BY(mu_) = 0;        // steps fully reduced
  // The thread is in reduce_; written under mu_, atomic so that
  // FinishStep() can poll it before sleeping (spin_wait.h).
  std::atomic<bool> reducing_{false};
  int64_t serving_ GUARDED_BY(mu_) = 0;  // the step the thread is on
  Status error_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace strata
