#include "launch/control_endpoint.h"

#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "common/log.h"

namespace strata {
namespace {

using nlohmann::json;

json ErrorReply(const Status& st) {
  return {
      {"ok", false}, {"code", CodeName(st.code())}, {"error", st.message()}};
}

// One request of the endpoint, answered.
std::string Answer(const std::string& run_dir, const std::string& text,
                   const std::atomic<bool>* stop) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.value("workers", json()).is_number_integer())
    return ErrorReply(Status::InvalidArgument(
                          "not a scale request ({{\"workers\": N, \"drain\": "
                          "[...]}}): '{}'",
                          text.substr(0, 200)))
        .dump();
  std::vector<int> drain;
  for (const auto& w : j.value("drain", json::array()))
    if (w.is_number_integer()) drain.push_back(w.get<int>());
  const double timeout_s = std::min(j.value("timeout_s", 120.0), 3600.0);
  LogInfo("control endpoint: asked to scale to {} workers",
          j["workers"].get<int>());
  Result<ScaleOutcome> out = ScaleRun(
      run_dir, j["workers"].get<int>(),
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)), stop,
      drain);
  if (!out.ok()) return ErrorReply(out.status()).dump();
  return json{{"ok", true},
              {"from", out->from},
              {"to", out->to},
              {"step", out->step},
              {"since_request_s", out->since_request_s}}
      .dump();
}

Status::Code CodeNamed(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(Status::Code::kUnimplemented); ++c) {
    if (name == CodeName(static_cast<Status::Code>(c)))
      return static_cast<Status::Code>(c);
  }
  return Status::Code::kInternal;
}

}  // namespace

Result<std::unique_ptr<ReplyServer>> StartControlEndpoint(
    const Config& config, const RunDirectory& run_dir,
    const std::atomic<bool>* stop) {
  const std::string& address = config.GetString("cluster.control_address");
  if (address.empty()) return std::unique_ptr<ReplyServer>();
  ASSIGN_OR_RETURN(const std::optional<CurveKeys> curve,
                   CurveKeysFromConfig(config));
  const std::string dir = run_dir.path();
  Result<std::unique_ptr<ReplyServer>> server = ReplyServer::Start(
      address, curve,
      [dir, stop](const std::string& text) { return Answer(dir, text, stop); });
  if (!server.ok())
    return server.status().WithContext("cluster.control_address");
  RETURN_IF_ERROR(run_dir.WriteJson(
      "control.json", json{{"endpoint", (*server)->endpoint()},
                           {"security", curve ? "curve" : "none"}}));
  LogInfo("control endpoint: {}{} (strata scale --control)",
          (*server)->endpoint(), curve ? " (CURVE)" : "");
  return server;
}

Result<ScaleOutcome> ScaleRemote(const std::string& endpoint,
                                 const std::string& keys_dir, int workers,
                                 const std::vector<int>& leaving,
                                 std::chrono::milliseconds timeout) {
  std::optional<CurveKeys> curve;
  if (!keys_dir.empty()) {
    ASSIGN_OR_RETURN(CurveKeyPair pair,
                     ReadCurveKeyPairFile(JoinPath(keys_dir, kClusterKeyFile)));
    curve = CurveKeys::ForCluster(pair);
  }
  const json request{
      {"workers", workers},
      {"drain", leaving},
      {"timeout_s", std::chrono::duration<double>(timeout).count()}};
  // The run waits up to `timeout` twice (taken, then training again).
  ASSIGN_OR_RETURN(std::string text,
                   RequestReply(endpoint, curve, request.dump(),
                                2 * timeout + std::chrono::seconds(2)));
  const json reply = json::parse(text, nullptr, false);
  if (!reply.is_object())
    return Status::DataLoss("the control endpoint {} answered '{}'", endpoint,
                            text.substr(0, 200));
  if (!reply.value("ok", false))
    return Status(CodeNamed(reply.value("code", "")),
                  reply.value("error", "no reason given"));
  ScaleOutcome out;
  out.from = reply.value("from", 0);
  out.to = reply.value("to", 0);
  out.step = reply.value("step", int64_t{0});
  out.since_request_s = reply.value("since_request_s", 0.0);
  return out;
}

}  // namespace strata
