#include "launch/control_endpoint.h"

#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/fs.h"
#include "common/log.h"

namespace strata {
namespace {

using nlohmann::json;

json ErrorReply(const Status& st) {
  return {
      {"ok", false}, {"code", CodeName(st.code())}, {"error", st.message()}};
}

// A scale request, answered.
std::string AnswerScale(const std::string& run_dir, const json& j,
                        const std::atomic<bool>* stop) {
  std::vector<int> drain;
  for (const auto& w : j.value("drain", json::array()))
    if (w.is_number_integer()) drain.push_back(w.get<int>());
  const double timeout_s = std::min(j.value("timeout_s", 120.0), 3600.0);
  LogInfo("control endpoint: asked to scale to {} workers{}",
          j["workers"].get<int>(),
          j.value("data_servers", json(0)) == json(0)
              ? std::string()
              : " and " + j["data_servers"].dump() + " data servers");
  const json m = j.value("data_servers", json(0));
  if (!m.is_number_integer())
    return ErrorReply(Status::InvalidArgument(
                          "\"data_servers\" is not a count: {}", m.dump()))
        .dump();
  Result<ScaleOutcome> out = ScaleRun(
      run_dir, j["workers"].get<int>(),
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)), stop,
      drain, m.get<int>());
  if (!out.ok()) return ErrorReply(out.status()).dump();
  return json{{"ok", true},
              {"from", out->from},
              {"to", out->to},
              {"step", out->step},
              {"since_request_s", out->since_request_s}}
      .dump();
}

// Whether a worker on another machine can reach the run's nodes: not when
// they bind loopback (cluster.processes_ip) while the control endpoint is
// reached from elsewhere. FailedPrecondition naming the key.
Status CheckReachable(const std::string& config_text) {
  ASSIGN_OR_RETURN(Config config,
                   Config::FromTomlString(config_text, "config.toml"));
  const std::string& ip = config.GetString("cluster.processes_ip");
  const std::string& control = config.GetString("cluster.control_address");
  auto loopback = [](const std::string& s) {
    return s.rfind("127.", 0) == 0 || s.rfind("tcp://127.", 0) == 0;
  };
  if (loopback(ip) && !loopback(control))
    return Status::FailedPrecondition(
        "the run's nodes bind {} (cluster.processes_ip), which a worker on "
        "another machine cannot reach; start the run with "
        "cluster.processes_ip = this machine's address",
        ip);
  return Status::Ok();
}

// A worker on another machine asks to join (launch/join.h).
std::string AnswerJoin(const std::string& run_dir, const json& hello,
                       JoinListener* joins, int lives_port) {
  if (joins == nullptr)
    return ErrorReply(Status::FailedPrecondition(
                          "a worker joins a `strata train --processes` run; "
                          "this run's nodes are threads of one process"))
        .dump();
  if (!hello.is_object() || !hello.value("host", json()).is_string() ||
      !hello.value("pid", json()).is_number_integer())
    return ErrorReply(Status::InvalidArgument(
                          "a join names the worker's host and pid: {{\"join\": "
                          "{{\"host\": H, \"pid\": P}}}}"))
        .dump();
  Result<std::string> config = ReadFile(JoinPath(run_dir, "config.toml"));
  if (!config.ok()) return ErrorReply(config.status()).dump();
  Status reachable = CheckReachable(*config);
  if (!reachable.ok()) return ErrorReply(reachable).dump();
  Result<std::shared_ptr<RemoteLife>> remote = joins->JoinRemote(
      hello["host"].get<std::string>(), hello["pid"].get<int64_t>());
  if (!remote.ok()) return ErrorReply(remote.status()).dump();
  LogInfo("control endpoint: a worker on {} (pid {}) joins with ticket {}",
          (*remote)->host(), (*remote)->pid(), (*remote)->ticket());
  return json{{"ok", true},
              {"ticket", (*remote)->ticket()},
              {"lives_port", lives_port},
              {"config", *config}}
      .dump();
}

// One request of the control endpoint, answered.
std::string Answer(const std::string& run_dir, const std::string& text,
                   const std::atomic<bool>* stop, JoinListener* joins,
                   int lives_port) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_object() && j.contains("join"))
    return AnswerJoin(run_dir, j["join"], joins, lives_port);
  if (!j.is_object() || !j.value("workers", json()).is_number_integer())
    return ErrorReply(Status::InvalidArgument(
                          "not a scale request ({{\"workers\": N, \"drain\": "
                          "[...]}}) or a join ({{\"join\": {{...}}}}): '{}'",
                          text.substr(0, 200)))
        .dump();
  return AnswerScale(run_dir, j, stop);
}

// A joined worker's poll for its next life.
std::string AnswerLife(const std::string& text, JoinListener* joins) {
  const json j = json::parse(text, nullptr, false);
  if (joins == nullptr || !j.is_object() ||
      !j.value("life", json()).is_number_integer() ||
      !j.value("got", json()).is_number_unsigned())
    return ErrorReply(Status::InvalidArgument(
                          "not a poll for a life ({{\"life\": TICKET, "
                          "\"got\": N}}): '{}'",
                          text.substr(0, 200)))
        .dump();
  Result<std::shared_ptr<RemoteLife>> remote =
      joins->Remote(j["life"].get<int64_t>());
  if (!remote.ok()) return ErrorReply(remote.status()).dump();
  bool closed = false;
  const std::string line = (*remote)->Poll(j["got"].get<size_t>(), &closed);
  if (!line.empty())
    return json{{"ok", true}, {"life", json::parse(line, nullptr, false)}}
        .dump();
  return json{{"ok", true}, {closed ? "end" : "wait", true}}.dump();
}

// `answer()`, or an error reply for a request whose JSON has a value of
// the wrong type (nlohmann throws): a malformed request never ends the run.
std::string Guarded(const std::function<std::string()>& answer) {
  try {
    return answer();
  } catch (const std::exception& e) {
    return ErrorReply(
               Status::InvalidArgument("a malformed request: {}", e.what()))
        .dump();
  }
}

// The port of a bound tcp://HOST:PORT endpoint (0 if none).
int PortOf(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return 0;
  return std::atoi(endpoint.c_str() + colon + 1);
}

// The keys a client of a secured run holds (`keys_dir`; empty: none).
Result<std::optional<CurveKeys>> ClientKeys(const std::string& keys_dir) {
  if (keys_dir.empty()) return std::optional<CurveKeys>();
  ASSIGN_OR_RETURN(CurveKeyPair pair,
                   ReadCurveKeyPairFile(JoinPath(keys_dir, kClusterKeyFile)));
  return std::optional<CurveKeys>(CurveKeys::ForCluster(pair));
}

Status::Code CodeNamed(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(Status::Code::kUnimplemented); ++c) {
    if (name == CodeName(static_cast<Status::Code>(c)))
      return static_cast<Status::Code>(c);
  }
  return Status::Code::kInternal;
}

// The endpoint's reply `text`, when it says ok; the run's refusal with its
// code, or DataLoss naming `endpoint` for text that is not a reply.
Result<json> OkReply(const std::string& endpoint, const std::string& text) {
  json reply = json::parse(text, nullptr, false);
  if (!reply.is_object())
    return Status::DataLoss("the control endpoint {} answered '{}'", endpoint,
                            text.substr(0, 200));
  if (!reply.value("ok", false))
    return Status(CodeNamed(reply.value("code", "")),
                  reply.value("error", "no reason given"));
  return reply;
}

}  // namespace

Result<std::unique_ptr<ControlEndpoint>> StartControlEndpoint(
    const Config& config, const RunDirectory& run_dir,
    const std::atomic<bool>* stop, JoinListener* joins) {
  const std::string& address = config.GetString("cluster.control_address");
  if (address.empty()) return std::unique_ptr<ControlEndpoint>();
  ASSIGN_OR_RETURN(const std::optional<CurveKeys> curve,
                   CurveKeysFromConfig(config));
  auto out = std::make_unique<ControlEndpoint>();
  // The lives on the same host, any port.
  const size_t colon = address.rfind(':');
  const std::string lives_address =
      (colon == std::string::npos ? address : address.substr(0, colon)) + ":*";
  Result<std::unique_ptr<ReplyServer>> lives = ReplyServer::Start(
      lives_address, curve, [joins](const std::string& text) {
        return Guarded([&] { return AnswerLife(text, joins); });
      });
  if (!lives.ok())
    return lives.status().WithContext("cluster.control_address (lives)");
  out->lives = std::move(*lives);
  const std::string dir = run_dir.path();
  const int lives_port = PortOf(out->lives->endpoint());
  Result<std::unique_ptr<ReplyServer>> server = ReplyServer::Start(
      address, curve, [dir, stop, joins, lives_port](const std::string& text) {
        return Guarded(
            [&] { return Answer(dir, text, stop, joins, lives_port); });
      });
  if (!server.ok())
    return server.status().WithContext("cluster.control_address");
  out->control = std::move(*server);
  RETURN_IF_ERROR(run_dir.WriteJson(
      "control.json", json{{"endpoint", out->control->endpoint()},
                           {"lives", out->lives->endpoint()},
                           {"security", curve ? "curve" : "none"}}));
  LogInfo("control endpoint: {}{} (strata scale --control{})",
          out->control->endpoint(), curve ? " (CURVE)" : "",
          joins != nullptr ? ", strata node --join" : "");
  return out;
}

Result<ScaleOutcome> ScaleRemote(const std::string& endpoint,
                                 const std::string& keys_dir, int workers,
                                 const std::vector<int>& leaving,
                                 std::chrono::milliseconds timeout,
                                 int data_servers) {
  ASSIGN_OR_RETURN(const std::optional<CurveKeys> curve, ClientKeys(keys_dir));
  const json request{
      {"workers", workers},
      {"drain", leaving},
      {"timeout_s", std::chrono::duration<double>(timeout).count()},
      {"data_servers", data_servers}};
  // The run waits up to `timeout` twice (taken, then training again).
  ASSIGN_OR_RETURN(std::string text,
                   RequestReply(endpoint, curve, request.dump(),
                                2 * timeout + std::chrono::seconds(2)));
  ASSIGN_OR_RETURN(const json reply, OkReply(endpoint, text));
  ScaleOutcome out;
  out.from = reply.value("from", 0);
  out.to = reply.value("to", 0);
  out.step = reply.value("step", int64_t{0});
  out.since_request_s = reply.value("since_request_s", 0.0);
  return out;
}

Result<RemoteJoin> AskToJoin(const std::string& endpoint,
                             const std::string& keys_dir,
                             const std::string& host, int64_t pid,
                             std::chrono::milliseconds timeout) {
  RemoteJoin out;
  ASSIGN_OR_RETURN(out.curve, ClientKeys(keys_dir));
  const json request{{"join", {{"host", host}, {"pid", pid}}}};
  ASSIGN_OR_RETURN(std::string text,
                   RequestReply(endpoint, out.curve, request.dump(), timeout));
  ASSIGN_OR_RETURN(const json reply, OkReply(endpoint, text));
  const int port = reply.value("lives_port", 0);
  const size_t colon = endpoint.rfind(':');
  if (port <= 0 || colon == std::string::npos ||
      !reply.value("ticket", json()).is_number_integer() ||
      !reply.value("config", json()).is_string())
    return Status::DataLoss("the control endpoint {} answered a join with '{}'",
                            endpoint, text.substr(0, 200));
  // The lives endpoint: the host this process reached, the port it named.
  out.lives = endpoint.substr(0, colon + 1) + std::to_string(port);
  out.ticket = reply["ticket"].get<int64_t>();
  out.config = reply["config"].get<std::string>();
  return out;
}

Result<std::optional<NextLife>> WaitRemoteLife(
    RemoteJoin& join, std::chrono::milliseconds timeout, bool had_life,
    const std::atomic<bool>* stop) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto answered = start;
  while (true) {
    const json poll{{"life", join.ticket}, {"got", join.received}};
    if (stop != nullptr && stop->load())
      return Status::Cancelled("interrupted while waiting for the launcher");
    if (Clock::now() - start > timeout)
      return Status::DeadlineExceeded(
          "waited {} s for the launcher's word at {} (a next life or the end "
          "of the run); ending",
          std::chrono::duration_cast<std::chrono::seconds>(timeout).count(),
          join.lives);
    Result<std::string> text = RequestReply(join.lives, join.curve, poll.dump(),
                                            std::chrono::seconds(5));
    if (!text.ok()) {
      // After the last life the launcher may be gone before this poll.
      if (had_life && Clock::now() - answered > std::chrono::seconds(10)) {
        LogInfo("the run's endpoint {} stopped answering: the run is over",
                join.lives);
        return std::optional<NextLife>();
      }
      continue;
    }
    answered = Clock::now();
    ASSIGN_OR_RETURN(const json reply, OkReply(join.lives, *text));
    if (reply.value("end", false)) return std::optional<NextLife>();
    if (reply.contains("life")) {
      ASSIGN_OR_RETURN(NextLife life, NextLife::FromLine(reply["life"].dump()));
      ++join.received;
      return std::optional<NextLife>(std::move(life));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace strata
