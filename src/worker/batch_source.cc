#include "worker/batch_source.h"

#include <limits>

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

// Batches from the worker's own sampler over its shard.
class ShardBatches final : public BatchSource {
 public:
  ShardBatches(const ClusterRunOptions& o, int index, const Dataset& train,
               std::unique_ptr<BatchSampler> sampler)
      : BatchSource(o, train, index),
        sampler_(std::move(sampler)),
        batch_size_(o.worker_batch),
        total_(o.iterations > 0
                   ? o.iterations
                   : o.epochs * sampler_->BatchesPerEpoch(o.worker_batch)) {}

  int64_t total_steps() const override { return total_; }
  bool wants_losses() const override { return sampler_->wants_losses(); }
  Result<bool> Next(Batch* batch, int64_t* epoch) override {
    *epoch = sampler_->Next(batch_size_, &indices_);
    *batch = batcher_.Gather(indices_);
    return true;
  }
  void Done(const std::vector<float>& losses) override {
    if (sampler_->wants_losses()) sampler_->Observe(indices_, losses.data());
  }
  void SaveState(nlohmann::json& state) const override {
    BatchSource::SaveState(state);
    state["sampler"] = sampler_->SaveState();
  }
  Status RestoreState(const nlohmann::json& state) override {
    Status st =
        sampler_->RestoreState(state.value("sampler", nlohmann::json()));
    if (!st.ok())
      return Status::DataLoss("worker {} state: {}", index_, st.message());
    return BatchSource::RestoreState(state);
  }

 private:
  const std::unique_ptr<BatchSampler> sampler_;
  const int64_t batch_size_;
  const int64_t total_;
  std::vector<int64_t> indices_;
};

// Batches the data service streams (dataservice/batch_stream.h).
class StreamedBatches final : public BatchSource {
 public:
  StreamedBatches(const ClusterRunOptions& o, int index, const Dataset& shape,
                  BatchStream& stream)
      : BatchSource(o, shape, index),
        stream_(stream),
        wants_losses_(o.sampler == SamplerKind::kLossAware),
        // Dynamic assignment: any worker takes the next batch; train until
        // the service runs dry.
        total_(o.assignment == Assignment::kDynamic
                   ? std::numeric_limits<int64_t>::max()
                   : o.iterations) {}

  int64_t total_steps() const override { return total_; }
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
  Status BeforeCheckpoint() override { return stream_.SendAcks(); }
  double wait_s() const override { return stream_.wait_s(); }
  Status Finish() override { return stream_.Flush(); }

 private:
  BatchStream& stream_;
  const bool wants_losses_;
  const int64_t total_;
  StreamedBatch last_;
};

}  // namespace

Result<std::unique_ptr<BatchSource>> MakeBatchSource(const ClusterRunOptions& o,
                                                     int index,
                                                     const Dataset& train,
                                                     const ShardSet* shards,
                                                     BatchStream* stream) {
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
  return std::unique_ptr<BatchSource>(
      new ShardBatches(o, index, train, std::move(sampler)));
}

}  // namespace strata
