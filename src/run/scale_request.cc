#include "run/scale_request.h"

#include <chrono>
#include <cstdio>
#include <sstream>

#include "common/fs.h"

namespace strata {
namespace {

constexpr const char* kAsked = "scale.json";
constexpr const char* kAccepted = "scale.accepted.json";
constexpr const char* kRefused = "scale.refused.json";
constexpr const char* kMembership = "membership.jsonl";

Result<std::optional<ScaleRequest>> ReadRequest(const std::string& path) {
  if (!FileExists(path)) return std::optional<ScaleRequest>();
  Result<std::string> text = ReadFile(path);
  // Taken between the look and the read.
  if (!text.ok() && text.status().code() == Status::Code::kNotFound)
    return std::optional<ScaleRequest>();
  if (!text.ok()) return text.status();
  ASSIGN_OR_RETURN(ScaleRequest r, ScaleRequest::FromJson(*text, path));
  return std::optional<ScaleRequest>(r);
}

}  // namespace

nlohmann::json ScaleRequest::ToJson() const {
  nlohmann::json j{
      {"workers", workers}, {"asked_unix", asked_unix}, {"step", step}};
  if (!leaving.empty()) j["leaving"] = leaving;
  if (data_servers > 0) j["data_servers"] = data_servers;
  return j;
}

Result<ScaleRequest> ScaleRequest::FromJson(const std::string& text,
                                            const std::string& what) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() ||
      !j.value("workers", nlohmann::json()).is_number_integer())
    return Status::DataLoss("{}: not a scale request: '{}'", what, text);
  ScaleRequest r;
  r.workers = j["workers"].get<int>();
  r.asked_unix = j.value("asked_unix", 0.0);
  r.step = j.value("step", int64_t{0});
  if (j.contains("data_servers")) {
    if (!j["data_servers"].is_number_integer() ||
        j["data_servers"].get<int>() < 1)
      return Status::DataLoss("{}: \"data_servers\" is not a count: '{}'", what,
                              text);
    r.data_servers = j["data_servers"].get<int>();
  }
  if (j.contains("leaving")) {
    if (!j["leaving"].is_array())
      return Status::DataLoss("{}: \"leaving\" is not a list: '{}'", what,
                              text);
    for (const auto& w : j["leaving"]) {
      if (!w.is_number_integer())
        return Status::DataLoss("{}: \"leaving\" holds a non-index: '{}'", what,
                                text);
      r.leaving.push_back(w.get<int>());
    }
  }
  return r;
}

double UnixNow() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status AskScale(const std::string& run_dir, const ScaleRequest& request) {
  const std::string path = JoinPath(run_dir, kAsked);
  if (FileExists(path)) {
    return Status::FailedPrecondition(
        "{} already holds a request the run has not taken yet", path);
  }
  return WriteFileAtomic(path, request.ToJson().dump() + "\n");
}

Result<std::optional<ScaleRequest>> PendingScale(const std::string& run_dir) {
  return ReadRequest(JoinPath(run_dir, kAsked));
}

bool ScalePending(const std::string& run_dir) {
  return FileExists(JoinPath(run_dir, kAsked));
}

void WithdrawScale(const std::string& run_dir) {
  std::remove(JoinPath(run_dir, kAsked).c_str());
}

Status RefuseScale(const std::string& run_dir, const std::string& why) {
  Result<std::optional<ScaleRequest>> asked = PendingScale(run_dir);
  const double when = asked.ok() && *asked ? (*asked)->asked_unix : 0.0;
  RETURN_IF_ERROR(WriteFileAtomic(
      JoinPath(run_dir, kRefused),
      nlohmann::json{{"asked_unix", when}, {"why", why}}.dump() + "\n"));
  WithdrawScale(run_dir);
  return Status::Ok();
}

std::string TakeRefusal(const std::string& run_dir, double asked_unix) {
  const std::string path = JoinPath(run_dir, kRefused);
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return "";
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || j.value("asked_unix", -1.0) != asked_unix) return "";
  std::remove(path.c_str());
  return j.value("why", std::string("refused"));
}

Status AcceptScale(const std::string& run_dir, ScaleRequest request,
                   int64_t step) {
  request.step = step;
  RETURN_IF_ERROR(WriteFileAtomic(JoinPath(run_dir, kAccepted),
                                  request.ToJson().dump() + "\n"));
  std::remove(JoinPath(run_dir, kAsked).c_str());
  return Status::Ok();
}

Result<std::optional<ScaleRequest>> TakeAcceptedScale(
    const std::string& run_dir) {
  const std::string path = JoinPath(run_dir, kAccepted);
  ASSIGN_OR_RETURN(std::optional<ScaleRequest> r, ReadRequest(path));
  if (r) std::remove(path.c_str());
  return r;
}

Status AppendMembership(const std::string& run_dir, const nlohmann::json& j) {
  return AppendLine(JoinPath(run_dir, kMembership), j.dump());
}

nlohmann::json ReadMembership(const std::string& run_dir) {
  nlohmann::json out = nlohmann::json::array();
  Result<std::string> text = ReadFile(JoinPath(run_dir, kMembership));
  if (!text.ok()) return out;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

}  // namespace strata
