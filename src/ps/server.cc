#include "ps/server.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/json_field.h"
#include "common/log.h"
#include "common/safetensors.h"
#include "common/timeline.h"
#include "ps/compression.h"
#include "ps/protocol.h"

namespace strata {

namespace {

// A payload that is a view of a parameter snapshot (no copy; the buffer
// holds the snapshot until the transport is done with it).
Buffer SnapshotBuffer(std::shared_ptr<const std::vector<float>> snapshot) {
  auto* data = const_cast<float*>(snapshot->data());
  const size_t bytes = sizeof(float) * snapshot->size();
  return Buffer::Adopt(data, bytes,
                       std::const_pointer_cast<std::vector<float>>(snapshot));
}

}  // namespace

ParameterServer::ParameterServer(ServerOptions options,
                                 std::unique_ptr<Transport> transport,
                                 std::function<void(Message)> other)
    : options_(std::move(options)),
      other_(std::move(other)),
      owned_rpc_(std::make_unique<RpcEndpoint>(
          std::move(transport), [this](Message m) { Handle(std::move(m)); })),
      rpc_(owned_rpc_.get()) {}

ParameterServer::ParameterServer(ServerOptions options, RpcEndpoint& rpc)
    : options_(std::move(options)), rpc_(&rpc) {}

ParameterServer::~ParameterServer() { Stop(); }

void ParameterServer::Start() {
  if (owned_rpc_) owned_rpc_->Start();
}
void ParameterServer::Stop() {
  if (owned_rpc_) owned_rpc_->Stop();
}

ShardStats ParameterServer::stats() const {
  MutexLock lock(&shard_mu_);
  return shard_ ? shard_->stats() : ShardStats{};
}

ServerReport ParameterServer::Report() const {
  ShardStats s = stats();
  const KeyRange range = Range();
  ServerReport r;
  r.range_begin = range.begin;
  r.range_end = range.end;
  r.gradients_per_update = std::move(s.gradients_per_update);
  r.staleness = std::move(s.staleness);
  r.tail_updates = s.tail_updates;
  r.updates = s.updates;
  r.applied_gradients = s.applied_gradients;
  r.dropped = s.dropped;
  r.deferred = s.deferred;
  if (restored_) r.lost_updates_at_least = lost_updates_.load();
  // A follower (sync k-of-n) counts no dropped or deferred gradients and no
  // staleness: its leader's counters are the run's.
  r.follower = follower();
  return r;
}

Result<ShardState> ParameterServer::SaveShardState() const {
  MutexLock lock(&shard_mu_);
  if (!shard_) {
    return Status::FailedPrecondition(
        "server {} has no parameters yet (nothing to checkpoint)",
        rpc_->node_id());
  }
  return shard_->SaveState();
}

int64_t ParameterServer::version() const {
  MutexLock lock(&shard_mu_);
  return shard_ ? shard_->version() : 0;
}

Result<std::vector<Buffer>> ParameterServer::SaveState() const {
  ASSIGN_OR_RETURN(ShardState state, SaveShardState());
  return EncodeServerState(Range(), state);
}

Result<std::vector<Buffer>> EncodeServerState(const KeyRange& r,
                                              const ShardState& state,
                                              const std::string& extra_json) {
  std::vector<SafeTensor> tensors = {
      SafeTensor::Floats("params", {static_cast<int64_t>(state.params.size())},
                         state.params.data())};
  for (const auto& [name, values] : state.optimizer.buffers) {
    tensors.push_back(SafeTensor::Floats("optimizer/" + name,
                                         {static_cast<int64_t>(values.size())},
                                         values.data()));
  }
  ASSIGN_OR_RETURN(std::string bytes, EncodeSafetensors(tensors));
  const ShardStats& st = state.stats;
  nlohmann::json meta = nlohmann::json{
      {"version", state.version},
      {"optimizer_steps", state.optimizer.steps},
      {"range", {r.begin, r.end}},
      {"stats",
       {{"applied_gradients", st.applied_gradients},
        {"updates", st.updates},
        {"dropped", st.dropped},
        {"deferred", st.deferred},
        {"tail_updates", st.tail_updates},
        {"staleness", CountsToJson(st.staleness)},
        {"gradients_per_update", CountsToJson(st.gradients_per_update)}}}};
  if (!extra_json.empty()) {
    nlohmann::json extra = nlohmann::json::parse(extra_json);
    for (const auto& [k, v] : extra.items()) meta[k] = v;
  }
  const std::string text = meta.dump();
  std::vector<Buffer> out;
  out.push_back(Buffer::CopyOf(text.data(), text.size()));
  out.push_back(Buffer::CopyOf(bytes.data(), bytes.size()));
  return out;
}

Result<DecodedServerState> DecodeServerState(const std::vector<Buffer>& state,
                                             const std::string& what) {
  if (state.size() != 2) {
    return Status::DataLoss("{}: a saved state has 2 parts, got {}", what,
                            state.size());
  }
  nlohmann::json meta = nlohmann::json::parse(state[0].ToString(), nullptr,
                                              /*allow_exceptions=*/false);
  if (!meta.is_object() ||
      !meta.value("version", nlohmann::json()).is_number_integer()) {
    return Status::DataLoss("{}: bad JSON header", what);
  }
  ASSIGN_OR_RETURN(SafetensorsFile file,
                   DecodeSafetensors(state[1].ToString(), what));
  const nlohmann::json range = meta.value("range", nlohmann::json());
  if (!range.is_array() || range.size() != 2 || !range[0].is_number_integer() ||
      !range[1].is_number_integer()) {
    return Status::DataLoss("{}: no key range in the JSON header", what);
  }
  DecodedServerState out;
  out.range = KeyRange{range[0].get<int64_t>(), range[1].get<int64_t>()};
  out.meta = meta.dump();
  ShardState& s = out.state;
  const SafeTensor* params = file.Find("params");
  if (params == nullptr) return Status::DataLoss("{}: no \"params\"", what);
  s.params = params->ToFloats();
  for (const SafeTensor& t : file.tensors) {
    if (t.name.rfind("optimizer/", 0) == 0)
      s.optimizer.buffers[t.name.substr(10)] = t.ToFloats();
  }
  s.optimizer.steps = meta.value("optimizer_steps", int64_t{0});
  s.version = meta["version"].get<int64_t>();
  const nlohmann::json st = meta.value("stats", nlohmann::json::object());
  s.stats.applied_gradients = st.value("applied_gradients", int64_t{0});
  s.stats.updates = st.value("updates", int64_t{0});
  s.stats.dropped = st.value("dropped", int64_t{0});
  s.stats.deferred = st.value("deferred", int64_t{0});
  s.stats.tail_updates = st.value("tail_updates", int64_t{0});
  s.stats.staleness = CountsFromJson(st.value("staleness", nlohmann::json()));
  s.stats.gradients_per_update =
      CountsFromJson(st.value("gradients_per_update", nlohmann::json()));
  if (static_cast<int64_t>(s.params.size()) != out.range.size()) {
    return Status::DataLoss("{}: {} parameters for keys [{}, {})", what,
                            s.params.size(), out.range.begin, out.range.end);
  }
  return out;
}

Status ParameterServer::RestoreState(const std::vector<Buffer>& state) {
  const std::string what = fmt::format("server {} state", rpc_->node_id());
  ASSIGN_OR_RETURN(DecodedServerState saved, DecodeServerState(state, what));
  const KeyRange r = Range();
  if (!(saved.range == r)) {
    return Status::DataLoss(
        "{}: saved for keys [{}, {}), this server owns "
        "[{}, {})",
        what, saved.range.begin, saved.range.end, r.begin, r.end);
  }
  return RestoreShardState(std::move(saved.state));
}

Status ParameterServer::RestoreShardState(ShardState s) {
  const std::string what = fmt::format("server {} state", rpc_->node_id());
  const KeyRange r = Range();
  MutexLock lock(&shard_mu_);
  auto shard = std::make_unique<ParameterShard>(
      r, std::vector<float>(static_cast<size_t>(r.size()), 0.0f),
      options_.optimizer, options_.schedule, options_.policy);
  Status restored = shard->RestoreState(s);
  if (!restored.ok())
    return Status::DataLoss("{}: {}", what, restored.message());
  shard_ = std::move(shard);
  restored_ = true;
  return Status::Ok();
}

void ParameterServer::Handle(Message msg) {
  const MessageType type = msg.header.type;
  if (type == MessageType::kCheckpointRequest) {
    auto state = SaveState();
    if (!state.ok()) {
      rpc_->ReplyErrorOrLog(msg, state.status());
      return;
    }
    Message reply;
    reply.header.type = MessageType::kAck;
    reply.header.clock = CurrentShard()->version();
    reply.payloads = std::move(*state);
    rpc_->ReplyOrLog(msg, std::move(reply));
    return;
  }
  if (type == MessageType::kPush) {
    HandlePush(std::move(msg));
  } else if (type == MessageType::kPullRequest) {
    HandlePull(std::move(msg));
  } else if (type == MessageType::kStatsRequest) {
    Message reply;
    reply.header.type = MessageType::kStatsReply;
    std::string text = StatsJson();
    reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
    rpc_->ReplyOrLog(msg, std::move(reply));
  } else if (other_) {
    other_(std::move(msg));
  } else {
    LogWarning("server {}: ignoring unexpected {} from node {}", node_id(),
               MessageTypeName(type), msg.header.sender);
  }
}

void ParameterServer::Configure(KeyRange range, LrSchedule schedule) {
  MutexLock lock(&shard_mu_);
  options_.range = range;
  options_.schedule = schedule;
}

namespace {

// Payload 0 of an applied push's ack (protocol.h): the step size, then the
// gradient's staleness.
Buffer AckInfo(int64_t step_size, int64_t staleness) {
  const int64_t info[2] = {step_size, staleness};
  return Buffer::CopyOf(info, sizeof(info));
}

}  // namespace

KeyRange ParameterServer::Range() const {
  MutexLock lock(&shard_mu_);
  return options_.range;
}

bool ParameterServer::follower() const {
  MutexLock lock(&shard_mu_);
  return options_.policy.follower;
}

ParameterShard* ParameterServer::CurrentShard() const {
  MutexLock lock(&shard_mu_);
  return shard_.get();
}

void ParameterServer::HandlePush(Message msg) {
  timeline::Span span("handle push", "server", msg.header.sender, node_id());
  if (msg.header.flags & (kPushDone | kPushRejoin)) {
    HandleLeaveOrRejoin(std::move(msg));
    return;
  }
  const KeyRange r = Range();
  PushTrailer trailer;
  if (!TakeTrailer(msg, &trailer)) return;
  if (!DecodeGradient(msg, r)) return;
  if (!(msg.header.flags & kPushInit) && SeenBefore(msg)) return;
  ParameterShard* shard = CurrentShard();
  if (restored_ && shard && !(msg.header.flags & kPushTagged)) {
    lost_updates_ =
        std::max(lost_updates_.load(), msg.header.clock - shard->version());
  }
  if (msg.header.flags & kPushInit) {
    HandleInitPush(std::move(msg), r);
  } else if (!shard) {
    rpc_->ReplyErrorOrLog(msg, Status::FailedPrecondition(
                                   "server {} has no parameters yet (worker 0 "
                                   "pushes the initial model first)",
                                   node_id()));
  } else if (msg.header.flags & kPushTagged) {
    HandleTaggedPush(std::move(msg), *shard, trailer);
  } else {
    HandleGradientPush(std::move(msg), *shard, trailer.pull_seq);
  }
}

void ParameterServer::HandleLeaveOrRejoin(Message msg) {
  // A worker leaving (or back from a checkpoint round); counted once.
  ParameterShard* shard = CurrentShard();
  bool closed = false;
  if (msg.header.flags & kPushDone) {
    if (shard && left_workers_.insert(msg.header.sender).second)
      closed = shard->WorkerLeft();
  } else if (shard && left_workers_.erase(msg.header.sender) > 0) {
    shard->WorkerRejoined();
  }
  Message ack;
  ack.header.type = MessageType::kAck;
  ack.header.clock = shard ? shard->version() : 0;
  rpc_->ReplyOrLog(msg, std::move(ack));
  if (closed) Flush(*shard);
}

bool ParameterServer::TakeTrailer(Message& msg, PushTrailer* trailer) {
  // After the gradients: a tagged push's step size, then a compressed
  // push-pull's mirror sequence number (protocol.h).
  const bool tagged = msg.header.flags & kPushTagged;
  const bool delta_pull =
      (msg.header.flags & kPushPull) && (msg.header.flags & kPullDelta);
  const size_t want_payloads = size_t{1} + tagged + delta_pull;
  if (tagged || delta_pull) {
    bool fits = msg.payloads.size() == want_payloads;
    for (size_t i = 1; fits && i < want_payloads; ++i)
      fits = msg.payloads[i].size() == sizeof(int64_t);
    if (!fits) {
      rpc_->ReplyErrorOrLog(
          msg,
          Status::InvalidArgument(
              "{}push{} from node {} needs {} payloads (gradients{}{}); "
              "it has {}",
              tagged ? "tagged " : "",
              delta_pull ? "-pull with compressed pull" : "", msg.header.sender,
              want_payloads, tagged ? ", int64 step size" : "",
              delta_pull ? ", int64 mirror sequence number" : "",
              msg.payloads.size()));
      return false;
    }
  }
  if (delta_pull) {
    std::memcpy(&trailer->pull_seq, msg.payloads.back().data(),
                sizeof(int64_t));
    msg.payloads.pop_back();
  }
  if (tagged) {
    std::memcpy(&trailer->tagged_size, msg.payloads.back().data(),
                sizeof(int64_t));
    msg.payloads.pop_back();
  }
  return true;
}

bool ParameterServer::DecodeGradient(Message& msg, const KeyRange& r) {
  // A compressed gradient (protocol.h) is decoded here; the rest of the
  // push is handled as float32.
  const uint32_t codec_flags = msg.header.flags & (kPushFp16 | kPushInt8);
  const Compression codec = CodecOfFlags(msg.header.flags);
  const size_t want_bytes = CompressedBytes(
      codec, static_cast<size_t>(std::max<int64_t>(
                 0, msg.header.key_end - msg.header.key_begin)));
  if (msg.header.key_begin != r.begin || msg.header.key_end != r.end ||
      msg.payloads.size() != 1 || msg.payloads[0].size() != want_bytes ||
      codec_flags == (kPushFp16 | kPushInt8) ||
      (codec != Compression::kNone && (msg.header.flags & kPushInit))) {
    Status st = Status::InvalidArgument(
        "server {} owns keys [{}, {}) ({} floats); push from node {} was for "
        "[{}, {}) with {} payload bytes ({} expected{})",
        node_id(), r.begin, r.end, r.size(), msg.header.sender,
        msg.header.key_begin, msg.header.key_end, msg.payload_bytes(),
        want_bytes,
        codec_flags == 0              ? ""
        : codec == Compression::kNone ? "; both compression flags set"
        : (msg.header.flags & kPushInit)
            ? "; an initial model is never compressed"
            : fmt::format(", {}", CompressionName(codec)));
    LogWarning("{}", st.message());
    rpc_->ReplyErrorOrLog(msg, st);
    return false;
  }
  if (codec != Compression::kNone) {
    // Into a scratch buffer reused from push to push: the push is applied
    // (or summed into the step) before HandlePush returns.
    decoded_.resize(static_cast<size_t>(r.size()));
    Decode(codec, msg.payloads[0].data(), decoded_.size(), decoded_.data());
    msg.payloads[0] = Buffer::Adopt(decoded_.data(),
                                    sizeof(float) * decoded_.size(), nullptr);
  }
  return true;
}

bool ParameterServer::SeenBefore(const Message& msg) {
  std::vector<uint64_t>& recent = recent_pushes_[msg.header.sender];
  if (std::find(recent.begin(), recent.end(), msg.header.request_id) !=
      recent.end()) {
    LogDebug("server {}: push {} from node {} arrived twice; dropped",
             node_id(), msg.header.request_id, msg.header.sender);
    return true;
  }
  recent.push_back(msg.header.request_id);
  if (recent.size() > 16) recent.erase(recent.begin());
  return false;
}

void ParameterServer::HandleInitPush(Message msg, const KeyRange& r) {
  const float* values = msg.payloads[0].floats();
  Message ack;
  ack.header.type = MessageType::kAck;
  ParameterShard* shard = nullptr;
  {
    MutexLock lock(&shard_mu_);
    if (restored_) {
      // Resumed from a checkpoint: the range is the checkpoint's.
    } else if (!shard_) {
      shard_ = std::make_unique<ParameterShard>(
          r, std::vector<float>(values, values + r.size()), options_.optimizer,
          options_.schedule, options_.policy);
    } else {
      Status st = shard_->Overwrite(values, r.size());
      if (!st.ok()) LogWarning("server: initial parameters: {}", st.message());
    }
    shard = shard_.get();
    ack.header.clock = shard->version();
  }
  rpc_->ReplyOrLog(msg, std::move(ack));
  Flush(*shard);
}

void ParameterServer::HandleTaggedPush(Message msg, ParameterShard& shard,
                                       const PushTrailer& trailer) {
  using State = ParameterShard::PushOutcome::State;
  const int64_t step = msg.header.clock;
  const std::vector<FloatPiece> pieces = FloatPieces(msg.payloads[0]);
  auto outcome =
      shard.PushTagged(pieces.data(), pieces.size(), step, trailer.tagged_size);
  msg.payloads.clear();
  if (msg.header.flags & kPushPull) {
    // A tagged push-pull (pushed range by range): its ack carries the
    // parameters once its step closed; keep the mirror's sequence number
    // and the step's size for it.
    const int64_t keep[2] = {trailer.pull_seq, trailer.tagged_size};
    msg.payloads.push_back(Buffer::CopyOf(keep, sizeof(keep)));
  }
  waiting_tagged_.emplace(step, std::move(msg));
  if (outcome.state == State::kApplied) Flush(shard);
}

void ParameterServer::HandleGradientPush(Message msg, ParameterShard& shard,
                                         int64_t pull_seq) {
  using State = ParameterShard::PushOutcome::State;
  const std::vector<FloatPiece> pieces = FloatPieces(msg.payloads[0]);
  auto outcome = shard.Push(pieces.data(), pieces.size(), msg.header.clock);
  if (outcome.state == State::kPending) {
    // The gradient is in the accumulator; keep the header (and a push-pull's
    // mirror sequence number, for the parameters its ack will carry).
    msg.payloads.clear();
    if (msg.header.flags & kPushPull)
      msg.payloads.push_back(Buffer::CopyOf(&pull_seq, sizeof(pull_seq)));
    waiting_acks_.push_back(std::move(msg));
    return;
  }
  Message ack;
  ack.header.type = MessageType::kAck;
  ack.header.clock = outcome.version;
  if (outcome.state == State::kDropped) ack.header.flags |= kAckDropped;
  if (outcome.state == State::kApplied) {
    ack.payloads.push_back(AckInfo(outcome.step_size, outcome.staleness));
    if (msg.header.flags & kPushPull) {
      int64_t version = -1;
      std::shared_ptr<const std::vector<float>> snapshot =
          shard.SnapshotIfAtLeast(0, &version);
      ack.header.clock = version;
      AppendParameters(msg, pull_seq, std::move(snapshot), ack);
    }
  }
  rpc_->ReplyOrLog(msg, std::move(ack));
  if (outcome.state == State::kApplied) Flush(shard);
}

void ParameterServer::ReplyPull(ParameterShard& shard, const Message& request) {
  const KeyRange r = Range();
  int64_t version = -1;
  // Every pull of one version shares a snapshot: the reply goes out without
  // another copy (readers of a pull reply never write it).
  std::shared_ptr<const std::vector<float>> snapshot =
      shard.SnapshotIfAtLeast(request.header.clock, &version);
  STRATA_CHECK(snapshot != nullptr);  // callers checked the version
  Message reply;
  reply.header.type = MessageType::kPullReply;
  reply.header.key_begin = r.begin;
  reply.header.key_end = r.end;
  reply.header.clock = version;
  int64_t seq = 0;
  if (request.payloads.size() == 1 &&
      request.payloads[0].size() == sizeof(int64_t)) {
    std::memcpy(&seq, request.payloads[0].data(), sizeof(int64_t));
  }
  AppendParameters(request, seq, std::move(snapshot), reply);
  rpc_->ReplyOrLog(request, std::move(reply));
}

void ParameterServer::AppendParameters(
    const Message& request, int64_t seq,
    std::shared_ptr<const std::vector<float>> snapshot, Message& reply) {
  const Compression codec = CodecOfFlags(request.header.flags);
  if (!(request.header.flags & kPullDelta) || codec == Compression::kNone) {
    reply.payloads.push_back(SnapshotBuffer(std::move(snapshot)));
    return;
  }
  const std::vector<float>& params = *snapshot;
  const size_t n = params.size();
  Mirror& mirror = mirrors_[request.header.sender];
  int64_t base = seq;
  if (seq == 0 || seq != mirror.seq || mirror.values.size() != n) {
    // No common ground: the parameters as they are.
    base = 0;
    mirror.values = params;
    reply.payloads.push_back(SnapshotBuffer(std::move(snapshot)));
  } else {
    delta_.resize(n);
    for (size_t i = 0; i < n; ++i) delta_[i] = params[i] - mirror.values[i];
    Buffer encoded = Buffer::Allocate(CompressedBytes(codec, n));
    Encode(codec, delta_.data(), n, encoded.data());
    Decode(codec, encoded.data(), n, delta_.data());
    for (size_t i = 0; i < n; ++i) mirror.values[i] += delta_[i];
    reply.header.flags |= kPullDelta;
    reply.payloads.push_back(std::move(encoded));
  }
  mirror.seq = ++next_mirror_seq_;
  const int64_t seqs[2] = {base, mirror.seq};
  reply.payloads.push_back(Buffer::CopyOf(seqs, sizeof(seqs)));
}

void ParameterServer::HandlePull(Message msg) {
  ParameterShard* shard = CurrentShard();
  if (shard && shard->version() >= msg.header.clock) {
    ReplyPull(*shard, msg);
  } else {
    waiting_pulls_.push_back(std::move(msg));
  }
}

void ParameterServer::Flush(ParameterShard& shard) {
  const int64_t version = shard.version();
  std::vector<Message> acks;
  acks.swap(waiting_acks_);
  const int64_t size = shard.last_step_size();
  for (Message& m : acks) {
    // A pending push was part of the step that just closed.
    Message ack;
    ack.header.type = MessageType::kAck;
    ack.header.clock = version;
    // Its staleness: the step it joined (version - 1) minus its base.
    ack.payloads.push_back(
        AckInfo(size, std::max<int64_t>(0, version - 1 - m.header.clock)));
    if (m.header.flags & kPushPull) {
      // A sync push-pull: the parameters of the step it closed.
      int64_t seq = 0;
      if (m.payloads.size() == 1 && m.payloads[0].size() == sizeof(seq))
        std::memcpy(&seq, m.payloads[0].data(), sizeof(seq));
      int64_t at = -1;
      std::shared_ptr<const std::vector<float>> snapshot =
          shard.SnapshotIfAtLeast(0, &at);
      ack.header.clock = at;
      AppendParameters(m, seq, std::move(snapshot), ack);
    }
    rpc_->ReplyOrLog(m, std::move(ack));
  }
  // Follower: tagged pushes whose step closed.
  while (!waiting_tagged_.empty() && waiting_tagged_.begin()->first < version) {
    Message& m = waiting_tagged_.begin()->second;
    Message ack;
    ack.header.type = MessageType::kAck;
    ack.header.clock = version;
    int64_t keep[2] = {0, 0};  // mirror sequence number, step size
    if ((m.header.flags & kPushPull) && m.payloads.size() == 1 &&
        m.payloads[0].size() == sizeof(keep)) {
      std::memcpy(keep, m.payloads[0].data(), sizeof(keep));
      // The step size, and the staleness as the leader reported it: here 0.
      ack.payloads.push_back(AckInfo(keep[1], 0));
      int64_t at = -1;
      std::shared_ptr<const std::vector<float>> snapshot =
          shard.SnapshotIfAtLeast(0, &at);
      ack.header.clock = at;
      AppendParameters(m, keep[0], std::move(snapshot), ack);
    }
    rpc_->ReplyOrLog(m, std::move(ack));
    waiting_tagged_.erase(waiting_tagged_.begin());
  }
  std::vector<Message> still_waiting;
  for (Message& m : waiting_pulls_) {
    if (version >= m.header.clock) {
      ReplyPull(shard, m);
    } else {
      still_waiting.push_back(std::move(m));
    }
  }
  waiting_pulls_.swap(still_waiting);
}

}  // namespace strata
