#include "coordinator/cluster_checkpoints.h"

#include <algorithm>
#include <chrono>

#include "common/fs.h"
#include "common/log.h"
#include "coordinator/resize_restore.h"
#include "ps/protocol.h"

namespace strata {

using Clock = std::chrono::steady_clock;

Status ClusterCheckpoints::Load(bool announce,
                                std::shared_ptr<const Checkpoint> loaded) {
  if (loaded == nullptr) {
    // A scale in this process: the checkpoint its round wrote, still in
    // memory, unless a newer one is on disk.
    loaded = run_dir_.TakeKeptCheckpoint();
    if (loaded != nullptr &&
        loaded->step != NewestCheckpointStep(run_dir_.path()))
      loaded.reset();
  }
  if (loaded == nullptr) {
    ASSIGN_OR_RETURN(Checkpoint c, LoadNewestIntactCheckpoint(run_dir_.path()));
    loaded = std::make_shared<const Checkpoint>(std::move(c));
  }
  const Checkpoint& c = *loaded;
  ASSIGN_OR_RETURN(const std::string* saved, c.File("config.toml"));
  RETURN_IF_ERROR(
      CheckResumeConfig(*saved, config_, /*workers_may_change=*/true));
  auto coord = c.File("coordinator.json");
  if (!coord.ok()) {
    return Status::FailedPrecondition(
        "{} is not a cluster checkpoint (it has no coordinator.json)", c.dir);
  }
  meta_ = nlohmann::json::parse(**coord, nullptr, /*allow_exceptions=*/false);
  if (!meta_.is_object()) {
    return Status::DataLoss("{}/coordinator.json: bad JSON", c.dir);
  }
  ASSIGN_OR_RETURN(const int from, CheckpointWorkers(c));
  const int to = o_.roles.num_workers();
  RETURN_IF_ERROR(CheckResize(o_.mode, from, to, o_.data_servers,
                              config_.GetString("data.shard_plan")));
  const int old_data_servers = CheckpointDataServers(c);
  RETURN_IF_ERROR(
      CheckDataServersChange(o_, old_data_servers, o_.data_servers));
  resize_ = ClusterSummary::Resize{};
  // Another number of data servers re-plans what they serve too.
  const bool resized = Resized(c);
  if (resized) {
    ASSIGN_OR_RETURN(
        kept_, ResumeWorkers(config_.GetString("checkpoint.resume_workers"),
                             from, to));
    resize_.from_workers = from;
    resize_.to_workers = to;
    resize_.at_step = c.step;
    ASSIGN_OR_RETURN(resize_.retired_samples, RetiredSamples(c, kept_));
  }
  resume_ = std::move(loaded);
  if (announce && resized) {
    LogInfo(
        "resuming from {} (step {}) on {}: the rest of the epoch is "
        "re-planned over them",
        resume_->dir, resume_->step,
        fmt::format("{} workers{}", to,
                    from == to ? "" : fmt::format(" instead of {}", from)) +
            (old_data_servers == o_.data_servers
                 ? std::string()
                 : fmt::format(" and {} data servers instead of {}",
                               o_.data_servers, old_data_servers)));
  } else if (announce) {
    LogInfo("resuming from {} (step {})", resume_->dir, resume_->step);
  }
  return Status::Ok();
}

bool ClusterCheckpoints::Resized(const Checkpoint& c) const {
  Result<int> from = CheckpointWorkers(c);
  return from.ok() && (*from != o_.roles.num_workers() ||
                       CheckpointDataServers(c) != o_.data_servers);
}

Result<int64_t> ClusterCheckpoints::RetiredSamples(
    const Checkpoint& c, const std::vector<int>& kept) {
  ASSIGN_OR_RETURN(const int from, CheckpointWorkers(c));
  int64_t samples = 0;
  for (int w = 0; w < from; ++w) {
    if (std::find(kept.begin(), kept.end(), w) != kept.end()) continue;
    ASSIGN_OR_RETURN(const std::string* text,
                     c.File(fmt::format("worker-{}.json", w)));
    const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_object())
      return Status::DataLoss("{}/worker-{}.json: bad JSON", c.dir, w);
    samples += j.value("counters", nlohmann::json::object())
                   .value("samples", int64_t{0});
  }
  return samples;
}

Message ClusterCheckpoints::Restore(NodeId id) const {
  Message m;
  Role role;
  int index;
  if (!o_.roles.RoleOf(id, &role, &index).ok()) return m;
  std::string name;
  if (role == Role::kWorker) name = fmt::format("worker-{}", index);
  if (role == Role::kServer) name = fmt::format("server-{}", index);
  if (role == Role::kData) name = fmt::format("data-{}", index);
  if (name.empty()) return m;
  // A server replacing a lost one (cluster.restart) after this run wrote
  // checkpoints takes the newest; at the start, the one resumed from.
  std::unique_ptr<Checkpoint> newest;
  const Checkpoint* c = resume_.get();
  if (written_.load() > 0) {
    auto loaded = LoadNewestIntactCheckpoint(run_dir_.path());
    if (!loaded.ok()) {
      LogError("restart: {}", loaded.status().message());
      return m;
    }
    newest = std::make_unique<Checkpoint>(std::move(loaded).value());
    c = newest.get();
  }
  if (c == nullptr) return m;
  if (role == Role::kWorker || role == Role::kData) {
    Result<int> from = CheckpointWorkers(*c);
    if (from.ok() && Resized(*c)) {
      const int to = o_.roles.num_workers();
      Result<Message> resized =
          role == Role::kWorker
              ? ResizedWorkerState(*c, o_.mode, *from, to, index, kept_)
              : ResizedDataState(*c, *from, to, index,
                                 CheckpointDataServers(*c), kept_);
      if (resized.ok()) return std::move(resized).value();
      LogError("resume: {}: {}", o_.roles.Describe(id),
               resized.status().message());
      return m;
    }
  }
  auto json = c->File(name + ".json");
  // Data servers keep no tensors.
  auto tensors = role == Role::kData ? json : c->File(name + ".safetensors");
  if (!json.ok() || !tensors.ok()) {
    LogError("resume: {} has no state for {}", c->dir, o_.roles.Describe(id));
    return m;
  }
  if (written_.load() > 0)
    LogWarning("{} starts again from {}", o_.roles.Describe(id), c->dir);
  m.header.clock = c->step;
  m.payloads.push_back(Buffer::CopyOf((*json)->data(), (*json)->size()));
  if (role != Role::kData) {
    m.payloads.push_back(
        Buffer::CopyOf((*tensors)->data(), (*tensors)->size()));
  }
  return m;
}

Result<int64_t> ClusterCheckpoints::AddWorkerStates(
    std::map<NodeId, Message>& arrivals, Files& files, nlohmann::json& steps) {
  for (auto& [id, m] : arrivals) {
    Role role;
    int index;
    RETURN_IF_ERROR(o_.roles.RoleOf(id, &role, &index));
    if (m.payloads.size() != 2) {
      return Status::DataLoss("{}: a checkpoint state has 2 parts, got {}",
                              o_.roles.Describe(id), m.payloads.size());
    }
    workers_[index] = {m.payloads[0].ToString(), m.payloads[1].ToString()};
    worker_steps_[index] = m.header.clock;
  }
  int64_t step = 0;
  for (int w = 0; w < o_.roles.num_workers(); ++w) {
    auto it = workers_.find(w);
    if (it == workers_.end()) {
      return Status::FailedPrecondition(
          "worker {} finished before it sent a checkpoint state", w);
    }
    files[fmt::format("worker-{}.json", w)] = it->second.first;
    files[fmt::format("worker-{}.safetensors", w)] = it->second.second;
    step = std::max(step, worker_steps_[w]);
    steps[std::to_string(w)] = worker_steps_[w];
  }
  return step;
}

Result<Message> ClusterCheckpoints::RequestState(Coordinator& coordinator,
                                                 NodeId id,
                                                 const std::string& who) {
  Message m;
  m.header.type = MessageType::kCheckpointRequest;
  auto reply = coordinator.Request(id, std::move(m))->Wait(o_.request_timeout);
  if (!reply.ok())
    return reply.status().WithContext(fmt::format("{} state", who));
  return reply;
}

Status ClusterCheckpoints::AddServerStates(Coordinator& coordinator,
                                           Files& files,
                                           nlohmann::json& versions) {
  const std::vector<NodeId> ids = o_.roles.Ids(Role::kServer);
  for (size_t j = 0; j < ids.size(); ++j) {
    const std::string who = fmt::format("server {}", j);
    ASSIGN_OR_RETURN(Message reply, RequestState(coordinator, ids[j], who));
    if (reply.payloads.size() != 2) {
      return Status::DataLoss("{}: a checkpoint state has 2 parts, got {}", who,
                              reply.payloads.size());
    }
    files[fmt::format("server-{}.json", j)] = reply.payloads[0].ToString();
    files[fmt::format("server-{}.safetensors", j)] =
        reply.payloads[1].ToString();
    versions.push_back(reply.header.clock);
  }
  return Status::Ok();
}

Status ClusterCheckpoints::AddDataStates(Coordinator& coordinator,
                                         Files& files) {
  const std::vector<NodeId> ids = o_.roles.Ids(Role::kData);
  for (size_t j = 0; j < ids.size(); ++j) {
    const std::string who = fmt::format("data server {}", j);
    ASSIGN_OR_RETURN(Message reply, RequestState(coordinator, ids[j], who));
    if (reply.payloads.empty())
      return Status::DataLoss("{}: an empty state", who);
    files[fmt::format("data-{}.json", j)] = reply.payloads[0].ToString();
  }
  return Status::Ok();
}

Status ClusterCheckpoints::Write(Coordinator& coordinator,
                                 std::map<NodeId, Message>& arrivals,
                                 double train_s) {
  const auto t0 = Clock::now();
  for (NodeId lost : coordinator.LostIds()) {
    Role role;
    int index;
    if (!o_.roles.RoleOf(lost, &role, &index).ok() || role != Role::kWorker)
      continue;
    // cluster.leave_on_loss in the free modes: the lost worker's last state
    // goes in as it was, for the resume that drains it (the rest of its
    // epoch is re-planned from that cursor; its steps since are trained
    // again by the others).
    if (o_.leave_on_loss && !Lockstep(o_.mode) && workers_.count(index) > 0)
      continue;
    return Status::FailedPrecondition(
        "{} was lost: a checkpoint needs every worker's state",
        o_.roles.Describe(lost));
  }
  Files files;
  nlohmann::json steps = nlohmann::json::object();
  ASSIGN_OR_RETURN(const int64_t step, AddWorkerStates(arrivals, files, steps));
  nlohmann::json versions = nlohmann::json::array();
  RETURN_IF_ERROR(AddServerStates(coordinator, files, versions));
  RETURN_IF_ERROR(AddDataStates(coordinator, files));
  files["coordinator.json"] = nlohmann::json{{"kind", "cluster"},
                                             {"mode", RunModeName(o_.mode)},
                                             {"step", step},
                                             {"worker_steps", steps},
                                             {"server_versions", versions},
                                             {"train_s", train_s}}
                                  .dump(2) +
                              "\n";
  files["config.toml"] = config_.ToToml();
  ASSIGN_OR_RETURN(std::string dir, WriteCheckpoint(run_dir_.path(), step,
                                                    files, o_.checkpoint_keep));
  size_t bytes = 0;
  for (const auto& [name, b] : files) bytes += b.size();
  LogInfo("checkpoint at step {}: {} ({:.1f} MB, {:.0f} ms)", step, dir,
          bytes / 1e6,
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  if (keep_for_next_life_.load()) {
    run_dir_.KeepCheckpoint(std::make_shared<const Checkpoint>(
        Checkpoint{dir, step, std::move(files), /*kept_in_memory=*/true}));
  }
  ++written_;
  last_step_ = step;
  return Status::Ok();
}

Result<std::shared_ptr<const Checkpoint>> CheckResumable(
    const Config& config, const ClusterRunOptions& o,
    const RunDirectory& run_dir) {
  if (!o.resume) return std::shared_ptr<const Checkpoint>();
  ClusterCheckpoints checked(config, o, run_dir);
  RETURN_IF_ERROR(checked.Load(/*announce=*/false));
  // The run's config.toml says how it goes on (the nodes a --processes
  // launch starts read it): with what a resume may change, e.g. another
  // cluster.workers. Written only now that the checkpoint accepted it.
  Config goes_on = config;
  RETURN_IF_ERROR(goes_on.ApplyOverride("checkpoint.resume=false"));
  // Which old workers went on is said of this checkpoint only.
  RETURN_IF_ERROR(goes_on.ApplyOverride("checkpoint.resume_workers="));
  RETURN_IF_ERROR(
      WriteFileAtomic(run_dir.File("config.toml"), goes_on.ToToml()));
  return checked.loaded();
}

}  // namespace strata
