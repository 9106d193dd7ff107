#include "run/emulation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <utility>

#include "common/log.h"

namespace strata {
namespace {

// A link's fields as written: < 0 means "not given".
struct LinkFields {
  double bandwidth_bps = -1;
  double latency_ms = -1;
  double jitter_ms = -1;
};

LinkFields ReadFields(const Config& c, const std::string& prefix) {
  return {c.GetFloat(prefix + "bandwidth_bps"),
          c.GetFloat(prefix + "latency_ms"), c.GetFloat(prefix + "jitter_ms")};
}

LinkSpec ToSpec(const LinkFields& f) {
  LinkSpec s;
  s.bits_per_second = std::max(0.0, f.bandwidth_bps);
  s.latency_ns = std::llround(std::max(0.0, f.latency_ms) * 1e6);
  s.jitter_ns = std::llround(std::max(0.0, f.jitter_ms) * 1e6);
  return s;
}

// `over`'s given fields replace `base`'s.
LinkFields Overlay(LinkFields base, const LinkFields& over) {
  if (over.bandwidth_bps >= 0) base.bandwidth_bps = over.bandwidth_bps;
  if (over.latency_ms >= 0) base.latency_ms = over.latency_ms;
  if (over.jitter_ms >= 0) base.jitter_ms = over.jitter_ms;
  return base;
}

// A node's override slows its links: the lower rate (0 is unlimited), the
// larger latency and jitter.
LinkFields Slower(LinkFields base, const LinkFields& node) {
  if (node.bandwidth_bps > 0) {
    base.bandwidth_bps = base.bandwidth_bps > 0
                             ? std::min(base.bandwidth_bps, node.bandwidth_bps)
                             : node.bandwidth_bps;
  }
  base.latency_ms = std::max(base.latency_ms, node.latency_ms);
  base.jitter_ms = std::max(base.jitter_ms, node.jitter_ms);
  return base;
}

// The whole of `text` as a number (surrounding blanks allowed).
bool ParseNumber(const std::string& text, double* out) {
  try {
    size_t used = 0;
    *out = std::stod(text, &used);
    return text.find_first_not_of(" \t\n", used) == std::string::npos;
  } catch (const std::exception&) {
    return false;
  }
}

// "a,b,c" as numbers; kInvalidArgument naming `key` and the piece that is
// not one.
Result<std::vector<double>> ParseNumbers(const std::string& text,
                                         const char* key) {
  std::vector<double> out;
  std::istringstream in(text);
  std::string piece;
  while (std::getline(in, piece, ',')) {
    double v = 0;
    if (!ParseNumber(piece, &v))
      return Status::InvalidArgument("{}: '{}' is not a number", key, piece);
    out.push_back(v);
  }
  return out;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\n") - b + 1);
}

// "worker3" -> its node id.
Result<NodeId> ParseNodeName(const std::string& name, const RoleTable& roles) {
  const size_t digits = name.find_first_of("0123456789");
  if (digits == std::string::npos || digits == 0) {
    return Status::InvalidArgument(
        "'{}' is not a node: write a role and an index, e.g. worker3, "
        "server0, data1",
        name);
  }
  ASSIGN_OR_RETURN(const Role role, ParseRole(name.substr(0, digits)));
  const std::string index = name.substr(digits);
  if (index.find_first_not_of("0123456789") != std::string::npos) {
    return Status::InvalidArgument("'{}' is not a node", name);
  }
  const NodeId id = roles.IdOf(role, std::stoi(index));
  if (id == kInvalidNodeId) {
    return Status::InvalidArgument("there is no {} in a cluster of {}", name,
                                   roles.ToString());
  }
  return id;
}

Result<LinkFields> ParseOverrideFields(const std::string& text) {
  LinkFields f;
  std::istringstream words(text);
  std::string word;
  while (words >> word) {
    if (word.back() == ',') word.pop_back();
    const size_t eq = word.find('=');
    double value = 0;
    if (eq == std::string::npos || !ParseNumber(word.substr(eq + 1), &value))
      return Status::InvalidArgument("'{}' is not KEY=NUMBER", word);
    if (value < 0) return Status::InvalidArgument("'{}' is negative", word);
    const std::string key = word.substr(0, eq);
    if (key == "bandwidth_bps") {
      f.bandwidth_bps = value;
    } else if (key == "latency_ms") {
      f.latency_ms = value;
    } else if (key == "jitter_ms") {
      f.jitter_ms = value;
    } else {
      return Status::InvalidArgument(
          "unknown link field '{}': bandwidth_bps, latency_ms or jitter_ms",
          key);
    }
  }
  return f;
}

// net.nodes, parsed: per node, and per unordered pair.
struct Overrides {
  std::map<NodeId, LinkFields> nodes;
  std::map<std::pair<NodeId, NodeId>, LinkFields> pairs;
};

Status ParseOverride(const std::string& piece, const RoleTable& roles,
                     Overrides& out) {
  const size_t colon = piece.find(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("'{}' has no ':' after the node", piece);
  }
  const std::string who = Trim(piece.substr(0, colon));
  ASSIGN_OR_RETURN(const LinkFields f,
                   ParseOverrideFields(piece.substr(colon + 1)));
  const size_t dash = who.find('-');
  if (dash == std::string::npos) {
    ASSIGN_OR_RETURN(const NodeId id, ParseNodeName(who, roles));
    out.nodes[id] = f;
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(const NodeId a,
                   ParseNodeName(Trim(who.substr(0, dash)), roles));
  ASSIGN_OR_RETURN(const NodeId b,
                   ParseNodeName(Trim(who.substr(dash + 1)), roles));
  out.pairs[{std::min(a, b), std::max(a, b)}] = f;
  return Status::Ok();
}

Result<Overrides> ParseOverrides(const std::string& text,
                                 const RoleTable& roles) {
  Overrides out;
  std::istringstream pieces(text);
  std::string piece;
  while (std::getline(pieces, piece, ';')) {
    piece = Trim(piece);
    if (piece.empty()) continue;
    Status s = ParseOverride(piece, roles, out);
    if (!s.ok()) return s.WithContext("net.nodes");
  }
  return out;
}

// The links of one run, precomputed for every pair of nodes.
class LinkTable {
 public:
  LinkTable(const Config& c, const RoleTable& roles, const Overrides& o)
      : n_(roles.num_nodes()), specs_(size_t(n_) * n_) {
    const LinkFields all = ReadFields(c, "net.");
    const std::map<std::string, LinkFields> classes = {
        {"worker_server", Overlay(all, ReadFields(c, "net.worker_server."))},
        {"worker_worker", Overlay(all, ReadFields(c, "net.worker_worker."))},
        {"worker_data", Overlay(all, ReadFields(c, "net.worker_data."))}};
    for (NodeId a = 0; a < n_; ++a) {
      for (NodeId b = 0; b < n_; ++b) {
        auto it = classes.find(ClassOf(roles, a, b));
        LinkFields f = it == classes.end() ? all : it->second;
        for (NodeId end : {a, b}) {
          if (auto n = o.nodes.find(end); n != o.nodes.end())
            f = Slower(f, n->second);
        }
        if (auto p = o.pairs.find({std::min(a, b), std::max(a, b)});
            p != o.pairs.end())
          f = Overlay(f, p->second);
        specs_[size_t(a) * n_ + b] = ToSpec(f);
      }
    }
  }

  bool any_shaped() const {
    return std::any_of(specs_.begin(), specs_.end(),
                       [](const LinkSpec& s) { return s.shaped(); });
  }
  // Ids outside the table (a node added later) get no shaping.
  LinkSpec Get(NodeId from, NodeId to) const {
    if (from < 0 || to < 0 || from >= n_ || to >= n_) return {};
    return specs_[size_t(from) * n_ + to];
  }

 private:
  static std::string ClassOf(const RoleTable& roles, NodeId a, NodeId b) {
    Role ra, rb;
    int ia, ib;
    if (!roles.RoleOf(a, &ra, &ia).ok() || !roles.RoleOf(b, &rb, &ib).ok())
      return "";
    if (rb == Role::kWorker) std::swap(ra, rb);
    if (ra != Role::kWorker) return "";
    if (rb == Role::kServer) return "worker_server";
    if (rb == Role::kWorker) return "worker_worker";
    if (rb == Role::kData) return "worker_data";
    return "";
  }

  const int n_;
  std::vector<LinkSpec> specs_;
};

std::string DescribeFields(const LinkFields& f) {
  std::string rate = f.bandwidth_bps > 0
                         ? fmt::format("{:g} bit/s", f.bandwidth_bps)
                         : std::string("unlimited");
  std::string out =
      fmt::format("{}, {:g} ms", rate, std::max(0.0, f.latency_ms));
  if (f.jitter_ms > 0) out += fmt::format(" (+- {:g} ms)", f.jitter_ms);
  return out;
}

}  // namespace

Result<LinkLookup> LinksFromConfig(const Config& config,
                                   const RoleTable& roles) {
  ASSIGN_OR_RETURN(const Overrides o,
                   ParseOverrides(config.GetString("net.nodes"), roles));
  auto table = std::make_shared<const LinkTable>(config, roles, o);
  if (!table->any_shaped()) return LinkLookup();
  return LinkLookup(
      [table](NodeId from, NodeId to) { return table->Get(from, to); });
}

std::string DescribeLinks(const Config& c) {
  const LinkFields all = ReadFields(c, "net.");
  std::string out = "net: " + DescribeFields(all) + " every link";
  bool any = ToSpec(all).shaped();
  for (const char* cls : {"worker_server", "worker_worker", "worker_data"}) {
    const LinkFields f = ReadFields(c, fmt::format("net.{}.", cls));
    if (f.bandwidth_bps < 0 && f.latency_ms < 0 && f.jitter_ms < 0) continue;
    out += fmt::format("; {} {}", cls, DescribeFields(Overlay(all, f)));
    any = true;
  }
  if (!c.GetString("net.nodes").empty()) {
    out += "; overrides: " + c.GetString("net.nodes");
    any = true;
  }
  return any ? out : std::string();
}

bool WorkerPaceOptions::on() const {
  const bool slow = std::any_of(speed.begin(), speed.end(),
                                [](double s) { return s != 1.0; });
  return slow || (straggler_probability > 0 && straggler_ms > 0) ||
         noise_sigma > 0;
}

double WorkerPaceOptions::SpeedOf(int index) const {
  if (index < 0 || index >= static_cast<int>(speed.size())) return 1.0;
  return speed[index];
}

namespace {

// "uniform:LO,HI" or "lognormal:SIGMA", one draw per worker.
Result<std::vector<double>> DrawSpeeds(const std::string& text, int workers,
                                       uint64_t seed) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  ASSIGN_OR_RETURN(const std::vector<double> args,
                   ParseNumbers(text.substr(colon + 1), "workers.speed"));
  std::mt19937_64 rng(seed);
  auto draw = [&](auto distribution) {
    std::vector<double> out;
    for (int i = 0; i < workers; ++i) out.push_back(distribution(rng));
    return out;
  };
  if (kind == "uniform" && args.size() == 2 && args[0] > 0 &&
      args[1] >= args[0])
    return draw(std::uniform_real_distribution<double>(args[0], args[1]));
  if (kind == "lognormal" && args.size() == 1 && args[0] >= 0)
    return draw(std::lognormal_distribution<double>(0.0, args[0]));
  return Status::InvalidArgument(
      "workers.speed = \"{}\": want a list of {} factors (\"1,1,0.25,...\"), "
      "\"uniform:LO,HI\" (0 < LO <= HI) or \"lognormal:SIGMA\"",
      text, workers);
}

Result<std::vector<double>> ParseSpeeds(const std::string& text, int workers,
                                        uint64_t seed) {
  if (Trim(text).empty()) return std::vector<double>();
  if (text.find(':') != std::string::npos)
    return DrawSpeeds(Trim(text), workers, seed);
  ASSIGN_OR_RETURN(std::vector<double> out,
                   ParseNumbers(text, "workers.speed"));
  for (size_t i = 0; i < out.size(); ++i) {
    if (!(out[i] > 0)) {
      return Status::InvalidArgument(
          "workers.speed: factor {} of worker {} is not above 0", out[i], i);
    }
  }
  if (static_cast<int>(out.size()) != workers) {
    return Status::InvalidArgument(
        "workers.speed lists {} factors for cluster.workers = {}: give one per "
        "worker (or a distribution, \"uniform:0.5,1\")",
        out.size(), workers);
  }
  return out;
}

}  // namespace

Result<WorkerPaceOptions> WorkerPaceOptions::FromConfig(const Config& c,
                                                        int workers) {
  WorkerPaceOptions o;
  const int64_t seed = c.GetInt("workers.seed");
  o.seed = static_cast<uint64_t>(seed != 0 ? seed : c.GetInt("run.seed"));
  ASSIGN_OR_RETURN(o.speed,
                   ParseSpeeds(c.GetString("workers.speed"), workers, o.seed));
  o.straggler_probability = c.GetFloat("workers.straggler_probability");
  o.straggler_ms = c.GetFloat("workers.straggler_ms");
  o.noise_sigma = c.GetFloat("workers.noise_sigma");
  return o;
}

}  // namespace strata

namespace strata {

void LogEmulation(const Config& config, const WorkerPaceOptions& pace) {
  if (std::string links = DescribeLinks(config); !links.empty())
    LogInfo("{}", links);
  if (!pace.on()) return;
  std::string speeds;
  for (size_t i = 0; i < pace.speed.size(); ++i)
    speeds += fmt::format("{}{:.3g}", i ? "," : "", pace.speed[i]);
  LogInfo(
      "workers: speed {}; stragglers {:g} ms with p = {:g} per step; "
      "lognormal noise sigma {:g} (seed {})",
      speeds.empty() ? std::string("1 each") : speeds, pace.straggler_ms,
      pace.straggler_probability, pace.noise_sigma, pace.seed);
}

}  // namespace strata
