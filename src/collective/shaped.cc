#include "collective/shaped.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

namespace strata {

int64_t RingStepsNs(const std::vector<LinkSpec>& ring, uint64_t chunk_bytes,
                    int steps) {
  if (ring.empty() || steps <= 0) return 0;
  int64_t step = 0;
  for (const LinkSpec& link : ring) {
    step = std::max(step, link.SerializationNs(kWireHeaderBytes + chunk_bytes) +
                              link.latency_ns);
  }
  return step * steps;
}

namespace {

using Clock = std::chrono::steady_clock;

class ShapedCollective final : public Collective {
 public:
  ShapedCollective(std::unique_ptr<Collective> inner,
                   std::vector<LinkSpec> ring)
      : Collective(inner->rank(), inner->size()),
        inner_(std::move(inner)),
        ring_(std::move(ring)) {}

  const char* backend() const override { return inner_->backend(); }

  Status AllReduceSum(float* data, size_t count) override {
    const uint64_t chunk = Chunk(count * sizeof(float));
    return Timed(RingStepsNs(ring_, chunk, 2 * (size() - 1)),
                 [&] { return inner_->AllReduceSum(data, count); });
  }
  Status AllReduceMean(float* data, size_t count) override {
    const uint64_t chunk = Chunk(count * sizeof(float));
    return Timed(RingStepsNs(ring_, chunk, 2 * (size() - 1)),
                 [&] { return inner_->AllReduceMean(data, count); });
  }
  Status ReduceScatterSum(float* data,
                          const std::vector<int64_t>& counts) override {
    return Timed(RingStepsNs(ring_, Largest(counts), size() - 1),
                 [&] { return inner_->ReduceScatterSum(data, counts); });
  }
  Status AllGather(float* data, const std::vector<int64_t>& counts) override {
    return Timed(RingStepsNs(ring_, Largest(counts), size() - 1),
                 [&] { return inner_->AllGather(data, counts); });
  }
  Status Barrier() override {
    return Timed(RingStepsNs(ring_, 0, size() - 1),
                 [&] { return inner_->Barrier(); });
  }

 private:
  uint64_t Chunk(uint64_t bytes) const { return (bytes + size() - 1) / size(); }
  static uint64_t Largest(const std::vector<int64_t>& counts) {
    int64_t most = 0;
    for (int64_t c : counts) most = std::max(most, c);
    return static_cast<uint64_t>(most) * sizeof(float);
  }
  template <typename F>
  Status Timed(int64_t model_ns, F call) {
    const Clock::time_point start = Clock::now();
    Status s = call();
    if (s.ok())
      std::this_thread::sleep_until(start + std::chrono::nanoseconds(model_ns));
    return s;
  }

  std::unique_ptr<Collective> inner_;
  const std::vector<LinkSpec> ring_;
};

}  // namespace

std::unique_ptr<Collective> NewShapedCollective(
    std::unique_ptr<Collective> inner, std::vector<LinkSpec> ring) {
  return std::make_unique<ShapedCollective>(std::move(inner), std::move(ring));
}

}  // namespace strata
