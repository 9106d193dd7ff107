#include "launch/life_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace strata {

using Clock = std::chrono::steady_clock;

std::string NextLife::ToLine() const {
  nlohmann::json j{{"coordinator", coordinator}, {"set", overrides}};
  if (index >= 0) j["index"] = index;
  if (!config.empty()) j["config"] = config;
  return j.dump() + "\n";
}

Result<NextLife> NextLife::FromLine(const std::string& line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  NextLife life;
  if (j.is_object() && j.contains("refused") && j["refused"].is_string())
    return Status::FailedPrecondition("the run did not take this node: {}",
                                      j["refused"].get<std::string>());
  if (!j.is_object() || !j.contains("coordinator") ||
      !j["coordinator"].is_string() || !j.contains("set") ||
      !j["set"].is_array())
    return Status::DataLoss(
        "the launcher's word is not a next life ({{\"coordinator\": ..., "
        "\"set\": [...]}}): '{}'",
        line.substr(0, 200));
  life.coordinator = j["coordinator"].get<std::string>();
  if (j.contains("index")) {
    if (!j["index"].is_number_integer() || j["index"].get<int>() < 0)
      return Status::DataLoss(
          "the launcher's next life: \"index\" is not a "
          "node index: '{}'",
          line.substr(0, 200));
    life.index = j["index"].get<int>();
  }
  if (j.contains("config")) {
    if (!j["config"].is_string())
      return Status::DataLoss(
          "the launcher's next life: \"config\" is not TOML text: '{}'",
          line.substr(0, 200));
    life.config = j["config"].get<std::string>();
  }
  for (const auto& kv : j["set"]) {
    if (!kv.is_string())
      return Status::DataLoss(
          "the launcher's next life: a \"set\" entry is "
          "not a string: '{}'",
          line.substr(0, 200));
    life.overrides.push_back(kv.get<std::string>());
  }
  return life;
}

Status SendNextLife(int fd, const NextLife& life) {
  const std::string line = life.ToLine();
  size_t done = 0;
  while (done < line.size()) {
    // MSG_NOSIGNAL: a node that died gets EPIPE, not the launcher SIGPIPE.
    const ssize_t n =
        ::send(fd, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return Status::IoError("telling a node its next life: {}",
                             std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<std::optional<NextLife>> WaitNextLife(int fd,
                                             std::chrono::milliseconds timeout,
                                             const std::atomic<bool>* stop) {
  const auto deadline = Clock::now() + timeout;
  std::string line;
  char c;
  while (true) {
    if (stop != nullptr && stop->load())
      return Status::Cancelled("interrupted while waiting for the launcher");
    if (Clock::now() > deadline)
      return Status::DeadlineExceeded(
          "waited {} s for the launcher's word after the role ended (a next "
          "life or the end of the run on descriptor {}); ending",
          std::chrono::duration_cast<std::chrono::seconds>(timeout).count(),
          fd);
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR)
      return Status::IoError("waiting for the launcher: {}",
                             std::strerror(errno));
    if (ready <= 0) continue;
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return Status::IoError("reading the launcher's word: {}",
                             std::strerror(errno));
    if (n == 0) return std::optional<NextLife>();  // closed: the end
    if (c != '\n') {
      line.push_back(c);
      continue;
    }
    ASSIGN_OR_RETURN(NextLife life, NextLife::FromLine(line));
    return std::optional<NextLife>(std::move(life));
  }
}

}  // namespace strata
