#include "worker/published_model.h"

namespace strata {

void PublishedModel::Publish(const float* params, int64_t size, int64_t step) {
  MutexLock lock(&mu);
  live = params;
  this->size = size;
  this->step = step;
}

void PublishedModel::AfterStep(int64_t steps, const WorkerMetrics* counters,
                               double data_wait_s) {
  MutexLock lock(&mu);
  step = steps;
  if (counters == nullptr) return;
  metrics = *counters;
  if (data_wait_s >= 0) metrics.data_wait_s = data_wait_s;
}

Message PublishedModel::Snapshot() {
  Message reply;
  reply.header.type = MessageType::kAck;
  MutexLock lock(&mu);
  reply.header.clock = step;
  if (live != nullptr) {
    reply.payloads.push_back(Buffer::CopyOf(live, sizeof(float) * size));
  } else if (frozen) {
    reply.payloads.push_back(
        Buffer::CopyOf(final_copy.data(), sizeof(float) * final_copy.size()));
  }
  return reply;
}

std::string PublishedModel::MetricsJson() {
  MutexLock lock(&mu);
  return metrics.ToJson().dump();
}

void PublishedModel::Freeze(int64_t step) {
  MutexLock lock(&mu);
  if (live != nullptr) final_copy.assign(live, live + size);
  live = nullptr;
  this->step = step;
  frozen = true;
}

}  // namespace strata
