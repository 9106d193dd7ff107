#include "ps/shard.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace strata {

ParameterShard::ParameterShard(KeyRange range, std::vector<float> initial,
                               const OptimizerOptions& optimizer,
                               const LrSchedule& schedule,
                               const UpdatePolicy& policy)
    : range_(range),
      schedule_(schedule),
      policy_(policy),
      params_(std::make_shared<std::vector<float>>(std::move(initial))),
      optimizer_(MakeOptimizer(optimizer, range.size())),
      active_workers_(policy.num_workers) {
  STRATA_CHECK(static_cast<int64_t>(params_->size()) == range.size());
  blocks_.push_back(params_);
  if (policy_.mode == UpdatePolicy::Mode::kSync) {
    accum_.assign(params_->size(), 0.0f);
    scratch_.assign(params_->size(), 0.0f);
  }
}

float* ParameterShard::WritableParamsLocked() {
  // Held by blocks_ and params_ (2), or by params_ alone: nobody else.
  const bool pooled =
      std::find(blocks_.begin(), blocks_.end(), params_) != blocks_.end();
  const long mine = pooled ? 2 : 1;
  if (params_.use_count() > mine) {
    std::shared_ptr<std::vector<float>> block;
    for (auto& b : blocks_) {
      if (b != params_ && b.use_count() == 1) {
        block = b;
        break;
      }
    }
    if (!block) {
      block = std::make_shared<std::vector<float>>(params_->size());
      if (blocks_.size() < kParamBlocks) blocks_.push_back(block);
    }
    // The last other holder's reads of `block` happen before its release
    // of the reference; pair with it before writing the block again.
    std::atomic_thread_fence(std::memory_order_acquire);
    std::memcpy(block->data(), params_->data(),
                sizeof(float) * params_->size());
    params_ = std::move(block);
  } else {
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  return params_->data();
}

void ParameterShard::ApplyLocked(const FloatPiece* pieces, size_t num_pieces,
                                 int64_t staleness, int64_t num_grads) {
  // The schedule advances in worker iterations: an update that used g
  // gradients is g/n of an iteration of every worker.
  const int64_t step = version_ * num_grads / std::max(1, policy_.num_workers);
  double rate = schedule_.Rate(step) * policy_.rate_scale;
  if (policy_.inverse_staleness && staleness > 1)
    rate /= static_cast<double>(staleness);
  float* params = WritableParamsLocked();
  if (policy_.rule == UpdatePolicy::Rule::kElastic) {
    for (size_t k = 0; k < num_pieces; ++k) {
      float* w = params + pieces[k].offset;
      const float* d = pieces[k].data;
      for (int64_t i = 0; i < pieces[k].size; ++i) w[i] += d[i];
    }
  } else {
    optimizer_->StepPieces(params, pieces, num_pieces, rate);
  }
  ++version_;
  ++stats_.updates;
}

ParameterShard::PushOutcome ParameterShard::Push(const FloatPiece* pieces,
                                                 size_t num_pieces,
                                                 int64_t base_version) {
  MutexLock lock(&mu_);
  const int64_t staleness = std::max<int64_t>(0, version_ - base_version);
  if (policy_.mode == UpdatePolicy::Mode::kAsync) {
    ApplyLocked(pieces, num_pieces, staleness, 1);
    ++stats_.applied_gradients;
    ++stats_.staleness[staleness];
    return {PushOutcome::State::kApplied, version_, staleness};
  }
  if (staleness > 0) {
    if (!policy_.defer_late) {
      ++stats_.dropped;
      return {PushOutcome::State::kDropped, version_, staleness};
    }
    ++stats_.deferred;
  }
  int64_t covered = 0;
  for (size_t k = 0; k < num_pieces; ++k) covered += pieces[k].size;
  const bool whole = covered == range_.size();
  if (accum_count_ == 0 && whole) {
    if (StepSizeLocked() <= 1) {
      // A step of one gradient: its mean is the gradient itself (x * 1.0f
      // is x), applied from the message as it is, as in asynchronous mode,
      // instead of summed into the accumulator and read back from there.
      ++stats_.staleness[staleness];
      CloseStepLocked(pieces, num_pieces, staleness, 1);
      return {PushOutcome::State::kApplied, version_, staleness,
              last_step_size_};
    }
    // The first gradient of a step is copied, not added to zeros: the
    // accumulator is not cleared after a step.
    for (size_t k = 0; k < num_pieces; ++k) {
      std::memcpy(accum_.data() + pieces[k].offset, pieces[k].data,
                  sizeof(float) * static_cast<size_t>(pieces[k].size));
    }
  } else {
    if (accum_count_ == 0) std::fill(accum_.begin(), accum_.end(), 0.0f);
    for (size_t k = 0; k < num_pieces; ++k) {
      float* a = accum_.data() + pieces[k].offset;
      const float* g = pieces[k].data;
      for (int64_t i = 0; i < pieces[k].size; ++i) a[i] += g[i];
    }
  }
  ++accum_count_;
  ++stats_.staleness[staleness];
  accum_max_staleness_ = std::max(accum_max_staleness_, staleness);
  if (!MaybeCloseLocked()) {
    return {PushOutcome::State::kPending, version_, staleness};
  }
  return {PushOutcome::State::kApplied, version_, staleness, last_step_size_};
}

ParameterShard::PushOutcome ParameterShard::PushTagged(const FloatPiece* pieces,
                                                       size_t num_pieces,
                                                       int64_t step,
                                                       int64_t size) {
  MutexLock lock(&mu_);
  if (step < version_) {
    // Already closed (a duplicate): nothing to add.
    return {PushOutcome::State::kApplied, version_, 0, last_step_size_};
  }
  TaggedStep& t = tagged_[step];
  const int64_t n = range_.size();
  if (t.sum.empty()) t.sum.assign(static_cast<size_t>(n), 0.0f);
  for (size_t k = 0; k < num_pieces; ++k) {
    float* a = t.sum.data() + pieces[k].offset;
    const float* g = pieces[k].data;
    for (int64_t i = 0; i < pieces[k].size; ++i) a[i] += g[i];
  }
  ++t.count;
  t.size = size;
  ++stats_.staleness[0];
  // Close every complete step, in order.
  for (auto it = tagged_.find(version_);
       it != tagged_.end() && it->second.count >= it->second.size;
       it = tagged_.find(version_)) {
    const int64_t count = it->second.count;
    const float inv =
        policy_.sum_gradients ? 1.0f : 1.0f / static_cast<float>(count);
    for (int64_t i = 0; i < n; ++i) scratch_[i] = it->second.sum[i] * inv;
    const FloatPiece mean{0, scratch_.data(), n};
    ApplyLocked(&mean, 1, 0, count);
    stats_.applied_gradients += count;
    if (count >= policy_.updates_per_step) {
      ++stats_.gradients_per_update[count];
    } else {
      ++stats_.tail_updates;
    }
    last_step_size_ = count;
    tagged_.erase(it);
  }
  if (step < version_) {
    return {PushOutcome::State::kApplied, version_, 0, last_step_size_};
  }
  return {PushOutcome::State::kPending, version_, 0};
}

int64_t ParameterShard::last_step_size() const {
  MutexLock lock(&mu_);
  return last_step_size_;
}

int64_t ParameterShard::StepSizeLocked() const {
  return std::min<int64_t>(policy_.updates_per_step,
                           std::max(1, active_workers_));
}

void ParameterShard::CloseStepLocked(const FloatPiece* pieces,
                                     size_t num_pieces, int64_t staleness,
                                     int64_t count) {
  ApplyLocked(pieces, num_pieces, staleness, count);
  stats_.applied_gradients += count;
  last_step_size_ = count;
  if (active_workers_ >= policy_.updates_per_step) {
    ++stats_.gradients_per_update[count];
  } else {
    ++stats_.tail_updates;
  }
}

bool ParameterShard::MaybeCloseLocked() {
  if (accum_count_ == 0 || accum_count_ < StepSizeLocked()) return false;
  const int64_t n = range_.size();
  const float inv =
      policy_.sum_gradients ? 1.0f : 1.0f / static_cast<float>(accum_count_);
  const float* mean_data = accum_.data();
  if (inv != 1.0f) {
    for (int64_t i = 0; i < n; ++i) scratch_[i] = accum_[i] * inv;
    mean_data = scratch_.data();
  }
  const FloatPiece mean{0, mean_data, n};
  CloseStepLocked(&mean, 1, accum_max_staleness_, accum_count_);
  // The accumulator is left as it is: the next step's first gradient
  // overwrites it.
  accum_count_ = 0;
  accum_max_staleness_ = 0;
  return true;
}

bool ParameterShard::WorkerLeft() {
  MutexLock lock(&mu_);
  if (active_workers_ > 0) --active_workers_;
  if (policy_.mode != UpdatePolicy::Mode::kSync || policy_.follower)
    return false;
  return MaybeCloseLocked();
}

void ParameterShard::WorkerRejoined() {
  MutexLock lock(&mu_);
  if (active_workers_ < policy_.num_workers) ++active_workers_;
}

int64_t ParameterShard::ReadIfAtLeast(int64_t min_version, float* out) const {
  MutexLock lock(&mu_);
  if (version_ < min_version) return -1;
  std::memcpy(out, params_->data(), sizeof(float) * params_->size());
  return version_;
}

std::shared_ptr<const std::vector<float>> ParameterShard::SnapshotIfAtLeast(
    int64_t min_version, int64_t* version) const {
  MutexLock lock(&mu_);
  if (version_ < min_version) return nullptr;
  *version = version_;
  return params_;
}

Status ParameterShard::Overwrite(const float* values, int64_t size) {
  MutexLock lock(&mu_);
  if (size != range_.size()) {
    return Status::InvalidArgument("range [{}, {}) has {} parameters, got {}",
                                   range_.begin, range_.end, range_.size(),
                                   size);
  }
  std::memcpy(WritableParamsLocked(), values, sizeof(float) * size);
  return Status::Ok();
}

ShardState ParameterShard::SaveState() const {
  MutexLock lock(&mu_);
  ShardState s;
  s.params = *params_;
  s.optimizer = optimizer_->SaveState();
  s.version = version_;
  s.stats = stats_;
  return s;
}

Status ParameterShard::RestoreState(const ShardState& state) {
  MutexLock lock(&mu_);
  if (static_cast<int64_t>(state.params.size()) != range_.size()) {
    return Status::InvalidArgument(
        "range [{}, {}) has {} parameters, the saved state {}", range_.begin,
        range_.end, range_.size(), state.params.size());
  }
  RETURN_IF_ERROR(optimizer_->RestoreState(state.optimizer));
  std::memcpy(WritableParamsLocked(), state.params.data(),
              sizeof(float) * state.params.size());
  version_ = state.version;
  stats_ = state.stats;
  return Status::Ok();
}

int64_t ParameterShard::version() const {
  MutexLock lock(&mu_);
  return version_;
}

ShardStats ParameterShard::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace strata
