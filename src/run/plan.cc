#include "run/plan.h"

#include <algorithm>
#include <thread>

namespace strata {

Status ClusterPlan::Shape(const ModelShape& shape) {
  num_params = shape.num_params;
  tensor_ends = shape.tensor_ends;
  // Workers that will compute a large layer in row slices (cluster.
  // slice_kb, worker/layer_gate.cc) need ranges cut inside it: into the
  // fewest slices of at most about slice_kb, equal, of a multiple of 16
  // rows each. (A matrix product over a row count that is not a multiple
  // of 16 ran up to 25 % slower here: the BLAS kernels' tiles are 16 wide;
  // and each slice costs its products a fixed overhead, about 40 us a
  // step.)
  constexpr int64_t kSliceRows = 16;
  // Only settings every node shares decide it (not train.device, which a
  // node may set for itself): a GPU worker computes the layer whole, on
  // ranges cut the same way.
  if (shape.awaits_layers) {
    for (const ModelShape::Weight& w : shape.sliceable) {
      if (!options.SlicesWeight(w.numel())) continue;
      const int64_t slices =
          (w.numel() + options.slice_floats - 1) / options.slice_floats;
      const int64_t each = ((w.rows + slices - 1) / slices + kSliceRows - 1) /
                           kSliceRows * kSliceRows;
      for (int64_t r = each; r < w.rows; r += each)
        tensor_ends.push_back(w.offset + r * w.cols);
    }
  }
  std::sort(tensor_ends.begin(), tensor_ends.end());
  tensor_ends.erase(std::unique(tensor_ends.begin(), tensor_ends.end()),
                    tensor_ends.end());
  if (tensor_ends.empty() || tensor_ends.back() != num_params)
    tensor_ends.push_back(num_params);
  // Decentralized modes have no servers: one range, which nobody serves.
  ASSIGN_OR_RETURN(
      layout,
      KeyLayout::Aligned(num_params, std::max(1, options.roles.num_servers()),
                         options.pipeline_floats, tensor_ends));
  return Status::Ok();
}

void ClusterPlan::SetIterations(int64_t train_size) {
  ClusterRunOptions& o = options;
  if (o.iterations > 0) return;
  // Every worker runs the same count (sync steps always find n gradients),
  // and every node derives it without the shards: an epoch is N / n
  // examples per worker, whatever the sharding method, so methods are
  // compared on the same number of samples. (A shard with broadcast
  // examples is larger than N / n; docs/design/sharding.md.)
  const int64_t shard = train_size / options.roles.num_workers();
  o.iterations = o.epochs * ((shard + o.worker_batch - 1) / o.worker_batch);
}

int LeadRange(const ClusterRunOptions& options, const KeyLayout& layout) {
  if (!options.leader_first) return -1;
  return options.pipeline_floats > 0 && layout.num_ranges() > 1
             ? layout.num_ranges() - 1
             : 0;
}

int ThreadsPerWorker(const ClusterRunOptions& o) {
  if (o.threads_per_worker > 0) return o.threads_per_worker;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                         o.roles.num_workers());
}

}  // namespace strata
