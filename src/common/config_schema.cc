// The one list of configuration keys strata understands. A module reads its
// keys into its own Options struct; add a key here when a feature needs one,
// with a default that a user would expect.
#include "common/config.h"

namespace strata {
namespace {

using T = ConfigKey::Type;
constexpr double kInf = std::numeric_limits<double>::infinity();

ConfigKey Int(std::string name, int64_t def, std::string help, double min = 0,
              double max = kInf) {
  return ConfigKey{
      std::move(name), T::kInt, def, std::move(help), {}, min, max};
}
ConfigKey Float(std::string name, double def, std::string help,
                double min = -kInf, double max = kInf) {
  return ConfigKey{
      std::move(name), T::kFloat, def, std::move(help), {}, min, max};
}
ConfigKey Bool(std::string name, bool def, std::string help) {
  return ConfigKey{std::move(name), T::kBool, def, std::move(help), {}};
}
ConfigKey Str(std::string name, std::string def, std::string help,
              std::vector<std::string> choices = {}) {
  return ConfigKey{std::move(name), T::kString, std::move(def), std::move(help),
                   std::move(choices)};
}

// run.*, and what data.* reads
std::vector<ConfigKey> RunAndDataKeys() {
  return {
      // run
      Str("run.name", "",
          "run directory name; empty = <model>-<dataset>-<timestamp>"),
      Str("run.dir", "runs", "parent directory of run directories"),
      Int("run.seed", 1,
          "seed for initialisation, data order and augmentation"),
      Str("run.log_level", "info", "log verbosity",
          {"debug", "info", "warning", "error"}),

      // data
      Str("data.dataset", "synthetic", "dataset to train on",
          {"synthetic", "mnist", "fashion-mnist", "cifar10", "cifar100",
           "npy"}),
      Str("data.dir", "",
          "directory holding the dataset files (mnist, fashion-mnist, cifar10, "
          "cifar100)"),
      Str("data.train_features", "",
          "npy: training features .npy (N x ...; uint8 or float32)"),
      Str("data.train_labels", "",
          "npy: training labels .npy (N; int32 or int64)"),
      Str("data.val_features", "",
          "npy: validation features .npy; empty = hold out data.val_fraction"),
      Str("data.val_labels", "", "npy: validation labels .npy"),
      Str("data.input_shape", "",
          "npy: CxHxW of one example (e.g. 1x28x28); empty = flat vector"),
      Float("data.val_fraction", 0.1,
            "npy without validation files: fraction held out", 0.0, 0.9),
      Str("data.cifar100_labels", "fine", "cifar100: which labels to train on",
          {"fine", "coarse"}),
      Bool("data.normalize", true,
           "standardise inputs with the dataset's per-channel mean and std"),
      Bool("data.augment", false,
           "random crop (padding 4) and horizontal flip; image datasets only"),
      Int("data.synthetic.classes", 10, "synthetic: number of classes", 2,
          1000),
      Int("data.synthetic.subclusters", 3,
          "synthetic: hidden sub-clusters per class", 1, 100),
      Float("data.synthetic.imbalance", 1.0,
            "synthetic: ratio of largest to smallest class size", 1.0, 1000.0),
      Int("data.synthetic.dim", 64,
          "synthetic: feature dimension (flat examples)", 1, 1 << 20),
      Str("data.synthetic.shape", "",
          "synthetic: CxHxW image shape instead of dim (e.g. 1x28x28)"),
      Float("data.synthetic.noise", 1.0,
            "synthetic: within-cluster standard deviation", 0.0, 100.0),
      Float("data.synthetic.separation", 1.2,
            "synthetic: spread of cluster centres", 0.0, 100.0),
      Int("data.synthetic.train_size", 20000, "synthetic: training examples", 1,
          1e9),
      Int("data.synthetic.val_size", 4000, "synthetic: validation examples", 1,
          1e9),
      Int("data.synthetic.seed", 7,
          "synthetic: generator seed (independent of run.seed)"),
  };
}

// model.*, checkpoint.*, metrics.*
std::vector<ConfigKey> ModelKeys() {
  return {
      // model
      Str("model.name", "mlp",
          "model architecture; torchscript = your own module (model.path)",
          {"mlp", "lenet", "cnn4", "resnet20", "resnet32", "resnet56",
           "torchscript"}),
      Int("checkpoint.every_updates", 0,
          "write a checkpoint every this many steps (0 = off; also at the end "
          "and on Ctrl-C when any checkpointing is on; "
          "docs/design/checkpoints.md)",
          0, 1000000000),
      Float("checkpoint.every_s", 0,
            "write a checkpoint every this many seconds (0 = off)", 0, 1e9),
      Int("checkpoint.keep", 3, "checkpoints kept (the newest)", 1, 1000000),
      Bool("checkpoint.resume", false,
           "continue from the run directory's newest checkpoint (set by "
           "strata train --resume)"),
      Str("checkpoint.resume_workers", "",
          "a resume on another worker count: the checkpoint's workers "
          "that go on, in order, as workers 0, 1, ... (\"0,2,3\": "
          "worker 1 leaves; strata scale --drain sets it); empty: the "
          "first ones"),
      Bool("metrics.tensorboard", true,
           "write TensorBoard event files into <run>/tb/ "
           "(docs/design/metrics.md)"),
      Str("model.path", "",
          "torchscript: a module saved with torch.jit.script(model).save(path) "
          "(docs/design/models.md)"),
      Int("model.hidden", 256, "mlp: hidden units", 1, 1 << 20),
  };
}

// train.*: the optimizer, its schedule and the log
std::vector<ConfigKey> OptimizerKeys() {
  return {
      // train
      Str("train.optimizer", "sgd", "optimizer", {"sgd", "adam"}),
      Float("train.lr", 0.05,
            "learning rate (peak rate when a schedule is used)", 0.0, 100.0),
      Float("train.momentum", 0.9, "sgd: momentum", 0.0, 1.0),
      Bool("train.nesterov", false, "sgd: Nesterov momentum"),
      Float("train.weight_decay", 0.0, "L2 weight decay (sgd and adam)", 0.0,
            1.0),
      Float("train.adam_beta1", 0.9, "adam: beta1", 0.0, 1.0),
      Float("train.adam_beta2", 0.999, "adam: beta2", 0.0, 1.0),
      Float("train.adam_eps", 1e-8, "adam: epsilon", 0.0, 1.0),
      Int("train.batch_size", 64, "mini-batch size", 1, 1 << 20),
      Int("train.epochs", 5, "epoch budget (used when train.iterations = 0)", 0,
          1e6),
      Int("train.iterations", 0, "iteration budget; 0 = use train.epochs", 0,
          1e12),
      Str("train.schedule", "constant", "learning-rate schedule",
          {"constant", "step", "cosine"}),
      Int("train.warmup_steps", 0, "linear warm-up steps from 0 to train.lr", 0,
          1e12),
      Int("train.step_every", 1000, "step schedule: steps between decays", 1,
          1e12),
      Float("train.step_gamma", 0.1, "step schedule: decay factor", 0.0, 1.0),
      Float("train.min_lr", 0.0, "cosine schedule: final rate", 0.0, 100.0),
      Int("train.eval_every", 0,
          "evaluate every N steps; 0 = at the end of every epoch", 0, 1e12),
      Int("train.log_every", 50, "write a metrics line every N steps", 1, 1e12),
      Int("train.profile_steps", 0,
          "record this many steps with LibTorch's profiler (the local "
          "trainer, or worker 0) into profile-*.json; 0 = off",
          0, 1e6),
      Int("train.profile_from", 20,
          "steps run before the profiled window starts", 0, 1e12),
  };
}

// train.*: threads, device, precision, evaluation batch
std::vector<ConfigKey> DeviceKeys() {
  return {
      Int("train.threads", 0,
          "LibTorch intra-op threads of the local trainer; 0 = chosen for "
          "the model (1 for a model without convolutions, every core "
          "otherwise; docs/guide/training.md, Threads); strata also sets "
          "the BLAS library's threads unless OPENBLAS_NUM_THREADS is set",
          0, 1024),
      Str("train.device", "cpu",
          "where workers, the evaluator and the local trainer compute: cpu, "
          "cuda or cuda:N, or cuda:* = the workers spread over every GPU in "
          "turn (worker i on cuda:(i mod GPUs); the evaluator on cuda:0); "
          "needs a CUDA LibTorch; docs/guide/gpu.md"),
      Bool("train.emulate_gpu_buffers", false,
           "with train.device = cpu: lay the parameters and gradients out "
           "as on a GPU (the model computes in buffers apart from the host "
           "copy, and they are copied at the points a GPU's would be), to "
           "check the GPU's data path without a GPU; slower, for tests "
           "(docs/design/gpu.md)"),
      Str("train.precision", "float32",
          "the forward pass's type: float32, or bf16 = LibTorch's autocast "
          "to bfloat16 on the CPU or the GPU (matrix products and "
          "convolutions in bf16; the parameters, gradients, optimizer and "
          "everything workers exchange stay float32); docs/guide/"
          "training.md, Precision",
          {"float32", "bf16"}),
      Bool("train.cuda_graph", false,
           "on a GPU: the training step's forward and backward pass are "
           "captured once as a CUDA graph (after 3 eager steps of one batch "
           "shape) and replayed at every step of that shape: one launch "
           "instead of one per kernel; turns off cluster.pipeline, "
           "cluster.layer_wait, cluster.slice_kb and cluster.bucket_overlap "
           "(their per-layer host work cannot be in a graph); refused on "
           "the CPU; docs/guide/gpu.md, CUDA graphs"),
      Str("train.gpu_backward", "own_thread",
          "on a GPU: which thread launches a training thread's backward "
          "kernels: own_thread = the training thread itself (each worker "
          "its own, side by side; LibTorch 2.0 and later), autograd_thread "
          "= LibTorch's one autograd thread per GPU, which every worker of "
          "the process shares (LibTorch's own default; for comparison); "
          "docs/design/gpu.md, Streams",
          {"own_thread", "autograd_thread"}),
      Str("train.local_optimizer", "auto",
          "where the single-process trainer (cluster.mode = local) applies "
          "its update: host = the servers' own code on the host copy, bit "
          "for bit what the cluster modes compute; torch = LibTorch tensor "
          "operations on the model's device (on a GPU, no copies a step); "
          "auto = torch on a GPU, host on the CPU",
          {"auto", "host", "torch"}),
      Int("train.eval_batch_size", 256,
          "batch size for evaluation (larger batches are slower on the CPU: "
          "their im2col buffers fall out of the caches)",
          1, 1 << 20),
  };
}

// data.*: the order, sampler and assignment of batches
std::vector<ConfigKey> DataOrderKeys() {
  return {
      Bool("data.shuffle", true,
           "reshuffle each worker's examples every epoch; false = fixed order"),
      Str("data.sampler", "shuffle",
          "mini-batches per worker: shuffle = a fresh permutation per epoch; "
          "stratified = each batch holds the shard's classes in proportion; "
          "cluster-stratified = each batch draws from every class and "
          "sub-cluster; loss-aware = cluster-stratified with high-loss strata "
          "drawn sooner; class-rotation = every batch one example of each "
          "of the next B classes of a cycle",
          {"shuffle", "stratified", "cluster-stratified", "loss-aware",
           "class-rotation"}),
      Str("data.assignment", "static",
          "data service: static = each worker draws from its shard; dynamic "
          "= any worker takes the next batch of the epoch (async only)",
          {"static", "dynamic"}),
      Int("data.prefetch", 2, "data service: batches a worker keeps in flight",
          1, 64),
      Float("data.loss_aware.max_boost", 4.0,
            "loss-aware sampler: bound on a stratum's share multiplier", 1.0,
            1000.0),
      Str("data.served_log", "hash",
          "data service: served.jsonl records each batch's example ids as "
          "an md5 (hash) or in full (ids)",
          {"hash", "ids"}),
      Str("data.shard_plan", "",
          "shard plan file from `strata shard`; empty = compute one with "
          "data.sharding.method"),
  };
}

// data.sharding.*
std::vector<ConfigKey> ShardingKeys() {
  return {
      Str("data.sharding.method", "mod",
          "how examples are assigned to workers (docs/design/sharding.md)",
          {"random", "mod", "stratified", "distribution-aware",
           "class-clusters"}),
      Int("data.sharding.seed", -1, "sharding seed; -1 = run.seed", -1, 1e18),
      Int("data.sharding.pca_components", 50,
          "distribution-aware, class-clusters: PCA dimension", 1, 1 << 20),
      Str("data.sharding.pca_solver", "krylov",
          "randomized PCA range finder: krylov = block Krylov; power = "
          "scikit-learn's power iterations",
          {"krylov", "power"}),
      Int("data.sharding.pca_iter", -1,
          "Krylov steps (krylov; -1 = 2) or power iterations (power; -1 = "
          "scikit-learn's auto: 7, or 4 when pca_components >= 10% of "
          "min(examples, dimension))",
          -1, 100),
      Int("data.sharding.clusters", 0,
          "distribution-aware: KMeans clusters; 0 = 2 x classes", 0, 1e9),
      Int("data.sharding.max_iter", 150, "KMeans iterations at most", 1, 1e6),
      Float("data.sharding.tol", 1e-4,
            "KMeans tolerance (relative to the mean feature variance)", 0.0,
            1.0),
      Int("data.sharding.n_init", 1, "KMeans restarts (best inertia kept)", 1,
          1000),
      Int("data.sharding.subclusters", 2,
          "class-clusters and the cluster-stratified sampler: sub-clusters per "
          "class",
          1, 1000),
      Int("data.sharding.threads", 0,
          "threads for sharding; 0 = cores (results do not depend on it)", 0,
          1024),
  };
}

// cluster.*: the scheduling mode and its knobs
std::vector<ConfigKey> ModeKeys() {
  return {
      // cluster
      Str("cluster.mode", "async",
          "scheduling mode: local = single-process trainer; sync, async, ssp = "
          "parameter-server cluster; easgd = elastic averaging with the "
          "servers; allreduce, ring, local-sgd, dpsgd, gossip = decentralized "
          "(no servers; docs/design/decentralized.md)",
          {"local", "sync", "async", "ssp", "easgd", "allreduce", "ring",
           "local-sgd", "dpsgd", "gossip", "tree-easgd"}),
      Int("cluster.servers", 2,
          "parameter servers (k); decentralized modes run none", 1, 1024),
      Int("cluster.data_servers", 0,
          "data servers of the mini-batch streaming service (0 = every "
          "worker loads the data itself; docs/design/data_service.md)",
          0, 1024),
      Str("cluster.sync_reduce", "mean",
          "sync: the server applies the mean or the sum of a step's gradients",
          {"mean", "sum"}),
      Int("cluster.average_every", 4,
          "local-sgd and easgd: local steps between averaging rounds (tau)", 1,
          1e9),
      Float("cluster.elastic_alpha", 0.1,
            "easgd: elastic coefficient alpha (each round moves a worker and "
            "the centre by alpha (w_i - centre))",
            0.0, 1.0),
      Str("cluster.topology", "ring",
          "dpsgd: neighbours of a worker (ring: 2; torus: 4 on a 2-D grid)",
          {"ring", "torus"}),
      Float("cluster.gossip_p", 0.5,
            "gossip: probability that a worker pushes to a random peer after "
            "a step",
            0.0, 1.0),
      Int("cluster.tau_up", 4,
          "tree-easgd: a worker sends its model to its parent every tau_up "
          "steps",
          1, 1e9),
      Int("cluster.tau_down", 4,
          "tree-easgd: a worker sends its model to its children every tau_down "
          "steps",
          1, 1e9),
      Int("cluster.tree_fanout", 2,
          "tree-easgd: children per worker (worker i's parent is (i-1)/fanout)",
          1, 4096),
      Str("cluster.collective", "auto",
          "allreduce, ring, local-sgd: how the workers' collectives travel: "
          "auto = through memory when the workers are threads of one "
          "process (the default launch), else Gloo over TCP; gloo = Gloo "
          "over TCP always",
          {"auto", "gloo"}),
      Bool("cluster.bucket_overlap", true,
           "allreduce: all-reduce each gradient bucket as soon as the "
           "backward pass has produced it, overlapping communication with "
           "the rest of the backward pass (as PyTorch DDP does)"),
      Float("cluster.bucket_mb", 1.0,
            "allreduce: gradient bucket size in MiB (buckets are reduced as "
            "the backward pass fills them)",
            0.0001, 4096),
  };
}

// cluster.*: workers, staleness, pipelining, compression
std::vector<ConfigKey> ExchangeKeys() {
  return {
      Int("cluster.workers", 4, "workers (n)", 1, 4096),
      Int("cluster.staleness", 2,
          "ssp: a worker may run at most this many clocks ahead of the slowest",
          0, 1e9),
      Int("cluster.updates_per_step", 0,
          "sync: gradients per update (k of n); 0 = all n workers", 0, 4096),
      Str("cluster.late_gradients", "drop",
          "sync k-of-n: what happens to a gradient whose step already closed",
          {"drop", "defer"}),
      Int("cluster.pull_interval", 1,
          "workers pull every p iterations and compute on their local copy in "
          "between",
          1, 1e9),
      Bool("cluster.pipeline", true,
           "sync (k = n), async and ssp: layer-wise pipelining; each "
           "server's keys are cut into ranges of cluster.pipeline_kb, a "
           "worker pushes each range as the backward pass finishes it, and "
           "the servers apply it and send its parameters back at once "
           "(exact: no extra staleness; docs/design/pipelining.md)"),
      Float("cluster.pipeline_kb", 128,
            "layer-wise pipelining: the most a range (bucket) holds, in KiB "
            "of float32 parameters (a server's keys are cut into the fewest "
            "equal ranges of at most this size)",
            0.00390625, 4194304),
      Bool("cluster.layer_wait", true,
           "parameter-server modes, CPU workers, built-in models: where a "
           "worker pulls before a step (the first step, every ssp step; "
           "sync and async get their parameters with the push's ack), the "
           "forward pass starts while the ranges arrive, and each layer "
           "waits only for its own parameters (exact; "
           "docs/design/pipelining.md)"),
      Float("cluster.slice_kb", -1,
            "with cluster.pipeline and cluster.layer_wait: a built-in "
            "model's fully-connected layers larger than this (mlp's fc1) "
            "compute in row slices of about this size, each its own range, "
            "so that each slice's gradient leaves as soon as it is computed "
            "and the next forward pass starts on a slice once its range is "
            "back (P3-style; equal to the unsliced layer to float rounding; "
            "0 = off; negative, the default: 256 over tcp, ucx and with "
            "--processes, off in one process over inproc; "
            "docs/design/pipelining.md)",
            -1, 4194304),
      Bool("cluster.overlap", false,
           "async only: the push (and pull) of iteration t travels while "
           "iteration t+1 computes, hiding communication behind compute; "
           "each gradient is then one update staler"),
      Str("cluster.compression", "none",
          "parameter-server modes: gradient pushes go as float32 (none), "
          "IEEE half (fp16, 0.5x the bytes) or int8 with a scale per 256 "
          "values and error feedback (about 0.25x) "
          "(docs/design/compression.md)",
          {"none", "fp16", "int8"}),
      Bool("cluster.compress_pulls", true,
           "with cluster.compression: workers' pulls come back with the same "
           "codec, as the difference to the worker's copy (the server keeps "
           "a mirror of each worker's copy; the next pull makes up one "
           "pull's error); false = pulls stay float32"),
      Str("cluster.lr_staleness", "none",
          "inverse = divide a gradient's rate by its staleness",
          {"none", "inverse"}),
      Bool("cluster.adapt_hyperparams", true,
           "per-worker batch = train.batch_size / n; async and ssp apply each "
           "gradient with train.lr / n (paper 001 Sec. II-C)"),
      Bool("cluster.evaluator", true,
           "run an evaluator node that tracks the global model"),
      Bool("cluster.timeline", false,
           "record one timeline of the whole cluster (every node's spans, "
           "clock offsets from the heartbeats) into timeline.json, a Chrome "
           "trace for Perfetto or chrome://tracing"),
      Int("cluster.timeline_events", 200000,
          "cluster.timeline: spans kept per thread (the oldest are dropped "
          "beyond it, and counted)",
          1, 1e8),
  };
}

// cluster.*: transport, security, processes, restarts
std::vector<ConfigKey> TransportKeys() {
  return {
      Str("cluster.transport", "inproc",
          "transport between the nodes: inproc (threads of one process, zero "
          "copy; --processes uses tcp), tcp (ZeroMQ), ucx (UCX active "
          "messages: shared memory and cross-memory attach between nodes on "
          "one machine, TCP or RDMA between machines; "
          "cluster.ucx_shared_memory; docs/design/transport.md; with "
          "--processes "
          "too; strata node takes it from --bind ucx://...)",
          {"inproc", "tcp", "ucx"}),
      Str("cluster.ucx_shared_memory", "auto",
          "over UCX, where UCX may use shared memory and cross-memory attach. "
          "UCX 1.13 allows those only on connections without its "
          "peer-failure handling; a peer that closes or dies is still "
          "reported at once there, only UCX's keepalive (a machine gone "
          "silent) is lost. auto: on connections to this machine's "
          "addresses; on: "
          "on every connection; off: never (every byte through UCX's TCP "
          "transport). In process and for --processes children; strata node "
          "reads STRATA_UCX_SHARED_MEMORY (auto, 1, 0). The connecting "
          "node's setting decides for a connection (docs/design/transport.md)",
          {"auto", "on", "off"}),
      Str("cluster.security", "none",
          "ZeroMQ TCP between nodes: none = plain TCP (loopback or a trusted "
          "network); curve = CurveZMQ authentication and encryption with the "
          "cluster key pair in cluster.keys_dir (docs/design/security.md, "
          "Security)",
          {"none", "curve"}),
      Str("cluster.keys_dir", "",
          "with cluster.security = \"curve\": the directory `strata keys "
          "generate DIR` wrote (cluster.key, cluster.pub); the same key on "
          "every machine"),
      Int("cluster.spin_us", 250,
          "in-process clusters (cluster.transport = \"inproc\"): a node "
          "thread that waits for a message or a reply polls this many "
          "microseconds before it sleeps, so that an answer coming within "
          "the window needs no wake-up (slow on virtual machines); 0 = "
          "sleep at once (docs/design/transport.md)",
          0, 100000),
      Bool("cluster.inline_server", true,
           "in-process clusters: a server with nothing queued handles a "
           "push or a pull on the sending worker's thread instead of waking "
           "its own, so the update runs where the gradient was just made; "
           "over UCX, on the transport's progress thread "
           "(docs/design/transport.md)"),
      Int("cluster.threads_per_worker", 1,
          "LibTorch threads per worker in a cluster (0 = cores / workers)", 0,
          1024),
      Int("cluster.heartbeat_interval_ms", 500, "heartbeat period", 10, 600000),
      Str("cluster.metrics_address", "",
          "host:port where the coordinator serves Prometheus /metrics "
          "(e.g. 127.0.0.1:9464; empty = off; docs/design/metrics.md)"),
      Bool("cluster.restart", false,
           "strata train --processes: when a lost node stops the run, start "
           "every node again from the newest checkpoint (needs "
           "checkpoint.every_updates or checkpoint.every_s; "
           "docs/design/checkpoints.md)"),
      Int("cluster.max_restarts", 3, "restarts cluster.restart may make", 0,
          1000),
      Str("cluster.control_address", "",
          "elastic: the run's control endpoint, tcp://IP:PORT (or tcp://IP:* "
          "for any port; the bound one goes into <run>/control.json): "
          "`strata scale --control` from another machine; under "
          "cluster.security = \"curve\" only holders of the cluster key pair "
          "are admitted; empty = none (docs/design/elastic.md)"),
      Str("cluster.processes_ip", "127.0.0.1",
          "strata train --processes: the IPv4 address its nodes bind; "
          "loopback keeps them on this machine, this machine's own address "
          "lets a worker on another one join through "
          "cluster.control_address (docs/design/elastic.md)"),
      Bool("cluster.forward_metrics", false,
           "a worker sends its metrics.jsonl lines to the coordinator, "
           "which writes them (and their TensorBoard events) into the run's "
           "directory, instead of writing them into its own; `strata node "
           "--join tcp://...` (a worker on another machine) sets it"),
  };
}

// cluster.*: elasticity and injected faults; eval.*
std::vector<ConfigKey> MembershipKeys() {
  return {
      Bool("cluster.leave_on_loss", false,
           "elastic: a lost worker leaves the run. Lockstep modes (sync, "
           "allreduce, ring, local-sgd, dpsgd) go on from the newest "
           "checkpoint on the others instead of stopping or restarting "
           "whole; async, ssp and easgd stop at a checkpoint of the others "
           "and go on from it, the rest of the lost worker's epoch "
           "re-planned over them, instead of going on without it (at least "
           "cluster.min_workers; --processes keeps the processes); needs "
           "checkpoints (docs/design/elastic.md)"),
      Int("cluster.min_workers", 1,
          "elastic: the fewest workers `strata scale` may leave the run "
          "(docs/design/elastic.md)",
          1, 4096),
      Int("cluster.max_workers", 0,
          "elastic: the most workers `strata scale` may give the run; 0 = no "
          "bound",
          0, 4096),
      Float("cluster.restart_timeout_s", 60,
            "cluster.restart in async, ssp and easgd: how long the run waits "
            "for a lost server's replacement to re-join before stopping",
            1, 86400),
      Int("cluster.heartbeat_timeout_ms", 5000,
          "a node silent this long is declared lost", 50, 3600000),
      Int("cluster.request_timeout_ms", 120000,
          "longest wait for a push, pull, barrier or clock reply", 100,
          86400000),
      Int("cluster.fail_worker", -1,
          "testing: this worker crashes (stops without a word) at "
          "cluster.fail_at; -1 = none",
          -1, 4095),
      Int("cluster.fail_at", 10,
          "testing: the iteration at which cluster.fail_worker crashes", 0,
          1e12),
      Str("cluster.fail_node", "",
          "testing: this node vanishes (stops without a word) "
          "cluster.fail_after_s after it joined: server (server 0), "
          "evaluator, data (data server 0) or coordinator (after training "
          "began); empty = none (workers: cluster.fail_worker)",
          {"", "server", "evaluator", "data", "coordinator"}),
      Float("cluster.fail_after_s", 1.0,
            "testing: when cluster.fail_node vanishes", 0, 1e9),
      Int("cluster.worker_delay_ms", 0,
          "testing: each worker sleeps a random 0..N ms per iteration "
          "(stragglers)",
          0, 600000),
      Int("eval.every_updates", 0,
          "evaluator: evaluate every N updates of the global model; 0 = use "
          "eval.every_s",
          0, 1e12),
      Float("eval.every_s", 1.0,
            "evaluator: seconds between evaluations (when eval.every_updates = "
            "0)",
            0.01, 1e6),
  };
}

// Every key but the emulation's, in the order `strata train --help` lists
// them.
std::vector<ConfigKey> MakeSchema() {
  std::vector<ConfigKey> keys;
  for (auto* section : {&RunAndDataKeys, &ModelKeys, &OptimizerKeys,
                        &DeviceKeys, &DataOrderKeys, &ShardingKeys, &ModeKeys,
                        &ExchangeKeys, &TransportKeys, &MembershipKeys}) {
    for (ConfigKey& k : section()) keys.push_back(std::move(k));
  }
  return keys;
}

// net.*: the links of one run's class of nodes, each field -1 = net.*'s.
void AddLinkClass(std::vector<ConfigKey>& keys, const std::string& cls,
                  const std::string& what) {
  keys.push_back(Float("net." + cls + ".bandwidth_bps", -1,
                       what + ": rate in bit/s (0 = unlimited; -1 = "
                              "net.bandwidth_bps)",
                       -1, 1e15));
  keys.push_back(Float("net." + cls + ".latency_ms", -1,
                       what + ": one-way latency in ms (-1 = net.latency_ms)",
                       -1, 1e6));
  keys.push_back(Float("net." + cls + ".jitter_ms", -1,
                       what + ": latency jitter in ms (-1 = net.jitter_ms)", -1,
                       1e6));
}

// The emulated cluster (docs/design/links.md): links (net.*) and worker
// speeds (workers.*). Off by default.
std::vector<ConfigKey> EmulationKeys() {
  std::vector<ConfigKey> keys = {
      Float("net.bandwidth_bps", 0,
            "emulated links: every link's rate in bit/s, e.g. 1e9 (0 = "
            "unlimited: net.* off unless a latency is set)",
            0, 1e15),
      Float("net.latency_ms", 0,
            "emulated links: every link's one-way latency in ms", 0, 1e6),
      Float("net.jitter_ms", 0,
            "emulated links: the latency varies uniformly by +- this many ms "
            "(order per link is kept)",
            0, 1e6),
      Str("net.nodes", "",
          "emulated links: per-node or per-pair overrides, e.g. \"worker3: "
          "bandwidth_bps=1e8 latency_ms=20; worker0-server1: latency_ms=5\" "
          "(a node's slows every link it is on; a pair's replaces its "
          "fields)"),
      Str("workers.speed", "",
          "heterogeneous workers: compute speed per worker, a list "
          "\"1,1,1,0.25\" (0.25 = 4x slower) or a distribution drawn per "
          "worker, \"uniform:0.5,1\" or \"lognormal:0.3\"; empty = all 1"),
      Float("workers.straggler_probability", 0,
            "heterogeneous workers: chance per step that a worker pauses "
            "workers.straggler_ms",
            0, 1),
      Float("workers.straggler_ms", 0,
            "heterogeneous workers: a transient straggler's pause in ms", 0,
            1e6),
      Float("workers.noise_sigma", 0,
            "heterogeneous workers: lognormal noise on each step's compute "
            "time (median 1, this sigma)",
            0, 10),
      Int("workers.seed", 0,
          "heterogeneous workers: seed of the draws (0 = run.seed)", 0, 1e18),
  };
  AddLinkClass(keys, "worker_server", "worker<->server links");
  AddLinkClass(keys, "worker_worker", "worker<->worker links");
  AddLinkClass(keys, "worker_data", "worker<->data server links");
  return keys;
}

std::vector<ConfigKey> AllKeys() {
  std::vector<ConfigKey> keys = MakeSchema();
  for (ConfigKey& k : EmulationKeys()) keys.push_back(std::move(k));
  return keys;
}

}  // namespace

const std::vector<ConfigKey>& Config::Schema() {
  static const std::vector<ConfigKey> schema = AllKeys();
  return schema;
}

}  // namespace strata
