#include "dataservice/data_role.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>

#include "cluster/node.h"
#include "cluster/protocol.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/md5.h"
#include "common/mutex.h"
#include "common/seconds.h"
#include "common/timeline.h"
#include "data/batch_cursor.h"
#include "dataservice/batch_stream.h"
#include "dataservice/served_replan.h"
#include "run/node_life.h"
#include "run/run_facts.h"
#include "sharding/report.h"
#include "sharding/resolve.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// Typed views of a payload of int64 / float32 (host order: the wire is
// little-endian and so is every machine this builds for).
template <typename T>
bool View(const Buffer& b, std::vector<T>* out) {
  if (b.size() % sizeof(T) != 0) return false;
  out->resize(b.size() / sizeof(T));
  if (b.size() > 0) std::memcpy(out->data(), b.data(), b.size());
  return true;
}

// A reply's kind travels in its key range (the RPC layer owns the flags).
void SetKind(Message* reply, uint32_t kind) {
  reply->header.key_begin = kind;
  reply->header.key_end = kind;
}

// The most batches one request may ask for.
constexpr int64_t kMaxBatchesPerReply = 64;

// A batch request's acknowledgements: the sequence numbers, how many
// losses each carries, the losses.
struct Acks {
  std::vector<int64_t> seqs, counts;
  std::vector<float> losses;
  std::vector<int64_t> given_back;  // prefetched batches not trained
};

// One data server: its cursor over the examples it serves, its node and the
// handlers of the service's messages. Thread-safe: the handlers run on the
// node's threads and share the cursor, the statistics and the logs under
// mu_.
class DataServer {
 public:
  explicit DataServer(RoleContext& ctx);
  Status Run(const std::string& coordinator);

 private:
  Status MakeCursor();
  void Route();
  // The worker `id` as this server's local index; InvalidArgument for a
  // node it does not serve.
  Status WorkerOf(NodeId id, int* local) const;
  void OnBatchRequest(Message req) EXCLUDES(mu_);
  void TakeAcks(int local, const Acks& acks) REQUIRES(mu_);
  // Up to `want` batches for worker `local` in one reply.
  Message Serve(int local, int64_t want) REQUIRES(mu_);
  void OnNodeLost(Message notice) EXCLUDES(mu_);
  void OnStats(Message req) EXCLUDES(mu_);
  void OnCheckpoint(Message req) EXCLUDES(mu_);
  // Resuming: the cursor comes back before any worker can ask for a batch.
  Status Restore() EXCLUDES(mu_);
  // A resume on another worker count (static assignment): the old data
  // servers' cursors re-planned onto this one (served_replan.h).
  Status Replan(const nlohmann::json& resize) REQUIRES(mu_);
  // Dynamic assignment on another number of data servers: the old data
  // servers' rests, this one's share first (served_replan.h).
  Status Regroup(const nlohmann::json& resize) REQUIRES(mu_);
  DataServerReport Report() const REQUIRES(mu_);
  // The served log and the stratum losses, appended to their files.
  void Flush() REQUIRES(mu_);

  const Config& config_;
  const ClusterRunOptions& o_;
  const ClusterPlan& plan_;
  const int index_;
  const int m_;  // data servers
  const Dataset& train_;
  const RunDirectory* const run_dir_;
  // The workers this data server feeds: w mod m == index.
  std::vector<int> group_;
  // Feature blocks come back to the pool when their send completes: no
  // fresh pages (and page faults) per batch.
  std::shared_ptr<BufferPool> pool_ = BufferPool::Create(size_t{64} << 20);
  const Clock::time_point start_ = Clock::now();
  mutable Mutex mu_;
  std::unique_ptr<BatchCursor> cursor_ GUARDED_BY(mu_);
  int64_t served_ GUARDED_BY(mu_) = 0;
  int64_t acked_ GUARDED_BY(mu_) = 0;
  int64_t waits_ GUARDED_BY(mu_) = 0;
  std::optional<ServedReplan> replan_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  Clock::time_point first_ GUARDED_BY(mu_){};
  Clock::time_point last_ GUARDED_BY(mu_){};
  std::string served_lines_ GUARDED_BY(mu_);
  std::string loss_lines_ GUARDED_BY(mu_);
  // Last: destroyed first, so no handler runs on what is gone.
  Node node_;
};

DataServer::DataServer(RoleContext& ctx)
    : config_(*ctx.config),
      o_(ctx.options()),
      plan_(*ctx.plan),
      index_(ctx.index),
      m_(o_.roles.num_data_servers()),
      train_(ctx.data->train),
      run_dir_(ctx.run_dir),
      node_(std::move(ctx.transport), o_.roles, o_.heartbeat_interval,
            o_.heartbeat_timeout) {
  for (int w = index_; w < o_.roles.num_workers(); w += m_) group_.push_back(w);
}

Status DataServer::MakeCursor() {
  BatchCursorOptions co;
  co.assignment = o_.assignment;
  co.sampler = o_.sampler;
  co.batch_size = o_.worker_batch;
  co.num_workers = static_cast<int>(group_.size());
  co.seed = o_.seed;
  co.shuffle = o_.shuffle;
  co.max_boost = o_.loss_aware_max_boost;
  co.epochs = o_.epochs;
  co.seed_workers = group_;
  std::vector<std::vector<int64_t>> shards;
  if (o_.assignment == Assignment::kStatic) {
    co.batches = o_.iterations;
    for (int w : group_) shards.push_back(plan_.shards->worker_indices[w]);
  } else {
    co.batches = o_.iterations_set
                     ? o_.iterations * static_cast<int64_t>(group_.size())
                     : 0;
    shards.emplace_back();
    for (int64_t i = index_; i < train_.size(); i += m_) shards[0].push_back(i);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<BatchCursor> cursor,
                   BatchCursor::Make(co, std::move(shards), train_.labels,
                                     plan_.shards->cluster_ids));
  MutexLock lock(&mu_);
  cursor_ = std::move(cursor);
  return Status::Ok();
}

Status DataServer::WorkerOf(NodeId id, int* local) const {
  Role role;
  int w;
  Status st = o_.roles.RoleOf(id, &role, &w);
  if (!st.ok() || role != Role::kWorker || w % m_ != index_) {
    return Status::InvalidArgument(
        "data server {} serves workers {} mod {}; {} is not one of them",
        index_, index_, m_, o_.roles.Describe(id));
  }
  *local = w / m_;
  return Status::Ok();
}

void DataServer::OnBatchRequest(Message req) {
  const timeline::Span span("serve batch", "data", req.header.sender,
                            node_.rpc().node_id());
  int local = 0;
  Acks acks;
  Status who = WorkerOf(req.header.sender, &local);
  if (who.ok() &&
      (req.payloads.size() < 3 || req.payloads.size() > 4 ||
       !View(req.payloads[0], &acks.seqs) ||
       !View(req.payloads[1], &acks.counts) ||
       !View(req.payloads[2], &acks.losses) ||
       (req.payloads.size() == 4 && !View(req.payloads[3], &acks.given_back)) ||
       acks.seqs.size() != acks.counts.size())) {
    who = Status::InvalidArgument(
        "malformed batch request from {} ({} payloads)",
        o_.roles.Describe(req.header.sender), req.payloads.size());
  }
  if (!who.ok()) {
    LogWarning("data server {}: {}", index_, who.message());
    node_.rpc().ReplyErrorOrLog(req, who);
    return;
  }
  MutexLock lock(&mu_);
  TakeAcks(local, acks);
  // A worker that arrived at a checkpoint round gives back its prefetched
  // batches, so that a worker still short of the round's step can train
  // them (docs/design/data_service.md, "Delivery"). Each goes to the front
  // of the queue: the last first, so they are served again in order.
  for (auto it = acks.given_back.rbegin(); it != acks.given_back.rend(); ++it) {
    Status st = cursor_->GiveBack(local, *it);
    if (st.ok()) {
      --served_;  // served again: counted then
    } else {
      LogWarning("data server {}: {}", index_, st.message());
    }
  }
  if (served_lines_.size() > (1 << 16)) Flush();
  if (req.header.key_begin <= 0) {
    Message reply;
    reply.header.type = MessageType::kBatchReply;
    SetKind(&reply, kBatchEnd);  // acknowledgements only
    node_.rpc().ReplyOrLog(req, std::move(reply));
    return;
  }
  node_.rpc().ReplyOrLog(req, Serve(local, req.header.key_begin));
}

void DataServer::TakeAcks(int local, const Acks& acks) {
  const int worker = group_[static_cast<size_t>(local)];
  size_t offset = 0;
  for (size_t k = 0; k < acks.seqs.size(); ++k) {
    const size_t c = static_cast<size_t>(std::max<int64_t>(0, acks.counts[k]));
    const float* l = nullptr;
    if (c > 0 && offset + c <= acks.losses.size())
      l = acks.losses.data() + offset;
    offset += c;
    auto a = cursor_->Ack(local, acks.seqs[k], l, l != nullptr ? c : 0);
    if (!a.ok()) {
      // A worker declared lost that was only slow: its batch went to
      // another worker already. Nothing to undo here.
      LogWarning("data server {}: {}", index_, a.status().message());
      continue;
    }
    ++acked_;
    nlohmann::json line{{"epoch", a->epoch},
                        {"worker", worker},
                        {"seq", a->seq},
                        {"n", a->ids.size()},
                        {"data_server", index_}};
    if (o_.served_log_ids) {
      line["ids"] = a->ids;
    } else {
      line["ids_md5"] = Md5Hex(a->ids.data(), a->ids.size() * sizeof(int64_t));
    }
    served_lines_ += line.dump() + "\n";
    if (cursor_->wants_losses() && acked_ % 20 == 0) {
      nlohmann::json s = cursor_->StratumLosses();
      s["wall_s"] = Seconds(start_, Clock::now());
      s["acked"] = acked_;
      s["data_server"] = index_;
      loss_lines_ += s.dump() + "\n";
    }
  }
}

Message DataServer::Serve(int local, int64_t asked) {
  Message reply;
  reply.header.type = MessageType::kBatchReply;
  // Up to `want` batches in one reply: fewer messages per batch.
  const int64_t want = std::min<int64_t>(asked, kMaxBatchesPerReply);
  const int64_t example_bytes =
      train_.example_size() * static_cast<int64_t>(sizeof(float));
  uint32_t kind = kBatchReady;
  int64_t count = 0;
  while (count < want) {
    BatchCursor::Lease lease = cursor_->Next(local);
    if (lease.kind != BatchCursor::Lease::Kind::kBatch) {
      if (count == 0) {
        kind = lease.kind == BatchCursor::Lease::Kind::kWait ? kBatchWait
                                                             : kBatchEnd;
        if (kind == kBatchWait) ++waits_;
      }
      break;
    }
    BatchHeader h;
    h.epoch = lease.epoch;
    h.seq = lease.seq;
    h.channels = train_.channels;
    h.height = train_.height;
    h.width = train_.width;
    const int64_t b = static_cast<int64_t>(lease.ids.size());
    Buffer features = pool_->Acquire(static_cast<size_t>(b * example_bytes));
    Buffer labels = Buffer::Allocate(static_cast<size_t>(b) * sizeof(int64_t));
    auto* x = reinterpret_cast<float*>(features.data());
    auto* y = reinterpret_cast<int64_t*>(labels.data());
    for (int64_t k = 0; k < b; ++k) {
      const int64_t id = lease.ids[k];
      std::memcpy(x + k * train_.example_size(), train_.example(id),
                  static_cast<size_t>(example_bytes));
      y[k] = train_.labels[id];
    }
    h.ids = std::move(lease.ids);
    reply.payloads.push_back(EncodeBatchHeader(h));
    reply.payloads.push_back(std::move(features));
    reply.payloads.push_back(std::move(labels));
    ++count;
  }
  SetKind(&reply, kind);
  reply.header.clock = count;
  if (count > 0) {
    served_ += count;
    bytes_ += reply.payload_bytes();
    const auto now = Clock::now();
    if (first_ == Clock::time_point{}) first_ = now;
    last_ = now;
  }
  return reply;
}

void DataServer::OnNodeLost(Message notice) {
  int local = 0;
  const NodeId lost = static_cast<NodeId>(notice.header.clock);
  if (!WorkerOf(lost, &local).ok()) return;  // not one of ours
  MutexLock lock(&mu_);
  const int back = cursor_->ReturnLeases(local);
  LogWarning(
      "data server {}: {} was lost; {} leased batches go back to be served "
      "again",
      index_, o_.roles.Describe(lost), back);
}

DataServerReport DataServer::Report() const {
  DataServerReport r;
  const double active = served_ > 1 ? Seconds(first_, last_) : 0.0;
  r.data_server = index_;
  r.assignment = AssignmentName(o_.assignment);
  r.sampler = SamplerKindName(o_.sampler);
  r.batches = served_;
  r.acked = acked_;
  r.returned = cursor_->returned();
  r.wait_replies = waits_;
  r.bytes = bytes_;
  r.active_s = active;
  r.batches_per_s = active > 0 ? served_ / active : 0.0;
  r.mb_per_s = active > 0 ? bytes_ / active / 1e6 : 0.0;
  auto loss = DataServerReport::StratumLoss::FromJson(cursor_->StratumLosses());
  STRATA_CHECK(loss.ok());  // the cursor's own JSON
  r.stratum_loss = std::move(loss).value();
  if (replan_) {
    r.replan_examples = replan_->examples;
    r.replan_max_tv = replan_->max_tv;
  }
  return r;
}

void DataServer::OnStats(Message req) {
  std::string text;
  {
    MutexLock lock(&mu_);
    Flush();
    text = Report().ToJson().dump();
  }
  Message reply;
  reply.header.type = MessageType::kStatsReply;
  reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
  node_.rpc().ReplyOrLog(req, std::move(reply));
}

// Checkpoints (docs/design/checkpoints.md): the cursor, with the leases
// out (a batch not acknowledged yet is served again after a restore).
void DataServer::OnCheckpoint(Message req) {
  std::string text;
  {
    MutexLock lock(&mu_);
    Flush();
    text = nlohmann::json{{"cursor", cursor_->SaveState()},
                          {"served", served_},
                          {"acked", acked_}}
               .dump();
  }
  Message reply;
  reply.header.type = MessageType::kAck;
  reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
  node_.rpc().ReplyOrLog(req, std::move(reply));
}

void DataServer::Flush() {
  if (run_dir_ == nullptr) return;
  const std::pair<const char*, std::string*> files[] = {
      {"served.jsonl", &served_lines_}, {"stratum_loss.jsonl", &loss_lines_}};
  for (const auto& [file, lines] : files) {
    if (lines->empty()) continue;
    lines->pop_back();  // AppendLine adds the last newline
    Status st = AppendLine(run_dir_->File(file), *lines);
    if (!st.ok()) LogWarning("data server {}: {}", index_, st.message());
    lines->clear();
  }
}

Status DataServer::Restore() {
  if (!o_.checkpoints()) return Status::Ok();
  const std::string who = fmt::format("data server {}", index_);
  ASSIGN_OR_RETURN(Message state, RequestCheckpointState(node_.rpc(), o_, who));
  if (state.payloads.empty()) {
    // A resume (or a replacement) from nothing would serve the run again
    // from its first epoch.
    if (o_.resume)
      return Status::FailedPrecondition(
          "{}: the coordinator has no checkpoint state for it (its log says "
          "why)",
          who);
    return Status::Ok();
  }
  nlohmann::json j = nlohmann::json::parse(state.payloads[0].ToString(),
                                           nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("cursor"))
    return Status::DataLoss("{} state: bad JSON", who);
  MutexLock lock(&mu_);
  served_ = j.value("served", int64_t{0});
  acked_ = j.value("acked", int64_t{0});
  // A replacement (cluster.restart): its predecessor's leases after the
  // checkpoint may still be acknowledged; new ones take other numbers, a
  // random block of 2^32 per restored cursor.
  const int64_t block =
      static_cast<int64_t>(std::random_device{}() % (1u << 20) + 1) << 32;
  const bool resized = j.contains("resize");
  if (resized && o_.assignment == Assignment::kStatic) {
    RETURN_IF_ERROR(Replan(j["resize"]));
    cursor_->SkipSequenceNumbers(block);
    return Status::Ok();
  }
  // Dynamic on another number of data servers: the examples change hands.
  if (resized && j["resize"].value("from_data_servers", m_) != m_) {
    RETURN_IF_ERROR(Regroup(j["resize"]));
    cursor_->SkipSequenceNumbers(block);
    return Status::Ok();
  }
  // Dynamic: the cursor serves any number of workers; newcomers ask.
  Status st = cursor_->RestoreState(j["cursor"], resized);
  if (!st.ok()) return Status::DataLoss("{} state: {}", who, st.message());
  cursor_->SkipSequenceNumbers(block);
  LogInfo("{}: resumed at step {} ({} batches out on lease are served again)",
          who, state.header.clock, cursor_->leases_out());
  return Status::Ok();
}

Status DataServer::Replan(const nlohmann::json& resize) {
  const int from = resize.value("from_workers", 0);
  ASSIGN_OR_RETURN(ShardSet old, ResolveShards(config_, train_, from));
  ASSIGN_OR_RETURN(ServedReplan r,
                   ReplanServed(o_, resize, index_, train_, old, *cursor_));
  LogInfo(
      "data server {}: resumed on {} workers (the checkpoint's: {}): {} "
      "examples were left before epoch {}, re-planned over the new workers "
      "(largest class TV of a part {:.4f})",
      index_, o_.roles.num_workers(), from, r.examples, r.next_epoch, r.max_tv);
  replan_ = r;
  return Status::Ok();
}

Status DataServer::Regroup(const nlohmann::json& resize) {
  const int old_m = resize.value("from_data_servers", 0);
  ASSIGN_OR_RETURN(ServedReplan r,
                   ReplanRegrouped(o_, resize, index_, train_,
                                   plan_.shards->cluster_ids, *cursor_));
  LogInfo(
      "data server {}: resumed as one of {} data servers (the checkpoint's: "
      "{}): {} examples were left before epoch {}; it serves its own of them "
      "first (largest class TV {:.4f})",
      index_, m_, old_m, r.examples, r.next_epoch, r.max_tv);
  replan_ = r;
  return Status::Ok();
}

void DataServer::Route() {
  node_.On(MessageType::kBatchRequest,
           [this](Message m) { OnBatchRequest(std::move(m)); });
  node_.On(MessageType::kNodeLost,
           [this](Message m) { OnNodeLost(std::move(m)); });
  node_.On(MessageType::kStatsRequest,
           [this](Message m) { OnStats(std::move(m)); });
  node_.On(MessageType::kCheckpointRequest,
           [this](Message m) { OnCheckpoint(std::move(m)); });
}

Status DataServer::Run(const std::string& coordinator) {
  if (!plan_.shards) {
    return Status::FailedPrecondition(
        "data server {}: the cluster plan was made without shards", index_);
  }
  if (index_ == 0 && run_dir_ != nullptr) {
    // The workers load nothing: the shard report comes from here.
    RETURN_IF_ERROR(WriteShardReport(plan_.shards->report,
                                     run_dir_->File("shard_report.json")));
  }
  RETURN_IF_ERROR(MakeCursor());
  Route();
  RunFacts facts = RunFacts::Of(plan_);
  facts.data = DataFacts{train_.channels, train_.height, train_.width,
                         train_.num_classes, train_.size()};
  LogInfo(
      "data server {}: {} assignment, sampler {}, serving workers {} mod {} "
      "from {} training examples",
      index_, AssignmentName(o_.assignment), SamplerKindName(o_.sampler),
      index_, m_, train_.size());
  Status joined = node_.Join(coordinator, o_.request_timeout, facts.ToText(),
                             [this](const std::string&) { return Restore(); });
  if (!joined.ok()) {
    // The coordinator sees only a lost node: say here why.
    LogError("data server {}: {}", index_, joined.message());
    return joined;
  }
  // The coordinator ends the run; a Ctrl-C reaches it.
  RETURN_IF_ERROR(ServeUntilTheEnd(node_, o_, Role::kData, index_));
  {
    MutexLock lock(&mu_);
    Flush();
  }
  node_.Leave();
  const std::string reason = node_.member().shutdown_reason();
  if (!reason.empty()) return Status::Cancelled("run ended: {}", reason);
  return Status::Ok();
}

}  // namespace

Status RunDataRole(RoleContext& ctx) {
  DataServer server(ctx);
  return server.Run(ctx.coordinator);
}

}  // namespace strata
