#include "data/batch_cursor.h"

#include <cmath>
#include <utility>

namespace strata {

Result<Assignment> ParseAssignment(const std::string& name) {
  if (name == "static") return Assignment::kStatic;
  if (name == "dynamic") return Assignment::kDynamic;
  return Status::InvalidArgument(
      "unknown data.assignment '{}' (static or dynamic)", name);
}

const char* AssignmentName(Assignment a) {
  return a == Assignment::kStatic ? "static" : "dynamic";
}

uint64_t BatchCursor::SamplerSeed(uint64_t seed, int worker) {
  // Static: the seed RunWorker gives worker w's own sampler.
  if (worker >= 0) return seed * 1000003 + static_cast<uint64_t>(worker);
  return seed * 1000003 + 0x9e3779b9ULL;
}

uint64_t BatchCursor::PartSeed(uint64_t seed, int worker, int64_t epoch) {
  return SamplerSeed(seed, worker) ^
         (0xA5A5A5A5ULL * static_cast<uint64_t>(epoch + 1));
}

Result<std::unique_ptr<BatchCursor>> BatchCursor::Make(
    const BatchCursorOptions& options, std::vector<std::vector<int64_t>> shards,
    const std::vector<int64_t>& labels,
    const std::vector<int32_t>& cluster_ids) {
  if (options.batch_size < 1 || options.num_workers < 1) {
    return Status::InvalidArgument(
        "batch cursor: batch size {} and worker count {} must be >= 1",
        options.batch_size, options.num_workers);
  }
  const size_t slots = options.assignment == Assignment::kStatic
                           ? static_cast<size_t>(options.num_workers)
                           : 1;
  if (shards.size() != slots) {
    return Status::InvalidArgument(
        "batch cursor: {} shards for {} assignment over {} workers",
        shards.size(), AssignmentName(options.assignment), options.num_workers);
  }
  std::unique_ptr<BatchCursor> c(new BatchCursor(options));
  for (size_t s = 0; s < slots; ++s) {
    if (shards[s].empty()) {
      return Status::InvalidArgument("batch cursor: {} has no examples",
                                     options.assignment == Assignment::kDynamic
                                         ? std::string("the dataset")
                                         : fmt::format("worker {}", s));
    }
    int worker = -1;  // dynamic: one sampler of its own seed
    if (options.assignment == Assignment::kStatic) {
      worker = options.seed_workers.size() == slots ? options.seed_workers[s]
                                                    : static_cast<int>(s);
    }
    ASSIGN_OR_RETURN(
        auto sampler,
        MakeBatchSampler(options.sampler, shards[s], labels, cluster_ids,
                         SamplerSeed(options.seed, worker), options.shuffle,
                         options.max_boost));
    c->samplers_.push_back(std::move(sampler));
    c->seed_worker_.push_back(worker);
  }
  c->shard_of_ = std::move(shards);
  c->labels_ = labels;
  c->cluster_ids_ = cluster_ids;
  c->extra_.resize(slots);
  c->clustered_ = !cluster_ids.empty() && UsesClusters(options.sampler);
  c->drawn_.assign(slots, 0);
  c->queues_.resize(slots);
  return c;
}

bool BatchCursor::wants_losses() const {
  return !samplers_.empty() && samplers_[0]->wants_losses();
}

bool BatchCursor::Exhausted(size_t slot) const {
  const int64_t budget = extra_[slot].budget;
  if (budget >= 0) return drawn_[slot] >= budget;
  if (!extra_[slot].parts.empty()) return false;
  if (options_.batches > 0) return drawn_[slot] >= options_.batches;
  return MainEpoch(slot) >= options_.epochs;
}

Result<std::unique_ptr<BatchSampler>> BatchCursor::MakeSampler(
    size_t /*slot*/, std::vector<int64_t> ids, uint64_t seed) const {
  return MakeBatchSampler(options_.sampler, std::move(ids), labels_,
                          cluster_ids_, seed, options_.shuffle,
                          options_.max_boost);
}

Status BatchCursor::StartPart(size_t slot) {
  Extra& x = extra_[slot];
  const Part& part = x.parts.front();
  ASSIGN_OR_RETURN(
      x.part_sampler,
      MakeSampler(slot, part.ids,
                  PartSeed(options_.seed, seed_worker_[slot], part.epoch)));
  return Status::Ok();
}

bool BatchCursor::NextFromParts(size_t slot, Lease* lease) {
  Extra& x = extra_[slot];
  while (!x.parts.empty() && x.parts.front().ids.empty()) x.parts.pop_front();
  if (x.parts.empty()) return false;
  if (x.part_sampler == nullptr) {
    // The part's sampler was checked when the part was given (Continue).
    STRATA_CHECK(StartPart(slot).ok());
  }
  x.part_sampler->Next(options_.batch_size, &lease->ids);
  lease->epoch = x.parts.front().epoch;
  if (x.part_sampler->epoch_finished()) {
    x.parts.pop_front();
    x.part_sampler.reset();
  }
  return true;
}

Status BatchCursor::Continue(int worker, std::vector<Part> parts,
                             int64_t epoch_offset, int64_t budget) {
  if (options_.assignment != Assignment::kStatic || worker < 0 ||
      worker >= options_.num_workers) {
    return Status::InvalidArgument(
        "batch cursor: a resize continues a worker of a static cursor "
        "(worker {}, {} assignment over {} workers)",
        worker, AssignmentName(options_.assignment), options_.num_workers);
  }
  const size_t slot = Slot(worker);
  for (const Part& p : parts) {
    // Checked here, so serving it later cannot fail.
    if (!p.ids.empty()) RETURN_IF_ERROR(MakeSampler(slot, p.ids, 0).status());
  }
  Extra& x = extra_[slot];
  x.parts.assign(std::make_move_iterator(parts.begin()),
                 std::make_move_iterator(parts.end()));
  x.part_sampler.reset();
  x.offset = epoch_offset;
  x.budget = budget;
  drawn_[slot] = 0;
  return Status::Ok();
}

Status BatchCursor::ContinueRegrouped(std::vector<Part> parts,
                                      int64_t epoch_offset) {
  if (options_.assignment != Assignment::kDynamic)
    return Status::InvalidArgument(
        "batch cursor: a regroup of data servers continues a dynamic cursor "
        "(this one is static: Continue)");
  for (const Part& p : parts) {
    // Checked here, so serving it later cannot fail.
    if (!p.ids.empty()) RETURN_IF_ERROR(MakeSampler(0, p.ids, 0).status());
  }
  Extra& x = extra_[0];
  x.parts.assign(std::make_move_iterator(parts.begin()),
                 std::make_move_iterator(parts.end()));
  x.part_sampler.reset();
  x.offset = epoch_offset;
  x.budget = -1;
  drawn_[0] = 0;
  return Status::Ok();
}

BatchCursor::Position BatchCursor::Where() const {
  Position p;
  for (size_t s = 0; s < samplers_.size(); ++s) {
    // A worker that finished counts too: one that had trained every epoch
    // of the run (free modes) keeps the others' rest from a later epoch
    // being served to it again.
    // A copy of the sampler, drawn to its epoch's end, says whether the
    // epoch was started.
    auto copy = MakeSampler(s, shard_of_[s],
                            SamplerSeed(options_.seed, seed_worker_[s]));
    STRATA_CHECK(copy.ok());  // built the same way once already
    STRATA_CHECK((*copy)->RestoreState(samplers_[s]->SaveState()).ok());
    std::vector<int64_t> batch;
    int64_t left = 0;
    do {
      (*copy)->Next(1, &batch);
      left += static_cast<int64_t>(batch.size());
    } while (!(*copy)->epoch_finished() && !batch.empty());
    const int64_t epoch = MainEpoch(s);
    const bool started = left < (*copy)->size();
    if (epoch > p.epoch)
      p = Position{epoch, started};
    else if (epoch == p.epoch)
      p.started = p.started || started;
  }
  return p;
}

void BatchCursor::DrainBefore(int64_t until,
                              std::map<int64_t, std::vector<int64_t>>* left) {
  auto add = [left](int64_t epoch, const std::vector<int64_t>& ids) {
    auto& to = (*left)[epoch];
    to.insert(to.end(), ids.begin(), ids.end());
  };
  for (const auto& [seq, held] : leases_) add(held.epoch, held.ids);
  leases_.clear();
  for (size_t s = 0; s < samplers_.size(); ++s) {
    for (const Returned& r : queues_[s]) add(r.epoch, r.ids);
    queues_[s].clear();
    Lease lease;
    while (NextFromParts(s, &lease)) add(lease.epoch, lease.ids);
    if (Exhausted(s)) continue;
    std::vector<int64_t> batch;
    while (MainEpoch(s) < until) {
      const int64_t epoch = samplers_[s]->Next(1, &batch) + extra_[s].offset;
      add(epoch, batch);
      if (batch.empty()) break;  // an empty shard
    }
  }
}

BatchCursor::Lease BatchCursor::Next(int worker) {
  STRATA_CHECK(worker >= 0 && worker < options_.num_workers);
  const size_t slot = Slot(worker);
  Lease lease;
  if (!queues_[slot].empty()) {
    Returned r = std::move(queues_[slot].front());
    queues_[slot].pop_front();
    lease.epoch = r.epoch;
    lease.ids = std::move(r.ids);
  } else if (!Exhausted(slot)) {
    if (!NextFromParts(slot, &lease)) {
      lease.epoch = samplers_[slot]->Next(options_.batch_size, &lease.ids) +
                    extra_[slot].offset;
    }
    ++drawn_[slot];
  } else {
    // Nothing new. Dynamic: another worker's lease may still come back.
    bool out = false;
    if (options_.assignment == Assignment::kDynamic) out = !leases_.empty();
    lease.kind = out ? Lease::Kind::kWait : Lease::Kind::kEnd;
    return lease;
  }
  lease.kind = Lease::Kind::kBatch;
  lease.seq = next_seq_++;
  leases_[lease.seq] = Held{worker, lease.epoch, lease.ids};
  return lease;
}

Result<BatchCursor::Acked> BatchCursor::Ack(int worker, int64_t seq,
                                            const float* losses,
                                            size_t num_losses) {
  auto it = leases_.find(seq);
  if (it == leases_.end()) {
    return Status::InvalidArgument(
        "worker {} acknowledged batch {}, which is not out on lease", worker,
        seq);
  }
  if (it->second.worker != worker) {
    return Status::InvalidArgument(
        "worker {} acknowledged batch {}, leased to worker {}", worker, seq,
        it->second.worker);
  }
  if (losses != nullptr && num_losses != it->second.ids.size()) {
    return Status::InvalidArgument(
        "worker {} sent {} losses for batch {} of {} examples", worker,
        num_losses, seq, it->second.ids.size());
  }
  Acked a{worker, it->second.epoch, seq, std::move(it->second.ids)};
  leases_.erase(it);
  if (losses != nullptr) samplers_[Slot(worker)]->Observe(a.ids, losses);
  return a;
}

int BatchCursor::ReturnLeases(int worker) {
  int n = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.worker != worker) {
      ++it;
      continue;
    }
    queues_[Slot(worker)].push_back(
        Returned{it->second.epoch, std::move(it->second.ids)});
    it = leases_.erase(it);
    ++n;
  }
  returned_total_ += n;
  return n;
}

Status BatchCursor::GiveBack(int worker, int64_t seq) {
  auto it = leases_.find(seq);
  if (it == leases_.end() || it->second.worker != worker) {
    return Status::InvalidArgument(
        "worker {} gave back batch {}, which is not out on lease to it", worker,
        seq);
  }
  queues_[Slot(worker)].push_front(
      Returned{it->second.epoch, std::move(it->second.ids)});
  leases_.erase(it);
  return Status::Ok();
}

nlohmann::json BatchCursor::SaveState() const {
  nlohmann::json slots = nlohmann::json::array();
  for (size_t s = 0; s < samplers_.size(); ++s) {
    // Leases not acknowledged yet are served again after a restore: they
    // join the front of the returned queue, in lease order.
    nlohmann::json queue = nlohmann::json::array();
    for (const auto& [seq, held] : leases_) {
      if (Slot(held.worker) == s)
        queue.push_back({{"epoch", held.epoch}, {"ids", held.ids}});
    }
    for (const Returned& r : queues_[s])
      queue.push_back({{"epoch", r.epoch}, {"ids", r.ids}});
    nlohmann::json slot{{"sampler", samplers_[s]->SaveState()},
                        {"drawn", drawn_[s]},
                        {"queue", queue}};
    if (nlohmann::json extra = SaveExtra(s); !extra.empty())
      slot["resized"] = std::move(extra);
    slots.push_back(std::move(slot));
  }
  return {{"assignment", AssignmentName(options_.assignment)},
          {"sampler", SamplerKindName(options_.sampler)},
          {"workers", options_.num_workers},
          {"batch_size", options_.batch_size},
          {"next_seq", next_seq_},
          {"returned", returned_total_},
          {"slots", slots}};
}

Status BatchCursor::RestoreState(const nlohmann::json& state, bool resized) {
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("batch cursor state: {}", what);
  };
  try {
    const bool any_count =
        resized && options_.assignment == Assignment::kDynamic;
    if (state.at("assignment").get<std::string>() !=
            AssignmentName(options_.assignment) ||
        state.at("sampler").get<std::string>() !=
            SamplerKindName(options_.sampler) ||
        (!any_count &&
         (state.at("workers").get<int>() != options_.num_workers ||
          state.at("batch_size").get<int64_t>() != options_.batch_size))) {
      return bad(fmt::format(
          "saved for {} assignment, sampler {}, {} workers, batch {}; this "
          "run has {} assignment, sampler {}, {} workers, batch {}",
          state.at("assignment").get<std::string>(),
          state.at("sampler").get<std::string>(),
          state.at("workers").get<int>(), state.at("batch_size").get<int64_t>(),
          AssignmentName(options_.assignment),
          SamplerKindName(options_.sampler), options_.num_workers,
          options_.batch_size));
    }
    const nlohmann::json& slots = state.at("slots");
    if (!slots.is_array() || slots.size() != samplers_.size())
      return bad("wrong number of samplers");
    std::vector<std::deque<Returned>> queues(samplers_.size());
    std::vector<int64_t> drawn(samplers_.size());
    for (size_t s = 0; s < samplers_.size(); ++s) {
      RETURN_IF_ERROR(samplers_[s]->RestoreState(slots[s].at("sampler")));
      drawn[s] = slots[s].at("drawn").get<int64_t>();
      RETURN_IF_ERROR(
          RestoreExtra(s, slots[s].value("resized", nlohmann::json::object())));
      for (const auto& q : slots[s].at("queue")) {
        queues[s].push_back(Returned{q.at("epoch").get<int64_t>(),
                                     q.at("ids").get<std::vector<int64_t>>()});
      }
    }
    next_seq_ = state.at("next_seq").get<int64_t>();
    returned_total_ = state.at("returned").get<int64_t>();
    queues_ = std::move(queues);
    drawn_ = std::move(drawn);
    leases_.clear();
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  return Status::Ok();
}

nlohmann::json BatchCursor::SaveExtra(size_t slot) const {
  const Extra& x = extra_[slot];
  if (x.parts.empty() && x.offset == 0 && x.budget < 0) return {};
  nlohmann::json parts = nlohmann::json::array();
  for (const Part& p : x.parts)
    parts.push_back({{"epoch", p.epoch}, {"ids", p.ids}});
  nlohmann::json j{
      {"parts", parts}, {"offset", x.offset}, {"budget", x.budget}};
  if (x.part_sampler) j["part_sampler"] = x.part_sampler->SaveState();
  return j;
}

Status BatchCursor::RestoreExtra(size_t slot, const nlohmann::json& j) {
  Extra& x = extra_[slot];
  x = Extra{};
  x.offset = j.value("offset", int64_t{0});
  x.budget = j.value("budget", int64_t{-1});
  for (const auto& p : j.value("parts", nlohmann::json::array()))
    x.parts.push_back(Part{p.at("epoch").get<int64_t>(),
                           p.at("ids").get<std::vector<int64_t>>()});
  if (j.contains("part_sampler")) {
    if (x.parts.empty())
      return Status::InvalidArgument(
          "batch cursor state: a part's sampler without its part");
    RETURN_IF_ERROR(StartPart(slot));
    RETURN_IF_ERROR(x.part_sampler->RestoreState(j["part_sampler"]));
  }
  return Status::Ok();
}

nlohmann::json BatchCursor::StratumLosses() const {
  if (samplers_.empty()) return nlohmann::json::object();
  const auto* s = dynamic_cast<const StratifiedSampler*>(samplers_[0].get());
  if (s == nullptr || !s->wants_losses()) return nlohmann::json::object();
  nlohmann::json loss = nlohmann::json::array();
  for (double l : s->stratum_losses()) {
    if (std::isnan(l))
      loss.push_back(nullptr);
    else
      loss.push_back(l);
  }
  // A stratum is a class, or (class, sub-cluster) packed as
  // class * 2^31 + cluster (MakeBatchSampler).
  std::vector<int64_t> cls, sub;
  for (int64_t key : s->strata()) {
    cls.push_back(clustered_ ? key >> 31 : key);
    sub.push_back(clustered_ ? key & ((int64_t{1} << 31) - 1) : 0);
  }
  return {{"class", cls}, {"cluster", sub}, {"loss", loss}};
}

}  // namespace strata
