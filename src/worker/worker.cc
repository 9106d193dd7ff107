#include "train/nodes.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <thread>

#include "cluster/coordinator.h"
#include "common/log.h"
#include "common/own_thread.h"
#include "common/safetensors.h"
#include "data/batch_cursor.h"
#include "data/batch_sampler.h"
#include "metrics/http_server.h"
#include "train/batch.h"
#include "train/data_service.h"
#include "train/exchange.h"
#include "train/step_profile.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A worker's checkpoint state as kCheckpointArrive carries it: payload 0 =
// JSON (the step, the counters, the sampler's cursor, the generators),
// payload 1 = safetensors with the model's "params" (modes whose workers
// keep their own model) and "optimizer/<buffer>" (the local optimizer).
Result<std::vector<Buffer>> EncodeWorkerState(const nlohmann::json& state,
                                              const float* params, int64_t size,
                                              const ExchangeState& exchange) {
  std::vector<SafeTensor> tensors;
  if (params != nullptr)
    tensors.push_back(SafeTensor::Floats("params", {size}, params));
  std::map<std::string, std::string> metadata;
  if (exchange.has_optimizer) {
    for (const auto& [name, values] : exchange.optimizer.buffers) {
      tensors.push_back(SafeTensor::Floats(
          "optimizer/" + name, {static_cast<int64_t>(values.size())},
          values.data()));
    }
    metadata["optimizer_steps"] = std::to_string(exchange.optimizer.steps);
  }
  for (const auto& [name, values] : exchange.buffers) {
    tensors.push_back(SafeTensor::Floats("exchange/" + name,
                                         {static_cast<int64_t>(values.size())},
                                         values.data()));
  }
  ASSIGN_OR_RETURN(std::string bytes, EncodeSafetensors(tensors, metadata));
  const std::string text = state.dump();
  std::vector<Buffer> out;
  out.push_back(Buffer::CopyOf(text.data(), text.size()));
  out.push_back(Buffer::CopyOf(bytes.data(), bytes.size()));
  return out;
}

}  // namespace

Result<ClusterRunOptions> ClusterRunOptions::FromConfig(const Config& c) {
  ClusterRunOptions o;
  ASSIGN_OR_RETURN(o.mode, ParseRunMode(c.GetString("cluster.mode")));
  const int n = static_cast<int>(c.GetInt("cluster.workers"));
  // Decentralized modes have no servers, whatever cluster.servers says.
  const int servers =
      UsesServers(o.mode) ? static_cast<int>(c.GetInt("cluster.servers")) : 0;
  // The evaluator node always exists: it evaluates the final model even
  // when cluster.evaluator turns the periodic evaluations off.
  o.data_servers = static_cast<int>(c.GetInt("cluster.data_servers"));
  ASSIGN_OR_RETURN(o.assignment,
                   ParseAssignment(c.GetString("data.assignment")));
  o.prefetch = static_cast<int>(c.GetInt("data.prefetch"));
  if (o.data_servers > n) {
    return Status::InvalidArgument(
        "cluster.data_servers = {} is more than cluster.workers = {} (each "
        "data server feeds the workers w mod m)",
        o.data_servers, n);
  }
  if (o.assignment == Assignment::kDynamic && o.data_servers == 0) {
    return Status::InvalidArgument(
        "data.assignment = \"dynamic\" needs the data service: set "
        "cluster.data_servers >= 1");
  }
  if (o.assignment == Assignment::kDynamic && o.mode != RunMode::kAsync) {
    return Status::InvalidArgument(
        "data.assignment = \"dynamic\" needs cluster.mode = \"async\" (it is "
        "\"{}\"): workers then take different numbers of steps, which "
        "synchronous steps, clocks and collectives cannot",
        RunModeName(o.mode));
  }
  o.roles = RoleTable::Standard(servers, n, /*evaluator=*/true, o.data_servers);
  const int64_t batch = c.GetInt("train.batch_size");
  const bool adapt = c.GetBool("cluster.adapt_hyperparams");
  if (adapt) {
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
  if (o.overlap && o.mode != RunMode::kAsync) {
    return Status::InvalidArgument(
        "cluster.overlap = true needs cluster.mode = \"async\" (it is \"{}\"): "
        "sync and ssp wait for their step or clock before computing",
        RunModeName(o.mode));
  }
  ASSIGN_OR_RETURN(o.compression,
                   ParseCompression(c.GetString("cluster.compression")));
  if (o.compression != Compression::kNone && !UsesServers(o.mode)) {
    return Status::InvalidArgument(
        "cluster.compression = \"{}\" compresses pushes to parameter "
        "servers; cluster.mode = \"{}\" has none (use sync, async, ssp or "
        "easgd, or compression = \"none\")",
        CompressionName(o.compression), RunModeName(o.mode));
  }
  o.compress_pulls = o.compression != Compression::kNone &&
                     c.GetBool("cluster.compress_pulls");
  o.staleness = o.mode == RunMode::kSsp ? c.GetInt("cluster.staleness") : -1;
  o.shuffle = c.GetBool("data.shuffle");
  o.seed = static_cast<uint64_t>(c.GetInt("run.seed"));
  o.log_every = c.GetInt("train.log_every");
  o.profile_from = c.GetInt("train.profile_from");
  o.profile_steps = c.GetInt("train.profile_steps");
  o.eval_batch = c.GetInt("train.eval_batch_size");
  o.eval_every_updates = c.GetInt("eval.every_updates");
  o.eval_every_s = c.GetFloat("eval.every_s");
  o.worker_delay_ms = static_cast<int>(c.GetInt("cluster.worker_delay_ms"));
  o.fail_worker = static_cast<int>(c.GetInt("cluster.fail_worker"));
  o.fail_at = c.GetInt("cluster.fail_at");
  {
    const std::string node = c.GetString("cluster.fail_node");
    o.fail_role = node == "server"        ? Role::kServer
                  : node == "evaluator"   ? Role::kEvaluator
                  : node == "data"        ? Role::kData
                  : node == "coordinator" ? Role::kCoordinator
                                          : Role::kWorker;
    o.fail_after = std::chrono::milliseconds(
        static_cast<int64_t>(c.GetFloat("cluster.fail_after_s") * 1000));
  }
  o.request_timeout =
      std::chrono::milliseconds(c.GetInt("cluster.request_timeout_ms"));
  o.heartbeat_interval =
      std::chrono::milliseconds(c.GetInt("cluster.heartbeat_interval_ms"));
  o.heartbeat_timeout =
      std::chrono::milliseconds(c.GetInt("cluster.heartbeat_timeout_ms"));
  o.checkpoint_every_updates = c.GetInt("checkpoint.every_updates");
  o.checkpoint_every_s = c.GetFloat("checkpoint.every_s");
  o.checkpoint_keep = static_cast<int>(c.GetInt("checkpoint.keep"));
  o.resume = c.GetBool("checkpoint.resume");
  o.restart = c.GetBool("cluster.restart");
  o.max_restarts = static_cast<int>(c.GetInt("cluster.max_restarts"));
  o.restart_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(c.GetFloat("cluster.restart_timeout_s") * 1000));
  if (o.restart && o.checkpoint_every_updates <= 0 &&
      o.checkpoint_every_s <= 0) {
    return Status::InvalidArgument(
        "cluster.restart = true restarts from the newest checkpoint: set "
        "checkpoint.every_updates or checkpoint.every_s too");
  }
  if (o.checkpoints()) {
    // Refused rather than ignored: a run left overnight must not believe it
    // is being checkpointed.
    const ExchangeFamily family = FamilyOf(o.mode);
    if (family == ExchangeFamily::kNeighbour ||
        family == ExchangeFamily::kGossip || family == ExchangeFamily::kTree) {
      return Status::Unimplemented(
          "checkpoints of cluster.mode = \"{}\" are not built yet: its "
          "workers' models travel between peers, and a checkpoint does not "
          "keep the messages in flight (docs/checkpoints.md); checkpoints work "
          "in local, sync, async, ssp, easgd, allreduce, ring and local-sgd",
          RunModeName(o.mode));
    }
  }
  o.metrics_address = c.GetString("cluster.metrics_address");
  if (!o.metrics_address.empty()) {
    std::string host;
    int port = 0;
    RETURN_IF_ERROR(ParseHostPort(o.metrics_address, "cluster.metrics_address",
                                  &host, &port));
  }

  const bool sync = o.mode == RunMode::kSync;
  o.updates_per_step = k > 0 ? static_cast<int>(k) : n;
  o.defer_late = c.GetString("cluster.late_gradients") == "defer";
  o.inverse_staleness = c.GetString("cluster.lr_staleness") == "inverse";
  o.server_rate_scale = (!sync && adapt) ? 1.0 / n : 1.0;
  o.sum_gradients = c.GetString("cluster.sync_reduce") == "sum";
  // Every range must close the same steps with the same gradients: with
  // several ranges (several servers, or pipelining's ranges on one), one
  // leads and the others follow (LeadRange).
  o.leader_first = sync && k > 0 && k < n;
  o.gradients_per_update = sync ? o.updates_per_step : 1;
  // Layer-wise pipelining: not with cluster.overlap (which has its own
  // overlap).
  o.pipeline = c.GetBool("cluster.pipeline");
  o.inline_server = c.GetBool("cluster.inline_server");
  o.layer_wait = c.GetBool("cluster.layer_wait");
  // Negative: the default for nodes that talk over a network transport
  // (TrainCluster turns it off in process over inproc).
  const double slice_kb = c.GetFloat("cluster.slice_kb");
  o.slice_floats = static_cast<int64_t>((slice_kb < 0 ? 256 : slice_kb) * 1024 /
                                        sizeof(float));
  if (o.pipeline && FamilyOf(o.mode) == ExchangeFamily::kPushPull &&
      !o.overlap) {
    o.pipeline_floats = std::max<int64_t>(
        1, static_cast<int64_t>(c.GetFloat("cluster.pipeline_kb") * 1024 /
                                sizeof(float)));
  }

  o.average_every = c.GetInt("cluster.average_every");
  o.elastic_alpha = c.GetFloat("cluster.elastic_alpha");
  o.topology = c.GetString("cluster.topology") == "torus" ? Topology::kTorus
                                                          : Topology::kRing;
  o.gossip_p = c.GetFloat("cluster.gossip_p");
  o.bucket_overlap = c.GetBool("cluster.bucket_overlap");
  o.tau_up = c.GetInt("cluster.tau_up");
  o.tau_down = c.GetInt("cluster.tau_down");
  o.tree_fanout = static_cast<int>(c.GetInt("cluster.tree_fanout"));
  o.bucket_floats = static_cast<int64_t>(c.GetFloat("cluster.bucket_mb") *
                                         (1 << 20) / sizeof(float));
  if (o.bucket_floats < 1) o.bucket_floats = 1;
  if (IsDecentralized(o.mode) && o.pull_interval != 1) {
    return Status::InvalidArgument(
        "cluster.pull_interval = {} applies to the parameter-server modes, "
        "not to cluster.mode = \"{}\"",
        o.pull_interval, RunModeName(o.mode));
  }
  return o;
}

void PublishedModel::Publish(const float* params, int64_t size, int64_t step) {
  std::lock_guard<std::mutex> lock(mu);
  live = params;
  this->size = size;
  this->step = step;
}

void PublishedModel::Freeze(int64_t step) {
  std::lock_guard<std::mutex> lock(mu);
  if (live != nullptr) final_copy.assign(live, live + size);
  live = nullptr;
  this->step = step;
  frozen = true;
}

Result<WorkerMetrics> RunWorker(const Config& config,
                                const ClusterRunOptions& o, int index,
                                const Dataset& train, const ShardSet& shards,
                                ExchangeEnv env, PublishedModel* published,
                                const RunDirectory* run_dir,
                                const std::atomic<bool>* stop,
                                BatchStream* stream,
                                WorkerCheckpoints* checkpoints) {
  WorkerMetrics m;
  m.index = index;
  const auto start = Clock::now();
  ClusterMember& member = *env.member;
  ASSIGN_OR_RETURN(Model model, CreateModel(ModelOptions::FromConfig(config),
                                            InputSpecOf(train)));
  RETURN_IF_ERROR(PlaceModel(model, DeviceOptions::FromConfig(config)));
  const bool on_device = model.flat.on_device();
  // On a GPU an in-place gradient sink's ranges wait for their own
  // gradients' copies only (the hooks below start them).
  if (on_device) {
    FlatParameters* flat = &model.flat;
    env.grads_ready = [flat](int64_t offset, int64_t count) {
      flat->WaitGrads(offset, count);
    };
  }
  env.options = &o;
  env.index = index;
  env.model.params = model.flat.param_data();
  env.model.grads = model.flat.grad_data();
  env.model.size = model.flat.size();
  // The flat tensors own the buffers; a zero-copy send keeps them alive.
  auto owner = std::make_shared<std::pair<torch::Tensor, torch::Tensor>>(
      model.flat.params(), model.flat.grads());
  env.model.owner = owner;
  env.metrics = &m;
  env.params_mu = &published->mu;
  // The forward pass may start while a pull is still arriving: each layer
  // of a built-in model waits for its own parameters (ClassifierImpl::
  // Await). On a GPU each layer's parameters are then queued for upload as
  // they arrive, ahead of that layer's kernels.
  env.forward_awaits = o.layer_wait && model.net->awaits_layers();
  published->Publish(env.model.params, env.model.size, 0);
  // The model goes away with this function: whatever happens, leave a copy
  // of it (and no pointer into it) behind for the evaluator.
  struct FreezeAtExit {
    PublishedModel* p;
    const WorkerMetrics* m;
    ~FreezeAtExit() { p->Freeze(m->iterations); }
  } freeze_at_exit{published, &m};
  ASSIGN_OR_RETURN(std::unique_ptr<Exchange> exchange, MakeExchange(env));
  // What the forward pass waited for parameters in a step: communication,
  // not compute, in the metrics.
  double param_wait_s = 0;
  bool param_wait_failed = false;
  // GPU: the floats of the host copy uploaded so far this step (a prefix).
  int64_t uploaded = 0;
  if (env.forward_awaits) {
    model.net->set_param_gate(
        PrefixGate(model, [&exchange, &param_wait_s, &param_wait_failed, &model,
                           &uploaded](int64_t end) {
          const auto t = Clock::now();
          Status in = exchange->AwaitParams(end);
          param_wait_s += Seconds(t, Clock::now());
          if (in.ok()) {
            // GPU: the layer's kernels follow its parameters' copy on the
            // same stream. Nothing writes the range on the host before the
            // step's push of it, which waits for its gradient's copy, and
            // that follows the forward pass on the device.
            const int64_t to = end < 0 ? model.flat.size() : end;
            if (to > uploaded) {
              model.flat.UploadRange(uploaded, to - uploaded);
              uploaded = to;
            }
            // Before the backward pass: the previous step's push may have
            // read the gradient buffer until every parameter was in
            // (pipelined sync and async take their acks here).
            if (end < 0) model.flat.ZeroGrad();
            return;
          }
          param_wait_failed = true;
          throw ParamWaitError(std::move(in));
        }));
    // P3-style row slices of the large layers, cut at the ranges' bounds:
    // each slice's gradient leaves as soon as the backward pass has it, and
    // the next forward pass starts on a slice once its range is back.
    // Only a layer the plan cut at its rows for that (ClusterPlan::SizeFor:
    // larger than cluster.slice_kb); a server's share may end inside a
    // smaller one, which stays whole.
    // Not on a GPU: its kernels take the layer whole (docs/gpu.md).
    bool sliced_by_plan = false;
    for (const torch::Tensor& w : model.net->sliceable_weights())
      sliced_by_plan = sliced_by_plan || o.SlicesWeight(w.numel());
    if (sliced_by_plan && !on_device && env.layout != nullptr &&
        env.layout->num_ranges() > 1) {
      std::vector<int64_t> cuts;
      for (const KeyRange& r : env.layout->ranges()) cuts.push_back(r.begin);
      const int slices = model.net->SliceLayers(model.flat.param_data(), cuts);
      m.layer_slices = slices;
      if (slices > 0 && index == 0)
        LogDebug("worker 0: a layer computes in {} row slices", slices);
    }
  }
  // The gate points at this frame's exchange: gone with it.
  struct ClearGateAtExit {
    ClassifierImpl* net;
    ~ClearGateAtExit() { net->set_param_gate(nullptr); }
  } clear_gate_at_exit{model.net.get()};
  // Resuming (docs/checkpoints.md): the worker's own model and the
  // strategy's state go back before Start(); the cursors once the sampler
  // exists, below.
  const bool keeps_model = FamilyOf(o.mode) != ExchangeFamily::kPushPull;
  nlohmann::json resumed;
  if (checkpoints != nullptr && checkpoints->restore.payloads.size() == 2) {
    const std::string what = fmt::format("worker {} state", index);
    resumed = nlohmann::json::parse(checkpoints->restore.payloads[0].ToString(),
                                    nullptr, /*allow_exceptions=*/false);
    if (!resumed.is_object() ||
        !resumed.value("step", nlohmann::json()).is_number_integer()) {
      return Status::DataLoss("{}: bad JSON", what);
    }
    ASSIGN_OR_RETURN(
        SafetensorsFile file,
        DecodeSafetensors(checkpoints->restore.payloads[1].ToString(), what));
    if (keeps_model) {
      const SafeTensor* p = file.Find("params");
      if (p == nullptr || p->numel() != env.model.size) {
        return Status::DataLoss("{}: no \"params\" of {} floats", what,
                                env.model.size);
      }
      const std::vector<float> values = p->ToFloats();
      std::copy(values.begin(), values.end(), env.model.params);
    }
    ExchangeState es;
    for (const SafeTensor& t : file.tensors) {
      if (t.name.rfind("optimizer/", 0) == 0) {
        es.has_optimizer = true;
        es.optimizer.buffers[t.name.substr(10)] = t.ToFloats();
      } else if (t.name.rfind("exchange/", 0) == 0) {
        es.buffers[t.name.substr(9)] = t.ToFloats();
      }
    }
    auto steps = file.metadata.find("optimizer_steps");
    if (steps != file.metadata.end())
      es.optimizer.steps = std::stoll(steps->second);
    Status restored = exchange->RestoreState(es);
    if (!restored.ok())
      return Status::DataLoss("{}: {}", what, restored.message());
  }
  RETURN_IF_ERROR(exchange->Start());
  // Strategies that overlap communication with the backward pass get each
  // parameter's gradient from a hook as autograd produces it: a tensor hook
  // sees the gradient before it is accumulated into .grad; a sink that
  // works in place is told after the accumulation instead (a post hook on
  // the parameter's gradient accumulator, as PyTorch DDP's reducer does),
  // so the gradient is read where it lies, in the flat buffer.
  std::vector<std::pair<torch::Tensor, unsigned>> hooks;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>>
      post_hooks;
  if (GradientSink* sink = exchange->gradient_sink()) {
    std::map<std::string, const FlatParameters::Slot*> slots;
    for (const auto& slot : model.flat.slots()) slots[slot.name] = &slot;
    // A sliced weight (cluster.slice_kb) reports its row slices itself, as
    // the backward pass accumulates them; autograd the other parameters.
    const std::vector<torch::Tensor> by_autograd =
        model.net->autograd_parameters();
    if (by_autograd.size() < model.flat.slots().size()) {
      const float* grads = model.flat.grad_data();
      model.net->set_grad_report([sink, grads](const torch::Tensor& rows) {
        const float* at = rows.data_ptr<float>();
        sink->Ready(at - grads, sink->in_place() ? nullptr : at, rows.numel());
      });
    }
    for (const auto& named : model.net->named_parameters()) {
      if (std::none_of(by_autograd.begin(), by_autograd.end(),
                       [&](const torch::Tensor& t) {
                         return t.is_same(named.value());
                       })) {
        continue;
      }
      auto it = slots.find(named.key());
      if (it == slots.end()) {
        return Status::Internal("parameter {} has no slot in the flat vector",
                                named.key());
      }
      const int64_t offset = it->second->offset;
      const int64_t numel = it->second->numel;
      torch::Tensor p = named.value();
      if (sink->in_place()) {
        // The accumulator is kept alive here: autograd holds it weakly and
        // would otherwise make a new one (without the hook) each step.
        std::shared_ptr<torch::autograd::Node> acc =
            torch::autograd::impl::grad_accumulator(p);
        if (acc == nullptr) {
          return Status::Internal("parameter {} has no gradient accumulator",
                                  named.key());
        }
        FlatParameters* flat = on_device ? &model.flat : nullptr;
        const uintptr_t key = acc->add_post_hook(
            std::make_unique<torch::autograd::utils::LambdaPostHook>(
                [sink, offset, numel, flat](
                    const torch::autograd::variable_list& outputs,
                    const torch::autograd::variable_list&) {
                  // GPU: the gradient is in the device buffer; start its
                  // copy to the host mirror the sink reads (the sink waits
                  // for it through ExchangeEnv::grads_ready).
                  if (flat != nullptr) flat->DownloadGrads(offset, numel);
                  sink->Ready(offset, nullptr, numel);
                  return outputs;
                }));
        post_hooks.emplace_back(std::move(acc), key);
        continue;
      }
      const unsigned id =
          p.register_hook([sink, offset, numel](const torch::Tensor& g) {
            torch::Tensor c = g.contiguous().cpu();
            sink->Ready(offset, c.data_ptr<float>(), numel);
          });
      hooks.emplace_back(p, id);
    }
  }
  struct RemoveHooksAtExit {
    ClassifierImpl* net;
    std::vector<std::pair<torch::Tensor, unsigned>>* hooks;
    std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>>*
        post_hooks;
    ~RemoveHooksAtExit() {
      for (auto& [p, id] : *hooks) p.remove_hook(id);
      for (auto& [acc, key] : *post_hooks) acc->del_post_hook(key);
      net->set_grad_report(nullptr);
    }
  } remove_hooks_at_exit{model.net.get(), &hooks, &post_hooks};
  RETURN_IF_ERROR(member.Barrier(0, o.request_timeout));

  // Batches come from the worker's own sampler over its shard, or from the
  // data service (`stream`), which serves the same batches in static mode.
  std::unique_ptr<BatchSampler> sampler;
  int64_t total = o.iterations;
  if (stream == nullptr) {
    if (index >= static_cast<int>(shards.worker_indices.size()) ||
        shards.worker_indices[index].empty()) {
      return Status::InvalidArgument(
          "worker {} has no examples (more workers than examples?)", index);
    }
    ASSIGN_OR_RETURN(
        sampler,
        MakeBatchSampler(config.GetString("data.sampler"),
                         shards.worker_indices[index], train.labels,
                         shards.cluster_ids,
                         BatchCursor::SamplerSeed(o.seed, index), o.shuffle,
                         config.GetFloat("data.loss_aware.max_boost")));
    if (total <= 0) total = o.epochs * sampler->BatchesPerEpoch(o.worker_batch);
  } else if (o.assignment == Assignment::kDynamic) {
    // Any worker takes the next batch: train until the service runs dry.
    total = std::numeric_limits<int64_t>::max();
  }
  const bool want_losses =
      stream != nullptr ? config.GetString("data.sampler") == "loss-aware"
                        : sampler->wants_losses();
  std::vector<float> losses;
  StreamedBatch streamed;
  bool data_ended = false;
  Batcher batcher(train, config.GetBool("data.augment"),
                  (o.seed << 8) ^ static_cast<uint64_t>(index));
  std::mt19937_64 delay_rng(o.seed * 7919 + static_cast<uint64_t>(index));
  int64_t first_step = 0;
  if (!resumed.is_null()) {
    const std::string what = fmt::format("worker {} state", index);
    first_step = resumed["step"].get<int64_t>();
    if (sampler != nullptr) {
      Status st =
          sampler->RestoreState(resumed.value("sampler", nlohmann::json()));
      if (!st.ok()) return Status::DataLoss("{}: {}", what, st.message());
    }
    Status st = batcher.RestoreRngState(resumed.value("augment_rng", ""));
    if (!st.ok()) return Status::DataLoss("{}: {}", what, st.message());
    std::istringstream(resumed.value("delay_rng", "")) >> delay_rng;
    m.RestoreCounters(resumed.value("counters", nlohmann::json::object()));
    published->Publish(env.model.params, env.model.size, first_step);
    LogInfo("worker {}: resumed at step {}", index, first_step);
  }
  // Checkpoint rounds: the last round done, the step to catch up to (-1:
  // none) and whether the coordinator said to stop after it.
  int64_t rounds_done = 0;
  int64_t catch_up_to = -1;
  bool checkpoint_stop = false;
  // Arrives at the coordinator with this worker's state at a step boundary
  // (`done` steps) and waits for the round to end.
  auto arrive = [&](int64_t done, bool final, bool paused) -> Status {
    // The data server's cursor must know every batch trained so far.
    if (stream != nullptr) RETURN_IF_ERROR(stream->SendAcks());
    RETURN_IF_ERROR(exchange->Quiesce(done));
    if (!final) RETURN_IF_ERROR(exchange->PauseForRound(done));
    ASSIGN_OR_RETURN(ExchangeState es, exchange->SaveState());
    std::ostringstream delay_state;
    delay_state << delay_rng;
    nlohmann::json state{{"step", done},
                         {"worker", index},
                         {"counters", m.SaveCounters()},
                         {"augment_rng", batcher.SaveRngState()},
                         {"delay_rng", delay_state.str()}};
    if (sampler != nullptr) state["sampler"] = sampler->SaveState();
    Message msg;
    msg.header.type = kCheckpointArrive;
    msg.header.clock = done;
    if (final) msg.header.flags |= kCheckpointFinal;
    if (paused) msg.header.flags |= kCheckpointPaused;
    {
      std::lock_guard<std::mutex> lock(published->mu);
      ASSIGN_OR_RETURN(
          msg.payloads,
          EncodeWorkerState(state, keeps_model ? env.model.params : nullptr,
                            env.model.size, es));
    }
    auto reply = env.rpc->Request(o.roles.CoordinatorId(), std::move(msg))
                     ->Wait(o.request_timeout);
    if (!reply.ok()) {
      return reply.status().WithContext(
          fmt::format("worker {}: checkpoint at step {}", index, done));
    }
    if (reply->header.flags & kCheckpointFailed) {
      // The coordinator could not write it; training goes on.
      LogWarning("worker {}: no checkpoint at step {}: {}", index, done,
                 reply->payloads.empty() ? "" : reply->payloads[0].ToString());
    }
    if (reply->header.flags & kCheckpointCatchUp) {
      catch_up_to = reply->header.clock;
      return exchange->ResumeAfterRound();
    }
    catch_up_to = -1;
    rounds_done = reply->header.clock;
    if (reply->header.flags & kCheckpointStop) {
      checkpoint_stop = true;  // the run ends here: no need to rejoin
      return Status::Ok();
    }
    return exchange->ResumeAfterRound();  // nothing unless it paused
  };
  std::vector<int64_t> indices;
  double window_loss = 0, window_acc = 0;
  int64_t window_n = 0;
  int64_t window_staleness_sum = 0, window_staleness_count = 0;

  // A stop asked for by the user (Ctrl-C, or the coordinator ending the run
  // early without an error). Workers of a collective or of a neighbour
  // exchange see it at slightly different steps; one that is then left
  // alone in an exchange (its peers already stopped) ends cleanly too.
  auto clean_stop = [&] {
    // With checkpoints a Ctrl-C reaches the worker as a checkpoint round
    // that ends with kCheckpointStop (the coordinator asks every worker to
    // one step boundary first), not through the process's own flag.
    return checkpoint_stop ||
           (checkpoints == nullptr && stop != nullptr && stop->load()) ||
           member.training_stop_requested() ||
           (member.shutdown_requested() && member.shutdown_reason().empty());
  };
  auto stopped_inside = [&](const Status& st, const char* where, int64_t it) {
    if (st.ok() || !clean_stop()) return false;
    LogInfo("worker {}: stopped {} step {} ({})", index, where, it,
            st.message());
    return true;
  };
  // Worker 0 alone: LibTorch's profiler is one per process.
  StepProfiler profiler(o.profile_from, index == 0 ? o.profile_steps : 0,
                        run_dir, fmt::format("worker{}", index),
                        model.flat.on_gpu());
  for (int64_t it = first_step; it < total; ++it) {
    // The run ended early (Ctrl-C): finish cleanly. Collectives first agree
    // on the step to stop at, so that no member is left waiting for another.
    // Stopped after a checkpoint round: every worker got it at this step.
    if (checkpoint_stop) break;
    Result<bool> agreed = exchange->AgreeToStop(it, clean_stop());
    if (!agreed.ok()) {
      if (stopped_inside(agreed.status(), "before", it)) break;
      return agreed.status();
    }
    if (*agreed) break;
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
    profiler.BeforeStep(it);
    auto t0 = Clock::now();
    PhaseMark whole("strata::step");
    PhaseMark phase("strata::before_step");
    Status before = exchange->BeforeStep(it);
    if (stopped_inside(before, "before", it)) break;
    RETURN_IF_ERROR(before);
    auto t1 = Clock::now();
    phase.Next("strata::batch");
    int64_t epoch = 0;
    Batch batch;
    if (stream != nullptr) {
      Result<bool> got = stream->Next(&streamed);
      if (stopped_inside(got.status(), "waiting for data at", it)) break;
      RETURN_IF_ERROR(got.status());
      if (!*got) {
        data_ended = true;
        break;
      }
      epoch = streamed.header.epoch;
      batch = batcher.FromRows(
          reinterpret_cast<const float*>(streamed.features.data()),
          reinterpret_cast<const int64_t*>(streamed.labels.data()),
          streamed.header.size());
    } else {
      epoch = sampler->Next(o.worker_batch, &indices);
      batch = batcher.Gather(indices);
    }
    phase.Next("strata::forward_backward");
    // With a gate, after every parameter is in (above).
    if (!env.forward_awaits) model.flat.ZeroGrad();
    // GPU: the parameters BeforeStep brought, queued ahead of the forward
    // pass (with a gate, layer by layer as they arrive, above). Nothing
    // writes them again before the step's gradient copies, which follow
    // this copy on the device, have been waited for.
    if (env.forward_awaits) {
      uploaded = 0;
    } else {
      model.flat.Upload(/*wait=*/false);
    }
    param_wait_s = 0;
    Result<StepResult> stepped =
        ForwardBackward(*model.net, batch, want_losses ? &losses : nullptr);
    // A clean stop may end a pull the forward pass was waiting for.
    if (param_wait_failed && stopped_inside(stepped.status(), "inside", it))
      break;
    RETURN_IF_ERROR(stepped.status());
    const StepResult r = *stepped;
    // GPU: a sink got each gradient from its hook; otherwise all of them
    // come back here.
    phase.Next("strata::fetch_grads");
    if (on_device && exchange->gradient_sink() == nullptr)
      model.flat.FetchGrads();
    phase.End();
    if (stream != nullptr) {
      // `losses` stays empty unless the sampler wants them.
      stream->Ack(streamed.header.seq, losses);
    } else if (want_losses) {
      sampler->Observe(indices, losses.data());
    }
    if (o.worker_delay_ms > 0) {
      std::this_thread::sleep_for(
          std::chrono::milliseconds(static_cast<int64_t>(
              delay_rng() % static_cast<uint64_t>(o.worker_delay_ms + 1))));
    }
    auto t2 = Clock::now();
    phase.Next("strata::after_step");
    Status after = exchange->AfterStep(it);
    if (stopped_inside(after, "after", it)) break;
    RETURN_IF_ERROR(after);
    phase.End();
    whole.End();
    auto t3 = Clock::now();
    profiler.AfterStep(it);
    m.compute_s += Seconds(t1, t2) - param_wait_s;
    m.comm_s += Seconds(t0, t1) + param_wait_s + Seconds(t2, t3);
    m.iterations = it + 1;
    m.samples += batch.targets.size(0);
    {
      std::lock_guard<std::mutex> lock(published->mu);
      published->step = it + 1;
      if (!o.metrics_address.empty()) {  // read by the heartbeats (/metrics)
        published->metrics = m;
        if (stream != nullptr)
          published->metrics.data_wait_s = stream->wait_s();
      }
    }
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
                       {"version", exchange->version()},
                       {"compute_s", m.compute_s},
                       {"comm_s", m.comm_s}};
      if (stream != nullptr) j["data_wait_s"] = stream->wait_s();
      if (m.staleness_count > window_staleness_count) {
        // Staleness of the gradients applied since the last line.
        j["staleness_mean"] =
            static_cast<double>(m.staleness_sum - window_staleness_sum) /
            static_cast<double>(m.staleness_count - window_staleness_count);
        j["staleness_max"] = m.window_staleness_max;
        window_staleness_sum = m.staleness_sum;
        window_staleness_count = m.staleness_count;
        m.window_staleness_max = -1;
      }
      RETURN_IF_ERROR(run_dir->AppendJson("metrics.jsonl", j));
      window_loss = window_acc = 0;
      window_n = 0;
    }
    if (checkpoints != nullptr && it + 1 < total) {
      const int64_t done = it + 1;
      const bool scheduled = checkpoints->every_updates > 0 &&
                             done % checkpoints->every_updates == 0;
      const bool asked = checkpoints->pause_round.load() > rounds_done;
      if (catch_up_to >= 0 ? done == catch_up_to : scheduled || asked)
        RETURN_IF_ERROR(arrive(done, /*final=*/false,
                               /*paused=*/catch_up_to < 0 && !scheduled));
    }
  }
  profiler.Stop();
  if (checkpoints != nullptr && !checkpoint_stop &&
      (m.iterations == total || data_ended) && m.iterations > first_step) {
    // The end of the run is checkpointed too. Nobody waits for this
    // worker's gradients from here on (Exchange::Depart).
    RETURN_IF_ERROR(exchange->Depart(m.iterations));
    RETURN_IF_ERROR(arrive(m.iterations, /*final=*/true, /*paused=*/false));
  }
  if (stream != nullptr) {
    m.data_wait_s = stream->wait_s();
    m.compute_s -= m.data_wait_s;
    RETURN_IF_ERROR(stream->Flush());
  }
  RETURN_IF_ERROR(exchange->Finish(m.iterations));
  m.finished = m.iterations == total || data_ended;
  return m;
}

namespace {

// The evaluator's model, built on a thread of its own: the evaluator's
// thread lives all run.
Result<Model> CreateEvaluatorModel(const Config& config,
                                   const DatasetSplits& data) {
  ASSIGN_OR_RETURN(Model model,
                   CreateModelOnThreadOfItsOwn(ModelOptions::FromConfig(config),
                                               InputSpecOf(data.train)));
  RETURN_IF_ERROR(PlaceModel(model, DeviceOptions::FromConfig(config)));
  return model;
}

// One evaluation of an evaluator node: BatchNorm recalibrated on training
// examples, then the validation set. On the CPU it runs on a thread of its
// own (common/own_thread.h): the evaluator's thread lives all run, and the
// OpenMP team an evaluation starts would otherwise stay there, idle, beside the
// workers' teams between evaluations.
Result<EvalResult> EvaluateSnapshot(Model& model, const DatasetSplits& data,
                                    int64_t eval_batch) {
  auto evaluate = [&]() -> Result<EvalResult> {
    RETURN_IF_ERROR(RecalibrateBatchNorm(*model.net, data.train, eval_batch,
                                         kBatchNormExamples)
                        .status());
    return Evaluate(*model.net, data.val, eval_batch);
  };
  // A GPU evaluation uses the thread's CUDA stream and handles: keep it.
  if (model.flat.on_gpu()) return evaluate();
  return OnThreadOfItsOwn(evaluate);
}

}  // namespace

Status RunEvaluator(const Config& config, const ClusterRunOptions& o,
                    const DatasetSplits& data, PsClient& client,
                    const RunDirectory* run_dir, const std::atomic<bool>* done,
                    Clock::time_point start) {
  ASSIGN_OR_RETURN(Model model, CreateEvaluatorModel(config, data));
  const int k = client.layout().num_ranges();
  const int n = o.roles.num_workers();
  const int64_t grads_per_update = o.gradients_per_update;
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
    model.flat.Upload();  // GPU: the parameters just received
    ASSIGN_OR_RETURN(EvalResult ev,
                     EvaluateSnapshot(model, data, o.eval_batch));
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

namespace strata {

Result<GatheredModel> GatherWorkerModels(RpcEndpoint& rpc,
                                         const ClusterRunOptions& o,
                                         float* dest, int64_t size) {
  const int n = o.roles.num_workers();
  std::vector<std::shared_ptr<RpcCall>> calls;
  for (int w = 0; w < n; ++w) {
    Message m;
    m.header.type = kModelRequest;
    calls.push_back(rpc.Request(o.roles.WorkerId(w), std::move(m)));
  }
  // A lost worker does not answer; do not wait for it longer than its loss
  // takes to be noticed.
  const auto timeout =
      std::max(o.heartbeat_timeout * 2, std::chrono::milliseconds(2000));
  std::vector<Message> models;
  GatheredModel g;
  g.min_step = std::numeric_limits<int64_t>::max();
  for (int w = 0; w < n; ++w) {
    auto reply = calls[w]->Wait(timeout);
    if (!reply.ok() || reply->payloads.empty() ||
        static_cast<int64_t>(reply->payloads[0].size()) !=
            size * static_cast<int64_t>(sizeof(float))) {
      LogDebug("evaluator: no model from worker {}: {}", w,
               reply.ok() ? "wrong size" : reply.status().message());
      continue;
    }
    g.min_step = std::min(g.min_step, reply->header.clock);
    models.push_back(std::move(*reply));
  }
  if (models.empty()) {
    return Status::Unavailable("no worker sent its model within {} ms",
                               timeout.count());
  }
  g.workers = static_cast<int>(models.size());
  std::vector<double> avg(static_cast<size_t>(size), 0.0);
  for (const Message& m : models) {
    const float* x = m.payloads[0].floats();
    for (int64_t i = 0; i < size; ++i) avg[i] += x[i];
  }
  for (int64_t i = 0; i < size; ++i)
    avg[i] /= static_cast<double>(models.size());
  // Consensus distance: the mean over workers of ||w_i - average||.
  double total = 0;
  for (const Message& m : models) {
    const float* x = m.payloads[0].floats();
    double sq = 0;
    for (int64_t i = 0; i < size; ++i) {
      const double d = x[i] - avg[i];
      sq += d * d;
    }
    total += std::sqrt(sq);
  }
  g.consensus_distance = total / static_cast<double>(models.size());
  for (int64_t i = 0; i < size; ++i) dest[i] = static_cast<float>(avg[i]);
  return g;
}

Status RunPeerEvaluator(const Config& config, const ClusterRunOptions& o,
                        const DatasetSplits& data, RpcEndpoint& rpc,
                        ClusterMember& member, const RunDirectory* run_dir,
                        const std::atomic<bool>* done,
                        Clock::time_point start) {
  ASSIGN_OR_RETURN(Model model, CreateEvaluatorModel(config, data));
  int64_t last_step = -1;
  bool first = true;
  while (!done->load()) {
    if (member.shutdown_requested()) {
      // Lost the coordinator (or told to stop): nothing to evaluate for.
      return member.shutdown_reason().empty()
                 ? Status::Ok()
                 : Status::Unavailable("{}", member.shutdown_reason());
    }
    if (!first) {
      auto until = Clock::now() + std::chrono::duration<double>(o.eval_every_s);
      while (!done->load() && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (done->load()) break;
    }
    first = false;
    auto gathered =
        GatherWorkerModels(rpc, o, model.flat.param_data(), model.flat.size());
    if (!gathered.ok()) {
      // Workers not started yet, or all busy ending: try at the next round.
      LogDebug("evaluator: {}", gathered.status().message());
      continue;
    }
    if (gathered->min_step == last_step) continue;
    last_step = gathered->min_step;
    model.flat.Upload();  // GPU: the parameters just received
    ASSIGN_OR_RETURN(EvalResult ev,
                     EvaluateSnapshot(model, data, o.eval_batch));
    nlohmann::json j{{"step", gathered->min_step},
                     {"version", gathered->min_step},
                     {"wall_s", Seconds(start, Clock::now())},
                     {"val_loss", ev.loss},
                     {"val_acc", ev.accuracy},
                     {"consensus_distance", gathered->consensus_distance},
                     {"workers", gathered->workers}};
    if (run_dir != nullptr)
      RETURN_IF_ERROR(run_dir->AppendJson("eval.jsonl", j));
    LogInfo(
        "evaluator: step {} (average of {} workers): val loss {:.4f} acc "
        "{:.4f}, consensus distance {:.4g}",
        gathered->min_step, gathered->workers, ev.loss, ev.accuracy,
        gathered->consensus_distance);
  }
  return Status::Ok();
}

int LeadRange(const ClusterRunOptions& options, const KeyLayout& layout) {
  if (!options.leader_first) return -1;
  return options.pipeline_floats > 0 && layout.num_ranges() > 1
             ? layout.num_ranges() - 1
             : 0;
}

}  // namespace strata
