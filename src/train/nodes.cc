#include "train/nodes.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>

#include "common/log.h"
#include "data/batch_sampler.h"
#include "train/batch.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Result<ClusterRunOptions> ClusterRunOptions::FromConfig(const Config& c) {
  ClusterRunOptions o;
  o.mode = c.GetString("cluster.mode");
  o.shape.num_servers = static_cast<int>(c.GetInt("cluster.servers"));
  o.shape.num_workers = static_cast<int>(c.GetInt("cluster.workers"));
  o.shape.evaluator = c.GetBool("cluster.evaluator");
  const int n = o.shape.num_workers;
  const int64_t batch = c.GetInt("train.batch_size");
  if (c.GetBool("cluster.adapt_hyperparams")) {
    if (batch < n) {
      return Status::InvalidArgument(
          "train.batch_size = {} cannot be split over cluster.workers = {} "
          "(per-worker "
          "batch B/n would be 0); raise the batch or set "
          "cluster.adapt_hyperparams = false",
          batch, n);
    }
    o.worker_batch = batch / n;
  } else {
    o.worker_batch = batch;
  }
  const int64_t k = c.GetInt("cluster.updates_per_step");
  if (k > n) {
    return Status::InvalidArgument(
        "cluster.updates_per_step = {} is more than cluster.workers = {} (k of "
        "n needs k <= n)",
        k, n);
  }
  o.iterations = c.GetInt("train.iterations");
  o.epochs = c.GetInt("train.epochs");
  o.pull_interval = c.GetInt("cluster.pull_interval");
  o.overlap = c.GetBool("cluster.overlap");
  if (o.overlap && o.mode != "async") {
    return Status::InvalidArgument(
        "cluster.overlap = true needs cluster.mode = \"async\" (it is \"{}\"): "
        "sync and ssp wait for their step or clock before computing",
        o.mode);
  }
  o.staleness = o.mode == "ssp" ? c.GetInt("cluster.staleness") : -1;
  o.shuffle = c.GetBool("data.shuffle");
  o.seed = static_cast<uint64_t>(c.GetInt("run.seed"));
  o.log_every = c.GetInt("train.log_every");
  o.eval_batch = c.GetInt("train.eval_batch_size");
  o.eval_every_updates = c.GetInt("eval.every_updates");
  o.eval_every_s = c.GetFloat("eval.every_s");
  o.worker_delay_ms = static_cast<int>(c.GetInt("cluster.worker_delay_ms"));
  o.fail_worker = static_cast<int>(c.GetInt("cluster.fail_worker"));
  o.fail_at = c.GetInt("cluster.fail_at");
  o.request_timeout =
      std::chrono::milliseconds(c.GetInt("cluster.request_timeout_ms"));
  return o;
}

nlohmann::json WorkerMetrics::ToJson() const {
  nlohmann::json j{{"worker", index},
                   {"iterations", iterations},
                   {"samples", samples},
                   {"compute_s", compute_s},
                   {"comm_s", comm_s},
                   {"bytes_pushed", bytes_pushed},
                   {"bytes_pulled", bytes_pulled},
                   {"dropped_gradients", dropped_gradients},
                   {"finished", finished}};
  if (!error.empty()) j["error"] = error;
  return j;
}

Result<WorkerMetrics> RunWorker(const Config& config,
                                const ClusterRunOptions& o, int index,
                                const Dataset& train, const ShardSet& shards,
                                PsClient& client, ClusterMember& member,
                                const RunDirectory* run_dir,
                                const std::atomic<bool>* stop) {
  WorkerMetrics m;
  m.index = index;
  const auto start = Clock::now();
  ASSIGN_OR_RETURN(Model model, CreateModel(ModelOptions::FromConfig(config),
                                            InputSpecOf(train)));
  const int k = client.layout().num_servers();
  if (index == 0) {
    // Worker 0 owns the initial model: every worker then pulls the same one.
    auto init =
        client
            .PushInitial(model.flat.param_data(),
                         std::make_shared<torch::Tensor>(model.flat.params()))
            ->Wait(o.request_timeout);
    if (!init.ok())
      return init.status().WithContext("pushing the initial model");
  }
  RETURN_IF_ERROR(member.Barrier(0, o.request_timeout));

  if (index >= static_cast<int>(shards.worker_indices.size()) ||
      shards.worker_indices[index].empty()) {
    return Status::InvalidArgument(
        "worker {} has no examples (more workers than examples?)", index);
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<BatchSampler> sampler,
      MakeBatchSampler(
          config.GetString("data.sampler"), shards.worker_indices[index],
          train.labels, shards.cluster_ids,
          o.seed * 1000003 + static_cast<uint64_t>(index), o.shuffle));
  BatchSampler& shuffler = *sampler;
  const int64_t total =
      o.iterations > 0 ? o.iterations
                       : o.epochs * shuffler.BatchesPerEpoch(o.worker_batch);
  Batcher batcher(train, config.GetBool("data.augment"),
                  (o.seed << 8) ^ static_cast<uint64_t>(index));
  std::mt19937_64 delay_rng(o.seed * 7919 + static_cast<uint64_t>(index));
  const bool sync = o.mode == "sync";
  const bool async = o.mode == "async";
  bool pulled_with_push = false;      // the last push brought the parameters
  std::vector<int64_t> pulled(k, 0);  // versions of the local copy
  std::vector<int64_t> step(k, 0);    // sync: the step this worker is in
  std::vector<int64_t> indices;
  double window_loss = 0, window_acc = 0;
  int64_t window_n = 0;
  // cluster.overlap: the push in flight, the buffer it sends from, and the
  // buffer its parameters (if it pulls) arrive in.
  std::unique_ptr<PushHandle> inflight;
  bool inflight_pulls = false;
  std::shared_ptr<std::vector<float>> side_grads;
  std::vector<float> side_params;
  if (o.overlap) {
    side_grads = std::make_shared<std::vector<float>>(model.flat.size());
    side_params.resize(static_cast<size_t>(model.flat.size()));
  }
  // Books a finished push (and the pull that came with it).
  auto account = [&](const PushResult& pushed, bool pulls) {
    if (pulls) {
      pulled = pushed.versions;
      m.bytes_pulled += pushed.pulled_bytes;
    }
    m.bytes_pushed += pushed.bytes;
    m.dropped_gradients += pushed.dropped_ranges > 0 ? 1 : 0;
  };
  auto finish_inflight = [&](int64_t it) -> Status {
    if (!inflight) return Status::Ok();
    auto pushed = inflight->Wait(o.request_timeout);
    inflight.reset();
    if (!pushed.ok()) {
      return pushed.status().WithContext(
          fmt::format("worker {} push of iteration {}", index, it - 1));
    }
    if (inflight_pulls) {
      std::memcpy(model.flat.param_data(), side_params.data(),
                  sizeof(float) * side_params.size());
    }
    account(*pushed, inflight_pulls);
    return Status::Ok();
  };

  for (int64_t it = 0; it < total; ++it) {
    if (stop != nullptr && stop->load()) break;
    if (member.shutdown_requested() && member.shutdown_reason().empty()) {
      break;  // the coordinator ended the run early (Ctrl-C): finish cleanly
    }
    if (member.shutdown_requested()) {
      return Status::Cancelled(
          "worker {} stopped by the coordinator: {}", index,
          member.shutdown_reason().empty() ? "run ended"
                                           : member.shutdown_reason());
    }
    if (index == o.fail_worker && it == o.fail_at) {
      // Fault injection: vanish like a crashed process (no leave, no done;
      // the caller stops the heartbeats).
      return Status::Cancelled(
          "worker {} crashed at iteration {} (cluster.fail_worker)", index, it);
    }
    auto t0 = Clock::now();
    if (o.staleness >= 0)
      RETURN_IF_ERROR(member.ClockWait(it, o.request_timeout));
    if (it % o.pull_interval == 0 && !pulled_with_push) {
      auto p = client
                   .Pull(model.flat.param_data(),
                         sync ? step : std::vector<int64_t>{})
                   ->Wait(o.request_timeout);
      if (!p.ok())
        return p.status().WithContext(
            fmt::format("worker {} pull at iteration {}", index, it));
      pulled = p->versions;
      m.bytes_pulled += p->bytes;
    }
    auto t1 = Clock::now();
    const int64_t epoch = shuffler.Next(o.worker_batch, &indices);
    Batch batch = batcher.Gather(indices);
    model.flat.ZeroGrad();
    ASSIGN_OR_RETURN(StepResult r, ForwardBackward(*model.net, batch));
    if (o.worker_delay_ms > 0) {
      std::this_thread::sleep_for(
          std::chrono::milliseconds(static_cast<int64_t>(
              delay_rng() % static_cast<uint64_t>(o.worker_delay_ms + 1))));
    }
    auto t2 = Clock::now();
    // Asynchronous mode, next iteration pulls: push and pull in one round
    // trip (the parameters just after this gradient, as a pull right after
    // the push would return).
    pulled_with_push = async && (it + 1) % o.pull_interval == 0;
    if (o.overlap) {
      // The previous iteration's push (and pull) travelled while this one
      // computed: finish it, take its parameters, and send this gradient
      // from the side buffer while the next iteration computes.
      const std::vector<int64_t> base = pulled;  // what this step computed on
      RETURN_IF_ERROR(finish_inflight(it));
      std::memcpy(side_grads->data(), model.flat.grad_data(),
                  sizeof(float) * side_grads->size());
      inflight = pulled_with_push
                     ? client.PushPull(side_grads->data(), base,
                                       side_params.data(), side_grads)
                     : client.Push(side_grads->data(), base, side_grads);
      inflight_pulls = pulled_with_push;
    } else {
      // Zero copy: the gradient buffer is not touched again until the push
      // is acknowledged; the tensor handle keeps it alive for the transport.
      auto keep = std::make_shared<torch::Tensor>(model.flat.grads());
      auto handle =
          pulled_with_push
              ? client.PushPull(model.flat.grad_data(), pulled,
                                model.flat.param_data(), keep)
              : client.Push(model.flat.grad_data(), sync ? step : pulled, keep);
      auto pushed = handle->Wait(o.request_timeout);
      if (!pushed.ok())
        return pushed.status().WithContext(
            fmt::format("worker {} push at iteration {}", index, it));
      if (sync) step = pushed->versions;
      account(*pushed, pulled_with_push);
    }
    auto t3 = Clock::now();
    m.compute_s += Seconds(t1, t2);
    m.comm_s += Seconds(t0, t1) + Seconds(t2, t3);
    m.iterations = it + 1;
    m.samples += static_cast<int64_t>(indices.size());
    window_loss += r.loss;
    window_acc += r.accuracy;
    ++window_n;
    if (run_dir != nullptr &&
        ((it + 1) % o.log_every == 0 || it + 1 == total)) {
      nlohmann::json j{{"worker", index},
                       {"step", it + 1},
                       {"epoch", epoch},
                       {"wall_s", Seconds(start, Clock::now())},
                       {"train_loss", window_loss / window_n},
                       {"train_acc", window_acc / window_n},
                       {"samples", m.samples},
                       {"version", pulled.empty() ? 0 : pulled[0]}};
      RETURN_IF_ERROR(run_dir->AppendJson("metrics.jsonl", j));
      window_loss = window_acc = 0;
      window_n = 0;
    }
  }
  RETURN_IF_ERROR(finish_inflight(m.iterations));
  m.finished = m.iterations == total;
  auto left = client.Leave()->Wait(o.request_timeout);
  if (!left.ok())
    return left.status().WithContext(fmt::format("worker {} leaving", index));
  return m;
}

Status RunEvaluator(const Config& config, const ClusterRunOptions& o,
                    const DatasetSplits& data, PsClient& client,
                    const RunDirectory* run_dir, const std::atomic<bool>* done,
                    Clock::time_point start) {
  ASSIGN_OR_RETURN(Model model, CreateModel(ModelOptions::FromConfig(config),
                                            InputSpecOf(data.train)));
  const int k = client.layout().num_servers();
  const int n = o.shape.num_workers;
  const int64_t grads_per_update =
      o.mode == "sync" ? (config.GetInt("cluster.updates_per_step") > 0
                              ? config.GetInt("cluster.updates_per_step")
                              : n)
                       : 1;
  int64_t last_version = -1;
  while (!done->load()) {
    std::vector<int64_t> want;
    if (o.eval_every_updates > 0) {
      want.assign(k, std::max<int64_t>(0, last_version) + o.eval_every_updates);
    } else if (last_version >=
               0) {  // the first evaluation (the initial model) is immediate
      auto until = Clock::now() + std::chrono::duration<double>(o.eval_every_s);
      while (!done->load() && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (done->load()) break;
    }
    auto handle = client.Pull(model.flat.param_data(), want);
    // The pull waits on the servers until the version exists; check for the
    // end of the run meanwhile.
    Result<PullHandle::Pulled> pulled = Status::DeadlineExceeded("not yet");
    while (true) {
      pulled = handle->Wait(std::chrono::milliseconds(200));
      if (pulled.ok() ||
          pulled.status().code() != Status::Code::kDeadlineExceeded ||
          done->load())
        break;
    }
    if (!pulled.ok()) {
      if (done->load()) break;
      return pulled.status().WithContext("evaluator pull");
    }
    const int64_t version =
        *std::min_element(pulled->versions.begin(), pulled->versions.end());
    if (version == last_version) continue;
    last_version = version;
    RETURN_IF_ERROR(RecalibrateBatchNorm(*model.net, data.train, o.eval_batch,
                                         kBatchNormExamples)
                        .status());
    ASSIGN_OR_RETURN(EvalResult ev,
                     Evaluate(*model.net, data.val, o.eval_batch));
    nlohmann::json j{{"step", version * grads_per_update / n},
                     {"version", version},
                     {"wall_s", Seconds(start, Clock::now())},
                     {"val_loss", ev.loss},
                     {"val_acc", ev.accuracy}};
    if (run_dir != nullptr)
      RETURN_IF_ERROR(run_dir->AppendJson("eval.jsonl", j));
    LogInfo("evaluator: version {} (step {}): val loss {:.4f} acc {:.4f}",
            version, version * grads_per_update / n, ev.loss, ev.accuracy);
  }
  return Status::Ok();
}

}  // namespace strata
