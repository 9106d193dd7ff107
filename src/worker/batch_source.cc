#include "worker/batch_source.h"

#include <limits>

#include "common/log.h"
#include "data/batch_cursor.h"

namespace strata {

void BatchSource::SaveState(nlohmann::json& state) const {
  state["augment_rng"] = batcher_.SaveRngState();
}

Status BatchSource::RestoreState(const nlohmann::json& state) {
  Status st = batcher_.RestoreRngState(state.value("augment_rng", ""));
  if (!st.ok())
    return Status::DataLoss("worker {} state: {}", index_, st.message());
  return Status::Ok();
}

namespace {

// Batches from the worker's own sampler over its shard. A run resumed on
// another number of workers first finishes the epoch the old workers were
// in: this worker's part of what they had left (worker/epoch_remainder.h),
// drawn by a sampler of the same kind, then goes on with its new shard.
class ShardBatches final : public BatchSource {
 public:
  ShardBatches(const ClusterRunOptions& o, int index, const Dataset& train,
               std::unique_ptr<BatchSampler> sampler, const ShardSet& shards,
               ShardsFor shards_for)
      : BatchSource(o, train, index),
        o_(o),
        train_(train),
        shards_(shards),
        shards_for_(std::move(shards_for)),
        sampler_(std::move(sampler)),
        batch_size_(o.worker_batch),
        initial_total_(o.iterations > 0 ? o.iterations
                                        : o.epochs * sampler_->BatchesPerEpoch(
                                                         o.worker_batch)),
        total_(initial_total_) {}

  int64_t total_steps() const override { return total_; }
  bool wants_losses() const override { return sampler_->wants_losses(); }
  Result<bool> Next(Batch* batch, int64_t* epoch) override {
    if (rest_done_) rest_.reset();
    from_rest_ = rest_ != nullptr;
    if (from_rest_) {
      rest_->Next(batch_size_, &indices_);
      rest_done_ = rest_->epoch_finished();
      *epoch = rest_epoch_;
    } else {
      *epoch = sampler_->Next(batch_size_, &indices_) + epoch_offset_;
    }
    *batch = batcher_.Gather(indices_);
    return true;
  }
  void Done(const std::vector<float>& losses) override {
    BatchSampler* from = from_rest_ ? rest_.get() : sampler_.get();
    if (from->wants_losses()) from->Observe(indices_, losses.data());
  }
  void SaveState(nlohmann::json& state) const override {
    BatchSource::SaveState(state);
    state["sampler"] = sampler_->SaveState();
    state["epoch_offset"] = epoch_offset_;
    // Recounted by a resize (a later resume keeps the count).
    if (total_ != initial_total_) state["total_steps"] = total_;
    if (rest_ && !rest_done_) {
      state["rest"] = {{"ids", rest_ids_},
                       {"epoch", rest_epoch_},
                       {"sampler", rest_->SaveState()}};
    }
  }
  Status RestoreState(const nlohmann::json& state) override;

 private:
  // The sampler over this worker's part of the epoch `epoch`.
  Status StartRest(std::vector<int64_t> ids, int64_t epoch);
  // A resume on another worker count at `step`: the rest of the epoch
  // re-planned; a run that counts epochs recounts its steps.
  Status Replan(const nlohmann::json& resize, int64_t step);
  Status DataLoss(const Status& st) const {
    return Status::DataLoss("worker {} state: {}", index_, st.message());
  }

  const ClusterRunOptions& o_;
  const Dataset& train_;
  const ShardSet& shards_;
  const ShardsFor shards_for_;
  const std::unique_ptr<BatchSampler> sampler_;
  const int64_t batch_size_;
  const int64_t initial_total_;
  int64_t total_;
  std::vector<int64_t> indices_;
  // The new shard's epochs count from here (a resize's next epoch).
  int64_t epoch_offset_ = 0;
  // The rest of an epoch after a resize (null: none, or drawn).
  std::unique_ptr<BatchSampler> rest_;
  std::vector<int64_t> rest_ids_;
  int64_t rest_epoch_ = 0;
  bool rest_done_ = false;
  bool from_rest_ = false;  // the last batch came from rest_
};

Status ShardBatches::StartRest(std::vector<int64_t> ids, int64_t epoch) {
  rest_ids_ = ids;
  rest_epoch_ = epoch;
  rest_done_ = false;
  ASSIGN_OR_RETURN(rest_, MakeRestSampler(o_, index_, std::move(ids), epoch,
                                          train_, shards_.cluster_ids));
  return Status::Ok();
}

Status ShardBatches::Replan(const nlohmann::json& resize, int64_t step) {
  if (!shards_for_) {
    return Status::FailedPrecondition(
        "worker {}: a resume on another worker count needs the run's "
        "shards for the old count",
        index_);
  }
  ASSIGN_OR_RETURN(EpochRemainder r,
                   ReplanEpoch(o_, resize, index_, train_, shards_for_));
  epoch_offset_ = r.next_epoch;
  if (!o_.iterations_set) total_ = StepsAfterResize(o_, step, r, train_.size());
  replan_examples_ = r.examples;
  replan_tv_ = r.tv;
  LogInfo(
      "worker {}: resumed on {} workers (the checkpoint's: {}): {} of the {} "
      "examples left in epoch {} are its part (class TV {:.4f}; the largest "
      "part's {:.4f}), then its new shard from epoch {}",
      index_, o_.roles.num_workers(), resize.value("from_workers", 0),
      r.mine.size(), r.examples, r.epoch, r.tv, r.max_tv, r.next_epoch);
  if (r.mine.empty()) return Status::Ok();
  return StartRest(std::move(r.mine), r.epoch);
}

Status ShardBatches::RestoreState(const nlohmann::json& state) {
  if (state.contains("resize")) {
    RETURN_IF_ERROR(Replan(state["resize"], state.value("step", int64_t{0})));
    return BatchSource::RestoreState(state);
  }
  Status st = sampler_->RestoreState(state.value("sampler", nlohmann::json()));
  if (!st.ok()) return DataLoss(st);
  epoch_offset_ = state.value("epoch_offset", int64_t{0});
  total_ = state.value("total_steps", initial_total_);
  if (state.contains("rest")) {
    const nlohmann::json& rest = state["rest"];
    RETURN_IF_ERROR(StartRest(rest.value("ids", std::vector<int64_t>()),
                              rest.value("epoch", int64_t{0})));
    st = rest_->RestoreState(rest.value("sampler", nlohmann::json()));
    if (!st.ok()) return DataLoss(st);
  }
  return BatchSource::RestoreState(state);
}

// Batches the data service streams (dataservice/batch_stream.h).
class StreamedBatches final : public BatchSource {
 public:
  StreamedBatches(const ClusterRunOptions& o, int index, const Dataset& shape,
                  BatchStream& stream)
      : BatchSource(o, shape, index),
        stream_(stream),
        wants_losses_(o.sampler == SamplerKind::kLossAware),
        dynamic_(o.assignment == Assignment::kDynamic),
        // Dynamic assignment: any worker takes the next batch; train until
        // the service runs dry.
        total_(o.assignment == Assignment::kDynamic
                   ? std::numeric_limits<int64_t>::max()
                   : o.iterations) {}

  int64_t total_steps() const override {
    return to_the_end_ ? std::numeric_limits<int64_t>::max() : total_;
  }
  bool wants_losses() const override { return wants_losses_; }
  Result<bool> Next(Batch* batch, int64_t* epoch) override {
    ASSIGN_OR_RETURN(bool got, stream_.Next(&last_));
    if (!got) return false;
    *epoch = last_.header.epoch;
    *batch =
        batcher_.FromRows(reinterpret_cast<const float*>(last_.features.data()),
                          reinterpret_cast<const int64_t*>(last_.labels.data()),
                          last_.header.size());
    return true;
  }
  void Done(const std::vector<float>& losses) override {
    // `losses` stays empty unless the sampler wants them.
    stream_.Ack(last_.header.seq, losses);
  }
  // Dynamic assignment: the prefetched batches go back, for a worker still
  // short of the round's step when nothing else is left.
  Status BeforeCheckpoint() override {
    return dynamic_ ? stream_.GiveBack() : stream_.SendAcks();
  }
  double wait_s() const override { return stream_.wait_s(); }
  Status Finish() override { return stream_.Flush(); }
  // After a resume on another worker count the data servers count this
  // worker's batches (dataservice/served_replan.h): it trains until they
  // say the end, and so does every later resume of it.
  void SaveState(nlohmann::json& state) const override {
    BatchSource::SaveState(state);
    if (to_the_end_) state["stream_to_the_end"] = true;
  }
  Status RestoreState(const nlohmann::json& state) override {
    to_the_end_ =
        state.contains("resize") || state.value("stream_to_the_end", false);
    return BatchSource::RestoreState(state);
  }

 private:
  BatchStream& stream_;
  const bool wants_losses_;
  const bool dynamic_;
  const int64_t total_;
  bool to_the_end_ = false;
  StreamedBatch last_;
};

}  // namespace

Result<std::unique_ptr<BatchSource>> MakeBatchSource(
    const ClusterRunOptions& o, int index, const Dataset& train,
    const ShardSet* shards, BatchStream* stream, ShardsFor shards_for) {
  if (stream != nullptr) {
    return std::unique_ptr<BatchSource>(
        new StreamedBatches(o, index, train, *stream));
  }
  if (shards == nullptr ||
      index >= static_cast<int>(shards->worker_indices.size()) ||
      shards->worker_indices[index].empty()) {
    return Status::InvalidArgument(
        "worker {} has no examples (more workers than examples?)", index);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<BatchSampler> sampler,
                   MakeBatchSampler(o.sampler, shards->worker_indices[index],
                                    train.labels, shards->cluster_ids,
                                    BatchCursor::SamplerSeed(o.seed, index),
                                    o.shuffle, o.loss_aware_max_boost));
  return std::unique_ptr<BatchSource>(new ShardBatches(
      o, index, train, std::move(sampler), *shards, std::move(shards_for)));
}

}  // namespace strata
