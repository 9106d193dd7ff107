#include "collective/inproc.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "transport/spin_wait.h"

namespace strata {

// The shared state of one group: the members' published buffers and a
// generation-counted barrier. Once a member leaves early or a barrier
// times out, the group is broken and every call fails with the reason.
class InprocGroup {
 public:
  InprocGroup(std::string name, int size)
      : name_(std::move(name)),
        size_(size),
        buffers_(static_cast<size_t>(size), nullptr),
        joined_(static_cast<size_t>(size), false) {}

  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // False when `rank` is already in the group.
  bool Take(int rank) {
    MutexLock lock(&mu_);
    if (joined_[static_cast<size_t>(rank)]) return false;
    joined_[static_cast<size_t>(rank)] = true;
    return true;
  }

  // Publishes this member's buffer for the call and waits for the others.
  Status Publish(int rank, float* data, std::chrono::milliseconds timeout,
                 const char* what) {
    {
      MutexLock lock(&mu_);
      buffers_[static_cast<size_t>(rank)] = data;
    }
    return Barrier(timeout, what);
  }

  // Member r's buffer as published for the current call (valid between the
  // call's first and last barrier).
  const float* buffer(int r) {
    MutexLock lock(&mu_);
    return buffers_[static_cast<size_t>(r)];
  }

  // Waits until every member has arrived: spins first (cluster.spin_us,
  // transport/spin_wait.h), as the in-process transport does, since the
  // others are usually a few microseconds away; then sleeps.
  Status Barrier(std::chrono::milliseconds timeout, const char* what) {
    uint64_t generation;
    {
      MutexLock lock(&mu_);
      if (!broken_.empty()) return Broken(what);
      generation = generation_;
      if (++arrived_ == size_) {
        arrived_ = 0;
        generation_ = generation + 1;
        passed_.store(generation + 1, std::memory_order_release);
        cv_.SignalAll();
        return Status::Ok();
      }
    }
    if (SpinUntil([&] {
          return passed_.load(std::memory_order_acquire) != generation ||
                 left_.load(std::memory_order_acquire);
        }) &&
        passed_.load(std::memory_order_acquire) != generation)
      return Status::Ok();
    MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (generation_ == generation && broken_.empty()) {
      if (!cv_.WaitUntil(deadline) && generation_ == generation) {
        broken_ = fmt::format("{} of {} members reached the {} within {} ms",
                              arrived_, size_, what, timeout.count());
        cv_.SignalAll();
        return Status::DeadlineExceeded("collective group '{}': {}", name_,
                                        broken_);
      }
    }
    if (generation_ != generation) return Status::Ok();
    return Broken(what);
  }

  // A member's collective ends: a member still waiting, or calling later,
  // fails at once instead of waiting for its timeout.
  void Leave(int rank) {
    MutexLock lock(&mu_);
    if (broken_.empty())
      broken_ = fmt::format("member {} left the group", rank);
    left_.store(true, std::memory_order_release);
    cv_.SignalAll();
  }

 private:
  Status Broken(const char* what) REQUIRES(mu_) {
    return Status::Unavailable("collective group '{}' ({}): {}", name_, what,
                               broken_);
  }

  const std::string name_;
  const int size_;
  Mutex mu_;
  CondVar cv_{&mu_};
  std::vector<float*> buffers_ GUARDED_BY(mu_);
  std::vector<bool> joined_ GUARDED_BY(mu_);
  int arrived_ GUARDED_BY(mu_) = 0;
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  std::string broken_ GUARDED_BY(mu_);
  // generation_ and !broken_.empty(), for the spinning waiters.
  std::atomic<uint64_t> passed_{0};
  std::atomic<bool> left_{false};
};

namespace {

// Element range [begin, end) of slice `r` of `counts`.
std::pair<int64_t, int64_t> SliceOf(const std::vector<int64_t>& counts, int r) {
  int64_t begin = 0;
  for (int i = 0; i < r; ++i) begin += counts[static_cast<size_t>(i)];
  return {begin, begin + counts[static_cast<size_t>(r)]};
}

class InprocCollective final : public Collective {
 public:
  InprocCollective(std::shared_ptr<InprocGroup> group, int rank,
                   std::chrono::milliseconds timeout)
      : Collective(rank, group->size()),
        group_(std::move(group)),
        timeout_(timeout) {}
  ~InprocCollective() override { group_->Leave(rank()); }

  const char* backend() const override { return "memory"; }

  Status AllReduceSum(float* data, size_t count) override {
    return AllReduceScaled(data, count, 1.0f);
  }

  // The scaling rides on the reduction's pass over this member's slice.
  Status AllReduceMean(float* data, size_t count) override {
    return AllReduceScaled(data, count, 1.0f / static_cast<float>(size()));
  }

  Status ReduceScatterSum(float* data,
                          const std::vector<int64_t>& counts) override {
    RETURN_IF_ERROR(CheckCounts(counts, "reduce-scatter"));
    if (size() == 1) return Status::Ok();
    RETURN_IF_ERROR(group_->Publish(rank(), data, timeout_, "reduce-scatter"));
    ReduceOwnSlice(data, counts);
    return group_->Barrier(timeout_, "reduce-scatter's end");
  }

  Status AllGather(float* data, const std::vector<int64_t>& counts) override {
    RETURN_IF_ERROR(CheckCounts(counts, "all-gather"));
    if (size() == 1) return Status::Ok();
    RETURN_IF_ERROR(group_->Publish(rank(), data, timeout_, "all-gather"));
    GatherOtherSlices(data, counts);
    return group_->Barrier(timeout_, "all-gather's end");
  }

  Status Barrier() override {
    if (size() == 1) return Status::Ok();
    return group_->Barrier(timeout_, "barrier");
  }

 private:
  Status CheckCounts(const std::vector<int64_t>& counts, const char* what) {
    if (static_cast<int>(counts.size()) == size()) return Status::Ok();
    return Status::InvalidArgument("{}: {} counts for {} members", what,
                                   counts.size(), size());
  }

  Status AllReduceScaled(float* data, size_t count, float scale) {
    if (size() == 1 || count == 0) return Status::Ok();
    const std::vector<int64_t> counts =
        BalancedCounts(static_cast<int64_t>(count), size());
    RETURN_IF_ERROR(group_->Publish(rank(), data, timeout_, "all-reduce"));
    ReduceOwnSlice(data, counts, scale);
    RETURN_IF_ERROR(group_->Barrier(timeout_, "all-reduce's gather"));
    GatherOtherSlices(data, counts);
    return group_->Barrier(timeout_, "all-reduce's end");
  }

  // This member's slice of `data` becomes the sum, in rank order, of that
  // slice of every member's buffer, times `scale` (in float, after the sum;
  // 1 leaves the sum). Only this member writes the slice of its own buffer,
  // and the others read it only after the next barrier. One pass over the
  // inputs, a block at a time through a small buffer that stays in the
  // cache: each element is read once from each member and written once.
  void ReduceOwnSlice(float* data, const std::vector<int64_t>& counts,
                      float scale = 1.0f) {
    const auto [begin, end] = SliceOf(counts, rank());
    if (begin == end) return;
    std::vector<const float*> in(static_cast<size_t>(size()));
    for (int r = 0; r < size(); ++r)
      in[static_cast<size_t>(r)] = r == rank() ? data : group_->buffer(r);
    constexpr int64_t kBlock = 1024;
    float acc[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t n = std::min(kBlock, end - b);
      std::memcpy(acc, in[0] + b, static_cast<size_t>(n) * sizeof(float));
      for (int r = 1; r < size(); ++r) {
        const float* x = in[static_cast<size_t>(r)] + b;
        for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
      }
      if (scale != 1.0f)
        for (int64_t i = 0; i < n; ++i) acc[i] *= scale;
      std::memcpy(data + b, acc, static_cast<size_t>(n) * sizeof(float));
    }
  }

  // Every other member's (reduced) slice into this member's buffer.
  void GatherOtherSlices(float* data, const std::vector<int64_t>& counts) {
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      const auto [begin, end] = SliceOf(counts, r);
      if (end > begin)
        std::memcpy(data + begin, group_->buffer(r) + begin,
                    static_cast<size_t>(end - begin) * sizeof(float));
    }
  }

  std::shared_ptr<InprocGroup> group_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace

CollectiveHub::CollectiveHub() = default;
CollectiveHub::~CollectiveHub() = default;

Result<std::unique_ptr<Collective>> CollectiveHub::Join(
    const CollectiveOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
    return Status::InvalidArgument("collective: rank {} of a group of {}",
                                   o.rank, o.size);
  std::shared_ptr<InprocGroup> group;
  {
    MutexLock lock(&mu_);
    std::shared_ptr<InprocGroup>& slot = groups_[o.prefix];
    if (slot && slot->size() != o.size)
      return Status::InvalidArgument(
          "collective group '{}' has {} members; rank {} joined it as one "
          "of {}",
          o.prefix, slot->size(), o.rank, o.size);
    if (!slot || !slot->Take(o.rank)) {
      slot = std::make_shared<InprocGroup>(o.prefix, o.size);
      slot->Take(o.rank);
    }
    group = slot;
  }
  auto member = std::make_unique<InprocCollective>(group, o.rank, o.timeout);
  RETURN_IF_ERROR(group->Barrier(o.timeout, "group's formation"));
  return std::unique_ptr<Collective>(std::move(member));
}

}  // namespace strata
