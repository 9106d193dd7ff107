#include "coordinator/summary_gather.h"

#include <algorithm>

#include "common/log.h"
#include "common/seconds.h"
#include "coordinator/timeline_gather.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

// A reply's JSON report; DataLoss for an empty or malformed one.
Result<nlohmann::json> ReportOf(const Message& reply) {
  const std::string text = reply.payloads.empty() ? "" : ErrorText(reply);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Status::DataLoss("not a JSON report: '{}'", text);
  return j;
}

}  // namespace

void SummaryGather::ReleaseWorkers(const Status& run_status) {
  for (int w = 0; w < o_.roles.num_workers(); ++w) {
    Message m;
    m.header.type = MessageType::kShutdown;
    m.header.flags |= kShutdownError;
    m.payloads.push_back(Buffer::CopyOf(run_status.message().data(),
                                        run_status.message().size()));
    // One-way in effect: the worker may be the lost one.
    c_.Request(o_.roles.WorkerId(w), std::move(m));
  }
}

template <typename Report>
std::vector<Report> SummaryGather::StatsOf(Role role,
                                           const std::vector<NodeId>& lost) {
  std::vector<Report> out;
  for (NodeId id : o_.roles.Ids(role)) {
    if (std::find(lost.begin(), lost.end(), id) != lost.end()) continue;
    Message m;
    m.header.type = MessageType::kStatsRequest;
    auto reply = c_.Request(id, std::move(m))->Wait(milliseconds(10000));
    Result<Report> report = Status::Internal("no reply");
    if (reply.ok()) {
      Result<nlohmann::json> j = ReportOf(*reply);
      report = j.ok() ? Report::FromJson(*j) : Result<Report>(j.status());
    } else {
      report = reply.status();
    }
    if (report.ok())
      out.push_back(std::move(report).value());
    else
      LogWarning("no statistics from {}: {}", o_.roles.Describe(id),
                 report.status().message());
  }
  return out;
}

std::optional<FinalEvaluation> SummaryGather::FinalEval() {
  Message m;
  m.header.type = MessageType::kFinalEvalRequest;
  auto reply = c_.Request(o_.roles.EvaluatorId(), std::move(m))
                   ->Wait(o_.request_timeout);
  Result<FinalEvaluation> eval = reply.status();
  if (reply.ok()) {
    Result<nlohmann::json> j = ReportOf(*reply);
    eval = j.ok() ? FinalEvaluation::FromJson(*j)
                  : Result<FinalEvaluation>(j.status());
  }
  if (eval.ok()) return std::move(eval).value();
  LogWarning("no final evaluation: {}", eval.status().message());
  return std::nullopt;
}

void SummaryGather::AddWorkers(ClusterSummary& s) {
  const auto reports = c_.DoneReports();
  for (int w = 0; w < o_.roles.num_workers(); ++w) {
    auto it = reports.find(o_.roles.WorkerId(w));
    if (it == reports.end()) {
      s.workers.emplace_back();  // lost before it reported
      continue;
    }
    const WorkerMetrics m = WorkerMetrics::FromWire(
        nlohmann::json::parse(it->second, nullptr, false));
    s.samples += m.samples;
    s.steps = std::max(s.steps, m.iterations);
    s.workers.emplace_back(m);
  }
}

ClusterSummary SummaryGather::Gather(const Status& run_status,
                                     bool interrupted) {
  // Training time runs from barrier 0 (every worker set up: data loaded,
  // model initialised, collectives connected) to the last worker's end, as
  // the single-process trainer counts its steps only; the set-up before it
  // is setup_s.
  ClusterSummary s;
  s.status = run_status;
  s.interrupted = interrupted;
  const auto end = Clock::now();
  const auto training_start = c_.TrainingStart();
  const bool started = training_start != Clock::time_point{};
  s.train_s =
      prior_train_s_ + Seconds(end - (started ? training_start : start_));
  s.setup_s = started ? Seconds(training_start - start_) : 0.0;
  const std::vector<NodeId> lost = c_.LostIds();
  if (!run_status.ok()) ReleaseWorkers(run_status);
  s.servers_stats = StatsOf<ServerReport>(Role::kServer, lost);
  std::vector<DataServerReport> data =
      StatsOf<DataServerReport>(Role::kData, lost);
  if (run_status.ok() && o_.roles.has_evaluator() &&
      std::find(lost.begin(), lost.end(), o_.roles.EvaluatorId()) == lost.end())
    s.final_eval = FinalEval();
  if (o_.timeline)
    timelines_ = GatherTimelines(c_, o_.roles, lost, milliseconds(10000));
  c_.BroadcastShutdown(run_status.ok() ? "" : run_status.message());
  AddWorkers(s);
  s.samples_per_s = s.train_s > 0 ? s.samples / s.train_s : 0.0;
  s.model = o_.model_name;
  s.dataset = o_.dataset_name;
  s.mode = RunModeName(o_.mode);
  s.servers = o_.roles.num_servers();
  s.workers_count = o_.roles.num_workers();
  s.worker_batch = o_.worker_batch;
  s.iterations_per_worker = o_.iterations;
  s.compression = CompressionName(o_.compression);
  s.compress_pulls = o_.compress_pulls;
  // Layer-wise pipelining: the most a range holds (0: off or not used).
  s.pipeline_kb =
      static_cast<double>(o_.pipeline_floats) * sizeof(float) / 1024.0;
  s.lost_workers = c_.LostNodes();
  if (o_.data_servers > 0) {
    s.data_service = ClusterSummary::DataService{
        std::move(data), AssignmentName(o_.assignment), o_.prefetch};
  }
  s.gossip = o_.mode == RunMode::kGossip;
  // Servers replaced while the run went on (cluster.restart).
  s.node_restarts = c_.Restarts();
  s.wall_s = Seconds(Clock::now() - start_);
  return s;
}

}  // namespace strata
