#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "cluster/role_table.h"
#include "cluster/run_mode.h"
#include "common/config.h"
#include "common/status.h"
#include "data/batch_cursor.h"
#include "data/batch_sampler.h"
#include "models/model_options.h"
#include "ps/compression.h"
#include "ps/optimizer.h"
#include "ps/schedule.h"
#include "run/emulation.h"
#include "sharding/methods.h"
#include "sharding/resolve.h"
#include "transport/ucx/transport.h"

namespace strata {

// Topology of neighbour averaging (dpsgd).
enum class Topology { kRing, kTorus };

// Everything a cluster's nodes need to know about the run, resolved once
// from the config: the typed mode, the role table and every knob, so that
// nothing below reads mode strings or re-derives a knob.
struct ClusterRunOptions {
  RunMode mode = RunMode::kAsync;
  RoleTable roles;
  // cluster.adapt_hyperparams: per-worker batch B / n and, in async and
  // ssp, rate alpha / n.
  bool adapt = true;
  int64_t worker_batch = 64;  // per-worker batch (B / n with adaptation)
  int64_t iterations = 0;     // per worker; 0 = epochs * batches per epoch
  int64_t epochs = 1;
  int64_t pull_interval = 1;
  bool overlap = false;  // async: communication of step t overlaps step t+1
  Compression compression = Compression::kNone;  // gradient pushes
  bool compress_pulls = false;  // and the workers' pulls (as differences)
  int64_t staleness = -1;       // ssp bound; < 0 for other modes
  bool shuffle = true;
  uint64_t seed = 1;
  int64_t log_every = 50;
  // train.profile_from / train.profile_steps (worker 0; step_profile.h).
  int64_t profile_from = 20;
  int64_t profile_steps = 0;
  // cluster.timeline (common/timeline.h): record spans, spans per thread.
  bool timeline = false;
  int64_t timeline_events = 200000;
  int64_t eval_batch = 1000;
  int64_t eval_every_updates = 0;
  double eval_every_s = 2.0;
  int worker_delay_ms = 0;
  int fail_worker = -1;  // fault injection (tests)
  int64_t fail_at = 0;
  // cluster.fail_node: the role whose node (index 0) vanishes fail_after
  // after it joined (the coordinator: after training began); kWorker = none.
  Role fail_role = Role::kWorker;
  std::chrono::milliseconds fail_after{1000};
  // Whether `role` `index` is the node that fault injection makes vanish.
  bool Vanishes(Role role, int index) const {
    return fail_role != Role::kWorker && role == fail_role && index == 0;
  }
  // What the run trains (model.name, data.dataset), for its summary and
  // /metrics' labels; the model's options and where the workers and the
  // evaluator compute (train.device).
  std::string model_name;
  std::string dataset_name;
  ModelOptions model;
  DeviceOptions device;
  // How batches are drawn and assembled: data.sampler (and the loss-aware
  // sampler's data.loss_aware.max_boost), data.augment; whether
  // train.iterations fixed the budget (else the epochs decide it); the
  // data service's served log with every example id (data.served_log).
  SamplerKind sampler = SamplerKind::kShuffle;
  double loss_aware_max_boost = 4.0;
  bool augment = false;
  bool iterations_set = false;
  bool served_log_ids = false;
  // The evaluator evaluates on a schedule (cluster.evaluator); it always
  // evaluates the final model.
  bool periodic_eval = true;
  // LibTorch threads per worker (cluster.threads_per_worker; 0: this
  // machine's cores shared among the workers).
  int threads_per_worker = 0;
  // The update rule (train.optimizer, ...) and the learning rate schedule
  // (train.lr, train.schedule, ...; LrSchedule::ForSteps sets its length).
  OptimizerOptions optimizer;
  LrSchedule schedule;
  std::chrono::milliseconds request_timeout{120000};
  std::chrono::milliseconds heartbeat_interval{500};
  // cluster.metrics_address: the coordinator serves /metrics there, and
  // workers and servers send their counters with their heartbeats.
  std::string metrics_address;
  // How the launchers connect the nodes of one machine: cluster.transport
  // ("inproc", "tcp" or "ucx", transport/factory.h), cluster.
  // ucx_shared_memory, and cluster.spin_us (in-process waits, spin_wait.h).
  std::string transport = "inproc";
  UcxOptions::SharedMemory ucx_shared_memory = UcxOptions::SharedMemory::kAuto;
  std::chrono::microseconds spin{0};
  // Checkpoints (checkpoint.*; docs/design/checkpoints.md): a round every this
  // many steps of each worker and/or seconds (0: off), the newest kept, and
  // whether this run resumes from its newest checkpoint.
  int64_t checkpoint_every_updates = 0;
  double checkpoint_every_s = 0;
  int checkpoint_keep = 3;
  bool resume = false;
  // cluster.restart: --processes starts the cluster again from the newest
  // checkpoint when a lost node stopped it, at most max_restarts times.
  bool restart = false;
  int max_restarts = 3;
  // How long a lost server may take to be replaced (free modes).
  std::chrono::milliseconds restart_timeout{60000};
  // Elastic bounds (docs/design/elastic.md): the fewest workers the run
  // goes on with, and the most `strata scale` may give it (0: no bound).
  int min_workers = 1;
  int max_workers = 0;
  // cluster.leave_on_loss: a lockstep run that lost a worker goes on from
  // its newest checkpoint without it (a drain the coordinator asks itself).
  bool leave_on_loss = false;
  // cluster.forward_metrics: a worker's metrics.jsonl lines go to the
  // coordinator (kMetricsLine), which writes them into the run's directory.
  bool forward_metrics = false;
  bool checkpoints() const {
    return checkpoint_every_updates > 0 || checkpoint_every_s > 0 || resume;
  }
  std::chrono::milliseconds heartbeat_timeout{5000};

  // Parameter-server knobs (sync, async, ssp, easgd).
  int updates_per_step = 1;  // k of n (n when cluster.updates_per_step = 0)
  bool defer_late = false;   // cluster.late_gradients = "defer"
  bool inverse_staleness = false;  // cluster.lr_staleness = "inverse"
  double server_rate_scale = 1.0;  // 1/n for async and ssp with adaptation
  bool sum_gradients = false;      // cluster.sync_reduce = "sum"
  // Sync k-of-n: one range (LeadRange in nodes.h) chooses each step's
  // gradients and the others follow (shard.h, UpdatePolicy::follower).
  bool leader_first = false;
  // Layer-wise pipelining (cluster.pipeline): each server's keys are cut
  // at tensor ends into ranges of up to pipeline_floats (KeyLayout::
  // Aligned), pushed one by one from the backward pass. 0 where it does not
  // apply (off, or the mode has no gradient pushes, or cluster.overlap).
  bool pipeline = true;
  int64_t pipeline_floats = 0;
  // A pull is still arriving while the forward pass starts; each layer
  // waits for its own ranges only (cluster.layer_wait; CPU workers with a
  // built-in model).
  bool layer_wait = true;
  // With pipelining and layer_wait: a built-in model's fully-connected
  // layers larger than slice_floats compute in row slices of about that
  // many floats, each a range of the layout (cluster.slice_kb;
  // ClassifierImpl::SliceLayers). 0: off.
  int64_t slice_floats = 0;
  // Whether a sliceable weight of `floats` floats is cut into row slices:
  // the plan's cut points (ClusterPlan::Shape) and the worker's slicing
  // (worker/layer_gate.cc) both ask this.
  bool SlicesWeight(int64_t floats) const {
    return slice_floats > 0 && pipeline_floats > 0 && layer_wait &&
           floats > slice_floats;
  }
  // In process, servers handle pushes and pulls on the sender's thread
  // when idle (cluster.inline_server; RpcEndpoint::SetInlineHandling).
  bool inline_server = true;
  // Gradients per update of the global model (the evaluator's step count).
  int64_t gradients_per_update = 1;

  // Decentralized knobs.
  int64_t average_every = 1;            // local-sgd and easgd: tau
  double elastic_alpha = 0.1;           // easgd
  Topology topology = Topology::kRing;  // dpsgd
  double gossip_p = 0.5;       // gossip: probability of a push per step
  int64_t tau_up = 4;          // tree-easgd
  int64_t tau_down = 4;        // tree-easgd
  int tree_fanout = 2;         // tree-easgd
  bool bucket_overlap = true;  // allreduce: reduce buckets during backward
  // cluster.collective = gloo: Gloo over TCP even between threads.
  bool gloo_always = false;
  int64_t bucket_floats = 0;  // allreduce: gradient bucket size

  // The emulated cluster (run/emulation.h): the links every launcher
  // shapes its nodes' transports with (empty: net.* off), and the
  // workers' speeds (worker/pace.h).
  LinkLookup links;
  WorkerPaceOptions pace;

  // The mini-batch streaming service (cluster.data_servers > 0).
  int data_servers = 0;
  Assignment assignment = Assignment::kStatic;  // data.assignment
  int prefetch = 2;                             // data.prefetch

  static Result<ClusterRunOptions> FromConfig(const Config& config);
};

// Where the single-process trainer applies its update
// (train.local_optimizer).
enum class LocalOptimizer {
  kAuto,   // on the device of the model (LibTorch operations on a GPU)
  kHost,   // the servers' flat optimizer on the host copy
  kTorch,  // LibTorch operations on the model's device
};

// What the single-process trainer (cluster.mode = local) needs of the run
// config, resolved once: the model, the data order, the budget, the
// update, evaluation, checkpoints and profiling.
struct LocalRunOptions {
  int threads = 1;  // LibTorch threads (train.threads; 0: every core)
  uint64_t seed = 1;
  ModelOptions model;
  DeviceOptions device;
  int64_t batch_size = 64;
  SamplerKind sampler = SamplerKind::kShuffle;
  double loss_aware_max_boost = 4.0;
  bool shuffle = true;
  bool augment = false;
  // The sampler's sub-clusters, where it uses them (data.sharding.*).
  ShardOptions shard_options;
  // data.shard_plan or a sharding method other than mod: they apply to
  // cluster modes (a warning).
  bool sharding_set = false;
  int64_t iterations = 0;  // 0: the epochs decide
  int64_t epochs = 1;
  int64_t eval_every = 0;  // steps; 0: every epoch
  int64_t log_every = 50;
  int64_t eval_batch = 1000;
  LocalOptimizer optimizer_on = LocalOptimizer::kAuto;
  OptimizerOptions optimizer;
  LrSchedule schedule;  // its length set for the run (LrSchedule::ForSteps)
  int64_t checkpoint_every = 0;   // steps; 0: off
  double checkpoint_every_s = 0;  // 0: off
  int checkpoint_keep = 3;
  bool resume = false;
  int64_t profile_from = 20;
  int64_t profile_steps = 0;

  bool checkpoints() const {
    return checkpoint_every > 0 || checkpoint_every_s > 0;
  }
  // InvalidArgument naming the key for a value it cannot take.
  static Result<LocalRunOptions> FromConfig(const Config& config);
};

}  // namespace strata
