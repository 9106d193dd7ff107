#include "train/data_service.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "cluster/coordinator.h"
#include "cluster/node.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/md5.h"
#include "data/batch_cursor.h"
#include "ps/protocol.h"
#include "sharding/report.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kBatchMagic = 0x54414253;  // "SBAT" little-endian
constexpr uint16_t kBatchVersion = 1;
constexpr uint16_t kDtypeFloat32 = 1;
constexpr size_t kFixedHeader = 4 + 2 + 2 + 6 * 8;

void PutI64(std::vector<uint8_t>* out, int64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i)
    b[i] = static_cast<uint8_t>(uint64_t(v) >> (8 * i));
  out->insert(out->end(), b, b + 8);
}

int64_t GetI64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

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

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Buffer EncodeBatchHeader(const BatchHeader& h) {
  std::vector<uint8_t> out;
  out.reserve(kFixedHeader + 8 * h.ids.size());
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<uint8_t>(kBatchMagic >> (8 * i)));
  out.push_back(kBatchVersion & 0xff);
  out.push_back(kBatchVersion >> 8);
  out.push_back(kDtypeFloat32 & 0xff);
  out.push_back(kDtypeFloat32 >> 8);
  for (int64_t v : {h.epoch, h.seq, h.size(), h.channels, h.height, h.width})
    PutI64(&out, v);
  for (int64_t id : h.ids) PutI64(&out, id);
  return Buffer::FromVector(std::move(out));
}

Result<BatchHeader> DecodeBatchHeader(const Buffer& b) {
  if (b.size() < kFixedHeader) {
    return Status::DataLoss("batch header of {} bytes (at least {} expected)",
                            b.size(), kFixedHeader);
  }
  const uint8_t* p = b.data();
  const uint32_t magic = uint32_t(p[0]) | uint32_t(p[1]) << 8 |
                         uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  const uint16_t version = static_cast<uint16_t>(p[4] | p[5] << 8);
  const uint16_t dtype = static_cast<uint16_t>(p[6] | p[7] << 8);
  if (magic != kBatchMagic) return Status::DataLoss("not a batch header");
  if (version != kBatchVersion || dtype != kDtypeFloat32) {
    return Status::DataLoss(
        "batch header version {} dtype {} (this build reads version {} "
        "float32)",
        version, dtype, kBatchVersion);
  }
  BatchHeader h;
  h.epoch = GetI64(p + 8);
  h.seq = GetI64(p + 16);
  const int64_t n = GetI64(p + 24);
  h.channels = GetI64(p + 32);
  h.height = GetI64(p + 40);
  h.width = GetI64(p + 48);
  if (n < 0 || h.channels < 1 || h.height < 1 || h.width < 1 ||
      static_cast<uint64_t>(n) != (b.size() - kFixedHeader) / 8 ||
      (b.size() - kFixedHeader) % 8 != 0) {
    return Status::DataLoss("batch header: {} examples of {}x{}x{} in {} bytes",
                            n, h.channels, h.height, h.width, b.size());
  }
  h.ids.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) h.ids[i] = GetI64(p + kFixedHeader + 8 * i);
  return h;
}

nlohmann::json DataFacts::ToJson() const {
  return {{"shape", {channels, height, width}},
          {"classes", classes},
          {"train_size", train_size}};
}

Result<DataFacts> DataFacts::FromJson(const nlohmann::json& j) {
  DataFacts f;
  try {
    auto shape = j.at("shape").get<std::vector<int64_t>>();
    if (shape.size() != 3) throw std::out_of_range("shape");
    f.channels = shape[0];
    f.height = shape[1];
    f.width = shape[2];
    f.classes = j.at("classes").get<int64_t>();
    f.train_size = j.at("train_size").get<int64_t>();
  } catch (const std::exception& e) {
    return Status::DataLoss("malformed data facts from the data servers: {}",
                            j.dump());
  }
  if (f.channels < 1 || f.height < 1 || f.width < 1 || f.classes < 1 ||
      f.train_size < 1) {
    return Status::DataLoss("data facts out of range: {}", j.dump());
  }
  return f;
}

Status RunDataRole(const Config& config, const ClusterPlan& plan, int index,
                   const DatasetSplits& data,
                   std::unique_ptr<Transport> transport,
                   const std::string& coordinator_endpoint,
                   const RunDirectory* run_dir, const std::atomic<bool>* stop) {
  (void)stop;  // the coordinator ends the run; Ctrl-C reaches it
  const ClusterRunOptions& o = plan.options;
  const int m = o.roles.num_data_servers();
  const int n = o.roles.num_workers();
  const Dataset& train = data.train;
  if (!plan.shards) {
    return Status::FailedPrecondition(
        "data server {}: the cluster plan was made without shards", index);
  }
  // The workers this data server feeds: w mod m == index.
  std::vector<int> group;
  for (int w = index; w < n; w += m) group.push_back(w);
  BatchCursorOptions co;
  co.assignment = o.assignment;
  co.sampler = config.GetString("data.sampler");
  co.batch_size = o.worker_batch;
  co.num_workers = static_cast<int>(group.size());
  co.seed = o.seed;
  co.shuffle = o.shuffle;
  co.max_boost = config.GetFloat("data.loss_aware.max_boost");
  co.epochs = o.epochs;
  co.seed_workers = group;
  std::vector<std::vector<int64_t>> shards;
  if (o.assignment == Assignment::kStatic) {
    co.batches = o.iterations;
    for (int w : group) shards.push_back(plan.shards->worker_indices[w]);
  } else {
    co.batches = config.GetInt("train.iterations") > 0
                     ? o.iterations * static_cast<int64_t>(group.size())
                     : 0;
    shards.emplace_back();
    for (int64_t i = index; i < train.size(); i += m) shards[0].push_back(i);
  }
  if (index == 0 && run_dir != nullptr) {
    // The workers load nothing: the shard report comes from here.
    RETURN_IF_ERROR(WriteShardReport(plan.shards->report,
                                     run_dir->File("shard_report.json")));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<BatchCursor> cursor,
                   BatchCursor::Make(co, std::move(shards), train.labels,
                                     plan.shards->cluster_ids));
  const bool full_ids = config.GetString("data.served_log") == "ids";
  const int64_t example_bytes =
      train.example_size() * static_cast<int64_t>(sizeof(float));

  // Feature blocks come back to the pool when their send completes: no
  // fresh pages (and page faults) per batch.
  std::shared_ptr<BufferPool> pool = BufferPool::Create(size_t{64} << 20);
  std::mutex mu;
  // Statistics, the served log and stratum losses: GUARDED_BY(mu).
  int64_t served = 0, acked = 0, waits = 0;
  uint64_t bytes = 0;
  Clock::time_point first{}, last{};
  const auto start = Clock::now();
  std::string served_lines, loss_lines;
  auto flush = [&] {
    if (run_dir == nullptr) return;
    const std::pair<const char*, std::string*> files[] = {
        {"served.jsonl", &served_lines}, {"stratum_loss.jsonl", &loss_lines}};
    for (const auto& [file, lines] : files) {
      if (lines->empty()) continue;
      lines->pop_back();  // AppendLine adds the last newline
      Status st = AppendLine(run_dir->File(file), *lines);
      if (!st.ok()) LogWarning("data server {}: {}", index, st.message());
      lines->clear();
    }
  };

  Node node(std::move(transport), o.roles, o.heartbeat_interval,
            o.heartbeat_timeout);
  auto worker_of = [&](NodeId id, int* local) -> Status {
    Role role;
    int w;
    Status st = o.roles.RoleOf(id, &role, &w);
    if (!st.ok() || role != Role::kWorker || w % m != index) {
      return Status::InvalidArgument(
          "data server {} serves workers {} mod {}; {} is not one of them",
          index, index, m, o.roles.Describe(id));
    }
    *local = w / m;
    return Status::Ok();
  };
  node.On(kBatchRequest, [&](Message req) {
    int local = 0;
    Status who = worker_of(req.header.sender, &local);
    std::vector<int64_t> seqs, counts;
    std::vector<float> losses;
    if (who.ok() &&
        (req.payloads.size() != 3 || !View(req.payloads[0], &seqs) ||
         !View(req.payloads[1], &counts) || !View(req.payloads[2], &losses) ||
         seqs.size() != counts.size())) {
      who = Status::InvalidArgument(
          "malformed batch request from {} ({} payloads)",
          o.roles.Describe(req.header.sender), req.payloads.size());
    }
    if (!who.ok()) {
      LogWarning("data server {}: {}", index, who.message());
      node.rpc().ReplyErrorOrLog(req, who);
      return;
    }
    const int worker = group[static_cast<size_t>(local)];
    std::lock_guard<std::mutex> lock(mu);
    size_t offset = 0;
    for (size_t k = 0; k < seqs.size(); ++k) {
      const size_t c = static_cast<size_t>(std::max<int64_t>(0, counts[k]));
      const float* l = nullptr;
      if (c > 0 && offset + c <= losses.size()) l = losses.data() + offset;
      offset += c;
      auto a = cursor->Ack(local, seqs[k], l, l != nullptr ? c : 0);
      if (!a.ok()) {
        // A worker declared lost that was only slow: its batch went to
        // another worker already. Nothing to undo here.
        LogWarning("data server {}: {}", index, a.status().message());
        continue;
      }
      ++acked;
      nlohmann::json line{{"epoch", a->epoch},
                          {"worker", worker},
                          {"seq", a->seq},
                          {"n", a->ids.size()},
                          {"data_server", index}};
      if (full_ids) {
        line["ids"] = a->ids;
      } else {
        line["ids_md5"] =
            Md5Hex(a->ids.data(), a->ids.size() * sizeof(int64_t));
      }
      served_lines += line.dump() + "\n";
      if (cursor->wants_losses() && acked % 20 == 0) {
        nlohmann::json s = cursor->StratumLosses();
        s["wall_s"] = Seconds(start, Clock::now());
        s["acked"] = acked;
        s["data_server"] = index;
        loss_lines += s.dump() + "\n";
      }
    }
    if (served_lines.size() > (1 << 16)) flush();
    Message reply;
    reply.header.type = kBatchReply;
    if (req.header.key_begin <= 0) {
      SetKind(&reply, kBatchEnd);  // acknowledgements only
      node.rpc().ReplyOrLog(req, std::move(reply));
      return;
    }
    // Up to `want` batches in one reply: fewer messages per batch.
    const int64_t want =
        std::min<int64_t>(req.header.key_begin, kMaxBatchesPerReply);
    uint32_t kind = kBatchReady;
    int64_t count = 0;
    while (count < want) {
      BatchCursor::Lease lease = cursor->Next(local);
      if (lease.kind != BatchCursor::Lease::Kind::kBatch) {
        if (count == 0) {
          kind = lease.kind == BatchCursor::Lease::Kind::kWait ? kBatchWait
                                                               : kBatchEnd;
          if (kind == kBatchWait) ++waits;
        }
        break;
      }
      BatchHeader h;
      h.epoch = lease.epoch;
      h.seq = lease.seq;
      h.channels = train.channels;
      h.height = train.height;
      h.width = train.width;
      const int64_t b = static_cast<int64_t>(lease.ids.size());
      Buffer features = pool->Acquire(static_cast<size_t>(b * example_bytes));
      Buffer labels =
          Buffer::Allocate(static_cast<size_t>(b) * sizeof(int64_t));
      auto* x = reinterpret_cast<float*>(features.data());
      auto* y = reinterpret_cast<int64_t*>(labels.data());
      for (int64_t k = 0; k < b; ++k) {
        const int64_t id = lease.ids[k];
        std::memcpy(x + k * train.example_size(), train.example(id),
                    static_cast<size_t>(example_bytes));
        y[k] = train.labels[id];
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
      served += count;
      bytes += reply.payload_bytes();
      const auto now = Clock::now();
      if (first == Clock::time_point{}) first = now;
      last = now;
    }
    node.rpc().ReplyOrLog(req, std::move(reply));
  });
  node.On(kNodeLost, [&](Message notice) {
    int local = 0;
    const NodeId lost = static_cast<NodeId>(notice.header.clock);
    if (!worker_of(lost, &local).ok()) return;  // not one of ours
    std::lock_guard<std::mutex> lock(mu);
    const int back = cursor->ReturnLeases(local);
    LogWarning(
        "data server {}: {} was lost; {} leased batches go back to be served "
        "again",
        index, o.roles.Describe(lost), back);
  });
  node.On(kStatsRequest, [&](Message req) {
    nlohmann::json s;
    {
      std::lock_guard<std::mutex> lock(mu);
      flush();
      const double active = served > 1 ? Seconds(first, last) : 0.0;
      s = {{"data_server", index},
           {"assignment", AssignmentName(o.assignment)},
           {"sampler", co.sampler},
           {"batches", served},
           {"acked", acked},
           {"returned", cursor->returned()},
           {"wait_replies", waits},
           {"bytes", bytes},
           {"active_s", active},
           {"batches_per_s", active > 0 ? served / active : 0.0},
           {"mb_per_s", active > 0 ? bytes / active / 1e6 : 0.0}};
      nlohmann::json loss = cursor->StratumLosses();
      if (!loss.empty()) s["stratum_loss"] = loss;
    }
    Message reply;
    reply.header.type = kStatsReply;
    const std::string text = s.dump();
    reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
    node.rpc().ReplyOrLog(req, std::move(reply));
  });
  // Checkpoints (docs/checkpoints.md): the cursor, with the leases out (a
  // batch not acknowledged yet is served again after a restore).
  node.On(kCheckpointRequest, [&](Message req) {
    std::string text;
    {
      std::lock_guard<std::mutex> lock(mu);
      flush();
      text = nlohmann::json{{"cursor", cursor->SaveState()},
                            {"served", served},
                            {"acked", acked}}
                 .dump();
    }
    Message reply;
    reply.header.type = MessageType::kAck;
    reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
    node.rpc().ReplyOrLog(req, std::move(reply));
  });
  DataFacts facts;
  facts.channels = train.channels;
  facts.height = train.height;
  facts.width = train.width;
  facts.classes = train.num_classes;
  facts.train_size = train.size();
  nlohmann::json run_facts_json = RunFactsJson(plan);
  run_facts_json["data"] = facts.ToJson();
  const std::string run_facts = run_facts_json.dump();
  LogInfo(
      "data server {}: {} assignment, sampler {}, serving workers {} mod {} "
      "from {} training examples",
      index, AssignmentName(o.assignment), co.sampler, index, m, train.size());
  // Resuming: the cursor comes back before any worker can ask for a batch.
  auto restore = [&](const std::string&) -> Status {
    if (!o.checkpoints()) return Status::Ok();
    const std::string who = fmt::format("data server {}", index);
    ASSIGN_OR_RETURN(Message state, RequestCheckpointState(node.rpc(), o, who));
    if (state.payloads.empty()) return Status::Ok();
    nlohmann::json j =
        nlohmann::json::parse(state.payloads[0].ToString(), nullptr,
                              /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("cursor"))
      return Status::DataLoss("{} state: bad JSON", who);
    std::lock_guard<std::mutex> lock(mu);
    Status st = cursor->RestoreState(j["cursor"]);
    if (!st.ok()) return Status::DataLoss("{} state: {}", who, st.message());
    served = j.value("served", int64_t{0});
    acked = j.value("acked", int64_t{0});
    LogInfo("{}: resumed at step {} ({} batches out on lease are served again)",
            who, state.header.clock, cursor->leases_out());
    return Status::Ok();
  };
  RETURN_IF_ERROR(
      node.Join(coordinator_endpoint, o.request_timeout, run_facts, restore));
  RETURN_IF_ERROR(ServeUntilTheEnd(node, o, Role::kData, index));
  {
    std::lock_guard<std::mutex> lock(mu);
    flush();
  }
  node.Leave();
  const std::string reason = node.member().shutdown_reason();
  if (!reason.empty()) return Status::Cancelled("run ended: {}", reason);
  return Status::Ok();
}

BatchStream::BatchStream(RpcEndpoint& rpc, NodeId data_server,
                         std::string server_name, int prefetch,
                         std::chrono::milliseconds timeout,
                         std::function<std::string()> cancelled)
    : rpc_(rpc),
      server_(data_server),
      name_(std::move(server_name)),
      prefetch_(std::max(1, prefetch)),
      timeout_(timeout),
      cancelled_(std::move(cancelled)) {}

void BatchStream::Request(int64_t want) {
  Message m;
  m.header.type = kBatchRequest;
  m.header.key_begin = want;
  m.header.key_end = want;
  m.payloads.push_back(Buffer::CopyOf(ack_seqs_));
  m.payloads.push_back(Buffer::CopyOf(ack_counts_));
  m.payloads.push_back(Buffer::CopyOf(ack_losses_));
  ack_seqs_.clear();
  ack_counts_.clear();
  ack_losses_.clear();
  in_flight_.emplace_back(rpc_.Request(server_, std::move(m)), want);
  asked_ += want;
}

void BatchStream::Refill() {
  if (!ended_ && static_cast<int64_t>(ready_.size()) + asked_ < prefetch_)
    Request(prefetch_);
}

void BatchStream::Ack(int64_t seq, const std::vector<float>& losses) {
  ack_seqs_.push_back(seq);
  ack_counts_.push_back(static_cast<int64_t>(losses.size()));
  ack_losses_.insert(ack_losses_.end(), losses.begin(), losses.end());
}

Result<bool> BatchStream::Next(StreamedBatch* out) {
  const auto start = Clock::now();
  const auto deadline = start + timeout_;
  auto done = [&](bool got) {
    wait_s_ += Seconds(start, Clock::now());
    return got;
  };
  while (true) {
    // Keep `prefetch` batches on their way: one request for `prefetch`
    // batches whenever fewer than that are here or in flight.
    Refill();
    if (!ready_.empty()) {
      *out = std::move(ready_.front());
      ready_.pop_front();
      Refill();  // the next batches travel while this step computes
      return done(true);
    }
    if (in_flight_.empty()) return done(false);  // ended, all drained
    std::shared_ptr<RpcCall> call = in_flight_.front().first;
    const int64_t asked = in_flight_.front().second;
    // Wait in slices, so that the end of the run (a lost data server, the
    // coordinator's stop) is noticed within 100 ms.
    Result<Message> r = Status::DeadlineExceeded("not yet");
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - Clock::now());
      r = call->Wait(std::clamp(left, std::chrono::milliseconds(1),
                                std::chrono::milliseconds(100)));
      if (r.ok() || r.status().code() != Status::Code::kDeadlineExceeded ||
          Clock::now() >= deadline)
        break;
      if (cancelled_) {
        const std::string reason = cancelled_();
        if (!reason.empty()) {
          return Status::Cancelled("stopped waiting for a batch from {}: {}",
                                   name_, reason);
        }
      }
    }
    if (!r.ok()) {
      if (r.status().code() == Status::Code::kDeadlineExceeded) {
        return Status::DeadlineExceeded(
            "no batch from {} in {:.1f} s (cluster.request_timeout_ms)", name_,
            timeout_.count() / 1000.0);
      }
      return r.status().WithContext(fmt::format("batch from {}", name_));
    }
    in_flight_.pop_front();
    asked_ -= asked;
    if (r->header.key_begin == kBatchEnd) {
      ended_ = true;
      continue;  // drain the other requests: they may still hold batches
    }
    if (r->header.key_begin == kBatchWait) {
      // Another worker holds the epoch's last leases: ask again shortly.
      if (Clock::now() > deadline) {
        return Status::DeadlineExceeded(
            "{} kept this worker waiting {:.1f} s for leased batches to be "
            "acknowledged or returned",
            name_, timeout_.count() / 1000.0);
      }
      if (cancelled_ && !cancelled_().empty()) {
        return Status::Cancelled("stopped waiting for a batch from {}: {}",
                                 name_, cancelled_());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    const int64_t count = r->header.clock;
    if (r->header.key_begin != kBatchReady || count < 1 || count > asked ||
        r->payloads.size() != static_cast<size_t>(3 * count)) {
      return Status::DataLoss("malformed batch reply from {}", name_);
    }
    for (int64_t k = 0; k < count; ++k) {
      ASSIGN_OR_RETURN(BatchHeader h, DecodeBatchHeader(r->payloads[3 * k]));
      const uint64_t n = static_cast<uint64_t>(h.size());
      Buffer& features = r->payloads[3 * k + 1];
      Buffer& labels = r->payloads[3 * k + 2];
      if (features.size() !=
              n * static_cast<uint64_t>(h.example_size()) * sizeof(float) ||
          labels.size() != n * sizeof(int64_t)) {
        return Status::DataLoss(
            "batch {} from {}: {} feature and {} label bytes for {} examples",
            h.seq, name_, features.size(), labels.size(), n);
      }
      StreamedBatch b;
      b.header = std::move(h);
      b.features = std::move(features);
      b.labels = std::move(labels);
      ready_.push_back(std::move(b));
    }
  }
}

Status BatchStream::SendAcks() {
  if (ack_seqs_.empty()) return Status::Ok();
  Request(0);
  std::shared_ptr<RpcCall> call = in_flight_.back().first;
  in_flight_.pop_back();
  Result<Message> r = call->Wait(timeout_);
  if (!r.ok())
    return r.status().WithContext(fmt::format("acknowledging to {}", name_));
  return Status::Ok();
}

Status BatchStream::Flush() {
  // Whatever is still in flight is not needed any more.
  in_flight_.clear();
  ready_.clear();
  asked_ = 0;
  if (ack_seqs_.empty()) return Status::Ok();
  Request(0);
  std::shared_ptr<RpcCall> call = in_flight_.back().first;
  in_flight_.clear();
  Result<Message> r = call->Wait(timeout_);
  if (!r.ok())
    return r.status().WithContext(fmt::format("acknowledging to {}", name_));
  return Status::Ok();
}

}  // namespace strata
