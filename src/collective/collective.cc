#include "collective/collective.h"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <cstring>
#include <exception>
#include <numeric>

namespace strata {
namespace {

// Gloo reports every failure by exception; none may leave this file.
template <typename F>
Status Guard(const char* what, F&& f) {
  try {
    f();
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Unavailable("{} failed: {}", what, e.what());
  }
}

// The Gloo backend: Gloo's TCP transport, a full mesh.
class GlooCollective final : public Collective {
 public:
  GlooCollective(std::shared_ptr<gloo::Context> context, int rank, int size,
                 std::chrono::milliseconds timeout)
      : Collective(rank, size),
        context_(std::move(context)),
        timeout_(timeout) {}

  const char* backend() const override { return "gloo"; }
  Status AllReduceSum(float* data, size_t count) override;
  Status ReduceScatterSum(float* data,
                          const std::vector<int64_t>& counts) override;
  Status AllGather(float* data, const std::vector<int64_t>& counts) override;
  Status Barrier() override;

 private:
  std::shared_ptr<gloo::Context> context_;
  const std::chrono::milliseconds timeout_;
  uint32_t next_tag_ = 0;
  std::vector<float> scratch_;  // AllGather's output buffer
};

}  // namespace

Status Collective::AllReduceMean(float* data, size_t count) {
  RETURN_IF_ERROR(AllReduceSum(data, count));
  const float inv_n = 1.0f / static_cast<float>(size());
  for (size_t i = 0; i < count; ++i) data[i] *= inv_n;
  return Status::Ok();
}

std::vector<int64_t> BalancedCounts(int64_t total, int parts) {
  std::vector<int64_t> counts(static_cast<size_t>(parts), total / parts);
  for (int64_t i = 0; i < total % parts; ++i) ++counts[static_cast<size_t>(i)];
  return counts;
}

Result<std::unique_ptr<Collective>> Collective::Connect(
    const CollectiveOptions& o, gloo::rendezvous::Store& store) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return Status::InvalidArgument("collective: rank {} of a group of {}",
                                   o.rank, o.size);
  }
  std::shared_ptr<gloo::rendezvous::Context> context;
  Status st = Guard("connecting the collective group", [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = o.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::PrefixStore prefixed(o.prefix, store);
    context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
    context->setTimeout(o.timeout);
    context->connectFullMesh(prefixed, device);
  });
  if (!st.ok()) {
    return st.WithContext(
        fmt::format("member {} of {} at {}", o.rank, o.size, o.hostname));
  }
  return std::unique_ptr<Collective>(
      new GlooCollective(std::move(context), o.rank, o.size, o.timeout));
}

Status GlooCollective::AllReduceSum(float* data, size_t count) {
  if (size() == 1 || count == 0) return Status::Ok();
  return Guard("all-reduce", [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(
            &gloo::sum<float>));
    opts.setTag(next_tag_++);
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

Status GlooCollective::ReduceScatterSum(float* data,
                                        const std::vector<int64_t>& counts) {
  if (static_cast<int>(counts.size()) != size()) {
    return Status::InvalidArgument("reduce-scatter: {} counts for {} members",
                                   counts.size(), size());
  }
  if (size() == 1) return Status::Ok();
  const int64_t total =
      std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<int> recv(counts.begin(), counts.end());
  Status st = Guard("reduce-scatter", [&] {
    gloo::ReduceScatterHalvingDoubling<float> algorithm(
        context_, std::vector<float*>{data}, static_cast<int>(total), recv);
    algorithm.run();
  });
  if (!st.ok()) return st;
  // Gloo leaves a member's reduced slice at the start of its buffer; move
  // it to the slice's own place (the contract above).
  int64_t offset = 0;
  for (int r = 0; r < rank(); ++r) offset += counts[static_cast<size_t>(r)];
  if (offset > 0) {
    std::memmove(data + offset, data,
                 sizeof(float) *
                     static_cast<size_t>(counts[static_cast<size_t>(rank())]));
  }
  return Status::Ok();
}

Status GlooCollective::AllGather(float* data,
                                 const std::vector<int64_t>& counts) {
  if (static_cast<int>(counts.size()) != size()) {
    return Status::InvalidArgument("all-gather: {} counts for {} members",
                                   counts.size(), size());
  }
  if (size() == 1) return Status::Ok();
  const int64_t total =
      std::accumulate(counts.begin(), counts.end(), int64_t{0});
  int64_t offset = 0;
  for (int r = 0; r < rank(); ++r) offset += counts[static_cast<size_t>(r)];
  scratch_.resize(static_cast<size_t>(total));
  std::vector<size_t> elements(counts.begin(), counts.end());
  Status st = Guard("all-gather", [&] {
    gloo::AllgathervOptions opts(context_);
    opts.setInput(data + offset,
                  static_cast<size_t>(counts[static_cast<size_t>(rank())]));
    opts.setOutput(scratch_.data(), elements);
    opts.setTag(next_tag_++);
    opts.setTimeout(timeout_);
    gloo::allgatherv(opts);
  });
  if (st.ok()) std::memcpy(data, scratch_.data(), sizeof(float) * total);
  return st;
}

Status GlooCollective::Barrier() {
  if (size() == 1) return Status::Ok();
  return Guard("barrier", [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag_++);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

}  // namespace strata
