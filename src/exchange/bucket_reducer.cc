#include "exchange/bucket_reducer.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "transport/spin_wait.h"

namespace strata {

namespace {

std::atomic<uint64_t> g_sent_on_fill{0};  // BucketReducer::SentOnFill()

}  // namespace

std::vector<int64_t> EvenBucketBounds(int64_t size, int64_t bucket_floats) {
  const int64_t bucket = std::max<int64_t>(1, bucket_floats);
  std::vector<int64_t> bounds;
  for (int64_t b = 0; b < size; b += bucket) bounds.push_back(b);
  bounds.push_back(size);
  return bounds;
}

BucketReducer::BucketReducer(int64_t size, int64_t bucket_floats,
                             ReduceFn reduce)
    : BucketReducer(EvenBucketBounds(size, bucket_floats), std::move(reduce)) {}

BucketReducer::BucketReducer(std::vector<int64_t> bounds, ReduceFn reduce,
                             float* in_place,
                             std::shared_ptr<void> in_place_owner)
    : reduce_(std::move(reduce)),
      buffer_(std::make_shared<std::vector<float>>(
          in_place != nullptr ? 0 : static_cast<size_t>(bounds.back()), 0.0f)),
      in_place_(in_place),
      in_place_owner_(std::move(in_place_owner)),
      begin_(std::move(bounds)) {
  filled_.assign(begin_.size() - 1, 0);
  launched_.assign(begin_.size() - 1, false);
  thread_ = std::thread([this] { Loop(); });
}

uint64_t BucketReducer::SentOnFill() { return g_sent_on_fill.load(); }

BucketReducer::~BucketReducer() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

void BucketReducer::BeginStep() {
  std::fill(buffer_->begin(), buffer_->end(), 0.0f);  // empty in place
  {
    MutexLock lock(&mu_);
    std::fill(filled_.begin(), filled_.end(), 0);
    std::fill(launched_.begin(), launched_.end(), false);
    full_.clear();
    next_full_ = 0;
    finishing_ = false;
    ++step_;
  }
  // No wake-up here: the reducer's thread starts on the step when its first
  // bucket is full (Ready()) or when it finishes (FinishStep()).
}

void BucketReducer::Ready(int64_t offset, const float* grad, int64_t count) {
  const int64_t end = offset + count;
  // The buckets [offset, end) touches.
  int b =
      static_cast<int>(std::upper_bound(begin_.begin(), begin_.end(), offset) -
                       begin_.begin() - 1);
  for (; b < num_buckets() && begin_[b] < end; ++b) {
    const int64_t lo = std::max(offset, begin_[b]);
    const int64_t hi = std::min(end, begin_[b + 1]);
    {
      MutexLock lock(&mu_);
      if (launched_[b]) {
        if (error_.ok()) {
          error_ = Status::FailedPrecondition(
              "a gradient for [{}, {}) arrived after its bucket {} was sent "
              "(a parameter used twice in the graph?); set {}",
              lo, hi, b, off_switch_);
        }
        continue;
      }
    }
    // Bucket b is not read by the reducer until it is full: no lock needed
    // for its bytes. In place, autograd has put them there already.
    if (in_place_ == nullptr) {
      float* dst = buffer_->data() + lo;
      const float* src = grad + (lo - offset);
      for (int64_t i = 0; i < hi - lo; ++i) dst[i] += src[i];
    }
    bool full = false;
    {
      MutexLock lock(&mu_);
      const bool was_full = filled_[b] >= BucketSize(b);
      filled_[b] += hi - lo;
      full = filled_[b] >= BucketSize(b);
      if (send_on_fill_ && fill_order_ && caller_finishes_) {
        // Sent here, now (set_send_on_fill); the reducer's thread is idle.
        if (full && !was_full && !launched_[b] && error_.ok()) {
          launched_[b] = true;
          g_sent_on_fill.fetch_add(1, std::memory_order_relaxed);
          ReduceBucket(b);
        }
        continue;
      }
      if (fill_order_ && full && !was_full) full_.push_back(b);
    }
    // Only a full bucket gives the reducer's thread something to do: no
    // wake-up (a system call on this, the backward pass's, thread) before.
    if (full) cv_.SignalAll();
  }
}

Status BucketReducer::FinishStep(std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  finishing_ = true;  // what was not reported is a zero gradient
  // The caller finishes: no wake-up either, the reducer's thread has
  // nothing more to do in this step and sees `finishing_` whenever it wakes.
  if (!caller_finishes_) cv_.SignalAll();
  if (caller_finishes_ && reducing_.load()) {
    // The reducer's thread is sending a bucket (usually briefly): poll
    // before sleeping (spin_wait.h).
    lock.Unlock();
    (void)SpinUntil([this] { return !reducing_.load(); });
    lock.Lock();
  }
  // The caller finishes: once the reducer's thread is out of reduce_, it
  // begins no other bucket of this step.
  auto finished = [this]() REQUIRES(mu_) {
    return caller_finishes_ ? !reducing_ : done_ == step_;
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!finished()) {
    if (!cv_.WaitUntil(deadline)) break;
  }
  if (!finished()) {
    return Status::DeadlineExceeded(
        "the reduction of the gradient buckets did not finish within {} ms",
        timeout.count());
  }
  if (caller_finishes_) {
    // Fill order: the full buckets not sent yet in the order they filled,
    // then those that got no gradient (zero), in key order.
    std::vector<int> order;
    if (fill_order_) {
      order.assign(full_.begin() + static_cast<std::ptrdiff_t>(next_full_),
                   full_.end());
      for (int b = 0; b < num_buckets(); ++b)
        if (filled_[b] < BucketSize(b)) order.push_back(b);
    } else {
      for (int b = num_buckets() - 1; b >= 0; --b) order.push_back(b);
    }
    for (int b : order) {
      if (!error_.ok()) break;
      if (launched_[b]) continue;
      launched_[b] = true;
      ReduceBucket(b);
    }
    done_ = step_;
  }
  return error_;
}

bool BucketReducer::idle() {
  MutexLock lock(&mu_);
  return done_ == step_ && !reducing_;
}

void BucketReducer::ReduceBucket(int b) {
  // Sent without the lock: the backward pass reports on meanwhile.
  mu_.Unlock();
  Status st = reduce_(data() + begin_[b], static_cast<size_t>(BucketSize(b)));
  mu_.Lock();
  if (!st.ok() && error_.ok()) {
    error_ = st.WithContext(fmt::format("bucket {} of {}", b, num_buckets()));
  }
}

bool BucketReducer::BucketReady(int b) const {
  if (stop_ || finishing_) return true;
  if (!caller_finishes_) return filled_[b] >= BucketSize(b);
  // The caller finishes: this thread may wake late, after the caller
  // finished the step and began the next one.
  return step_ != serving_ ||
         (filled_[b] >= BucketSize(b) && BackwardGoesOn(b));
}

bool BucketReducer::BackwardGoesOn(int b) const {
  // The caller finishes: once every bucket below b is full, the backward
  // pass is about to end and its thread sends them itself (b =
  // num_buckets(): once every bucket is full).
  for (int j = 0; j < b; ++j) {
    if (filled_[j] < BucketSize(j)) return true;
  }
  return false;
}

void BucketReducer::ServeInFillOrder() {
  while (true) {
    // As last-first: this thread takes a full bucket only while the
    // backward pass goes on; the caller sends what is left when it ends.
    while (!(stop_ || finishing_ || step_ != serving_ ||
             (next_full_ < full_.size() && BackwardGoesOn(num_buckets())))) {
      cv_.Wait();
    }
    if (stop_ || finishing_ || step_ != serving_) return;
    const int b = full_[next_full_++];
    launched_[b] = true;
    if (!error_.ok()) continue;  // a failed group: skip the rest
    reducing_ = true;
    ReduceBucket(b);
    reducing_ = false;
    cv_.SignalAll();  // FinishStep() may wait
  }
}

void BucketReducer::Loop() {
  MutexLock lock(&mu_);
  while (true) {
    while (!(stop_ || serving_ < step_)) cv_.Wait();
    if (stop_) return;
    serving_ = step_;
    if (fill_order_ && caller_finishes_) {
      ServeInFillOrder();
      if (stop_) return;
      cv_.SignalAll();
      continue;
    }
    // Last bucket first: the backward pass produces late layers first.
    for (int b = num_buckets() - 1; b >= 0; --b) {
      while (!BucketReady(b)) cv_.Wait();
      if (stop_) return;
      // The caller finishes (set_caller_finishes): it takes what is left.
      if (caller_finishes_ && (finishing_ || step_ != serving_)) break;
      launched_[b] = true;
      if (!error_.ok()) continue;  // a failed group: skip the rest
      reducing_ = true;
      ReduceBucket(b);
      reducing_ = false;
      if (caller_finishes_) cv_.SignalAll();  // FinishStep() may wait
    }
    if (!caller_finishes_) done_ = step_;
    cv_.SignalAll();
  }
}

}  // namespace strata
