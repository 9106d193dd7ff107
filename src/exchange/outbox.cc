#include "exchange/outbox.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "cluster/mailbox.h"
#include "common/log.h"
#include "run/options.h"

namespace strata {

using nlohmann::json;

PeerOutbox::PeerOutbox(const ExchangeEnv& env, MessageType type, bool keep)
    : env_(env), type_(type), keep_(keep) {}

Status PeerOutbox::SendModel(int peer, int64_t seq, int64_t it,
                             const float* params, int64_t size,
                             const float* weight) {
  Message m;
  m.header.type = type_;
  m.header.clock = it;
  m.header.key_begin = seq;
  m.header.key_end = seq;
  m.payloads.push_back(Buffer::CopyOf(params, sizeof(float) * size));
  if (weight != nullptr) m.payloads.push_back(Buffer::CopyOf(weight, 4));
  env_.metrics->bytes_pushed += sizeof(float) * static_cast<uint64_t>(size);
  return env_.rpc->Send(env_.options->roles.WorkerId(peer), std::move(m));
}

Status PeerOutbox::SendKept(const Kept& k) {
  return SendModel(k.peer, k.seq, k.it, k.params.data(),
                   static_cast<int64_t>(k.params.size()),
                   k.has_weight ? &k.weight : nullptr);
}

Status PeerOutbox::Send(int peer, int64_t it, const float* params, int64_t size,
                        const float* weight) {
  // Without checkpoints: sent as before, nothing kept or copied again.
  if (!keep_) return SendModel(peer, 0, it, params, size, weight);
  Kept k;
  k.peer = peer;
  k.seq = ++next_seq_[peer];
  k.it = it;
  RETURN_IF_ERROR(SendModel(peer, k.seq, it, params, size, weight));
  k.params.assign(params, params + size);
  k.has_weight = weight != nullptr;
  if (k.has_weight) k.weight = *weight;
  kept_.push_back(std::move(k));
  // A peer that finished or was lost acknowledges nothing more: keep its
  // newest copies only (a live peer acknowledges within a few steps).
  int64_t to_peer = 0;
  for (const Kept& c : kept_) to_peer += c.peer == peer;
  if (to_peer > kMaxKeptPerPeer) {
    auto oldest =
        std::find_if(kept_.begin(), kept_.end(),
                     [peer](const Kept& c) { return c.peer == peer; });
    kept_.erase(oldest);
    if (!warned_.count(peer)) {
      warned_.insert(peer);
      LogWarning(
          "worker {}: worker {} has not acknowledged its last {} models "
          "(finished or lost?); only the newest are kept for a checkpoint",
          env_.index, peer, kMaxKeptPerPeer);
    }
  }
  return Status::Ok();
}

void PeerOutbox::TakeAcks() {
  const RoleTable& roles = env_.options->roles;
  for (const Message& ack : env_.mailbox->TakeAll(MessageType::kPeerAck)) {
    Role role;
    int w;
    if (!roles.RoleOf(ack.header.sender, &role, &w).ok() ||
        role != Role::kWorker)
      continue;
    const int64_t seq = ack.header.key_begin;
    kept_.erase(std::remove_if(kept_.begin(), kept_.end(),
                               [w, seq](const Kept& k) {
                                 return k.peer == w && k.seq <= seq;
                               }),
                kept_.end());
  }
}

std::vector<Message> PeerOutbox::Receive() {
  std::vector<Message> in = env_.mailbox->TakeAll(type_);
  if (!keep_) return in;
  TakeAcks();
  const RoleTable& roles = env_.options->roles;
  std::vector<Message> fresh;
  for (Message& m : in) {
    Role role;
    int w;
    if (!roles.RoleOf(m.header.sender, &role, &w).ok() ||
        role != Role::kWorker) {
      fresh.push_back(std::move(m));  // the strategy refuses it, naming it
      continue;
    }
    const int64_t seq = m.header.key_begin;
    int64_t& last = merged_[w];
    if (seq <= last) continue;  // sent again after a resume: merged before
    last = seq;
    Message ack;
    ack.header.type = MessageType::kPeerAck;
    ack.header.key_begin = seq;
    ack.header.key_end = seq;
    // A peer that finished or was lost no longer needs it.
    static_cast<void>(env_.rpc->Send(m.header.sender, std::move(ack)));
    fresh.push_back(std::move(m));
  }
  return fresh;
}

void PeerOutbox::Save(ExchangeState& state) const {
  if (!keep_) return;
  json kept = json::array();
  for (size_t i = 0; i < kept_.size(); ++i) {
    const Kept& k = kept_[i];
    json e{{"peer", k.peer}, {"seq", k.seq}, {"it", k.it}};
    if (k.has_weight) e["weight"] = k.weight;
    kept.push_back(std::move(e));
    state.buffers["outbox/" + std::to_string(i)] = k.params;
  }
  json next = json::object(), merged = json::object();
  for (const auto& [w, s] : next_seq_) next[std::to_string(w)] = s;
  for (const auto& [w, s] : merged_) merged[std::to_string(w)] = s;
  state.text["outbox"] =
      json{{"kept", kept}, {"next_seq", next}, {"merged", merged}}.dump();
}

Status PeerOutbox::Restore(const ExchangeState& state) {
  auto text = state.text.find("outbox");
  if (!keep_ || text == state.text.end()) return Status::Ok();
  const json j = json::parse(text->second, nullptr, /*allow_exceptions=*/false);
  const auto bad = [](const std::string& what) {
    return Status::DataLoss("the models on their way to peers: {}", what);
  };
  if (!j.is_object()) return bad("bad JSON");
  try {
    std::deque<Kept> kept;
    const json& list = j.at("kept");
    for (size_t i = 0; i < list.size(); ++i) {
      auto params = state.buffers.find("outbox/" + std::to_string(i));
      if (params == state.buffers.end())
        return bad(fmt::format("model {} of {} is missing", i, list.size()));
      Kept k;
      k.peer = list[i].at("peer").get<int>();
      k.seq = list[i].at("seq").get<int64_t>();
      k.it = list[i].at("it").get<int64_t>();
      k.params = params->second;
      k.has_weight = list[i].contains("weight");
      if (k.has_weight) k.weight = list[i]["weight"].get<float>();
      kept.push_back(std::move(k));
    }
    std::map<int, int64_t> next, merged;
    for (auto it = j.at("next_seq").begin(); it != j.at("next_seq").end(); ++it)
      next[std::stoi(it.key())] = it.value().get<int64_t>();
    for (auto it = j.at("merged").begin(); it != j.at("merged").end(); ++it)
      merged[std::stoi(it.key())] = it.value().get<int64_t>();
    kept_ = std::move(kept);
    next_seq_ = std::move(next);
    merged_ = std::move(merged);
  } catch (const std::exception& e) {
    return bad(e.what());
  }
  return Status::Ok();
}

Status PeerOutbox::Resend() {
  for (const Kept& k : kept_) {
    Status sent = SendKept(k);
    if (!sent.ok()) {
      // The strategies go on without a lost peer; so does this.
      LogWarning("worker {}: a model kept for worker {} not sent again: {}",
                 env_.index, k.peer, sent.message());
    }
  }
  if (!kept_.empty())
    LogInfo("worker {}: sent again the {} models its peers had not merged",
            env_.index, kept_.size());
  return Status::Ok();
}

}  // namespace strata
