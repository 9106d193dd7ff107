// How exactly the emulated links (net.*; docs/design/links.md) take the
// time their model says. For message sizes 1 KiB to 64 MiB and rates of
// 100 Mbit/s to 10 Gbit/s with 1 ms of latency, one node sends a message to
// another and the time from Send() to the receiver's Recv() is measured,
// one message at a time (the links idle in between), over the in-process
// transport and over ZeroMQ TCP on loopback. Printed beside it: the
// model's time ((size + header) * 8 / rate + latency), their ratio, and
// the same transfer unshaped (this machine's own cost of moving the
// message, measured in the same run). The real transfer follows the
// emulated one, so it adds to it: where it is more than 5% of the model's
// time, this machine's CPU, not the emulated link, is what the row shows,
// and "excess" (measured minus unshaped, over the model) is the shaper's
// own error. Medians of repeats.
//
//   build/bench/link_bench [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "transport/factory.h"
#include "transport/shaped/link_model.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kLatencyNs = 1000000;

struct Pair {
  std::unique_ptr<Transport> a, b;
};

Pair Connect(const std::string& kind, InProcFabric& fabric, LinkLookup links) {
  TransportOptions options;
  options.fabric = &fabric;
  options.links = std::move(links);
  const std::string local = *LocalEndpoint(kind);
  Pair p;
  p.a = NewBoundTransport(0, local, options).value();
  p.b = NewBoundTransport(1, local, options).value();
  (void)p.a->Connect(1, p.b->endpoint());
  (void)p.b->Connect(0, p.a->endpoint());
  return p;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds from Send() to Recv(), median of `reps`.
double Transfer(Pair& p, const Buffer& payload, int reps) {
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    Message m;
    m.header.type = MessageType::kPush;
    m.payloads.push_back(payload.Share());
    const auto t0 = Clock::now();
    Status s = p.a->Send(1, std::move(m));
    Result<Message> got = p.b->Recv(std::chrono::milliseconds(60000));
    const double took =
        std::chrono::duration<double>(Clock::now() - t0).count();
    if (!s.ok() || !got.ok()) {
      std::fprintf(stderr, "transfer failed: %s %s\n", s.ToString().c_str(),
                   got.status().ToString().c_str());
      return -1;
    }
    if (r > 0) times.push_back(took);  // the first warms the route up
  }
  return Median(times);
}

std::string Size(uint64_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

void Table(const std::string& kind, bool quick) {
  std::printf("\n%s: %-8s %-10s %12s %12s %7s %12s %7s  %s\n", kind.c_str(),
              "size", "rate", "model ms", "measured ms", "ratio", "unshaped ms",
              "excess", "limit");
  std::vector<uint64_t> sizes = {1u << 10, 16u << 10, 256u << 10, 4u << 20,
                                 64u << 20};
  std::vector<double> ratios;
  int cpu_bound = 0;
  for (uint64_t size : sizes) {
    Buffer payload = Buffer::Allocate(size);
    std::memset(payload.data(), 1, size);
    InProcFabric plain_fabric;
    Pair plain = Connect(kind, plain_fabric, nullptr);
    const int reps = size >= (4u << 20) ? 3 : 9;
    const double unshaped = Transfer(plain, payload, reps);
    for (double rate : {1e8, 1e9, 1e10}) {
      const LinkSpec link{rate, kLatencyNs, 0};
      const double model =
          (link.SerializationNs(size + kWireHeaderBytes) + kLatencyNs) / 1e9;
      if (quick && model > 1.0) continue;
      InProcFabric fabric;
      Pair shaped =
          Connect(kind, fabric, [link](NodeId, NodeId) { return link; });
      const double measured = Transfer(shaped, payload, model > 2 ? 1 : reps);
      const double ratio = measured / model;
      // This machine's own transfer follows the emulated one: where it is
      // more than 5% of the model's time, it is what the row measures.
      const bool cpu = unshaped > 0.05 * model;
      cpu_bound += cpu;
      if (!cpu) ratios.push_back(ratio);
      std::printf("%s  %-8s %-10s %12.3f %12.3f %7.3f %12.3f %7.3f  %s\n",
                  std::string(kind.size(), ' ').c_str(), Size(size).c_str(),
                  (rate >= 1e9 ? std::to_string(int(rate / 1e9)) + " Gbit/s"
                               : std::to_string(int(rate / 1e6)) + " Mbit/s")
                      .c_str(),
                  model * 1e3, measured * 1e3, ratio, unshaped * 1e3,
                  (measured - unshaped) / model,
                  cpu ? "this machine's CPU" : "the emulated link");
    }
  }
  if (ratios.empty()) return;
  const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
  const bool within = *lo >= 0.9 && *hi <= 1.1;
  std::printf(
      "%s: where the emulated link sets the pace (%zu rows), measured/model "
      "is %.3f..%.3f: %s 10%%; %d rows are set by this machine's CPU\n",
      kind.c_str(), ratios.size(), *lo, *hi, within ? "within" : "NOT within",
      cpu_bound);
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  strata::SetLogLevel(strata::LogLevel::kWarning);
  std::printf(
      "emulated link accuracy: one message at a time, 1 ms latency, medians"
      "%s\n",
      quick ? " (--quick: rows over 1 s left out)" : "");
  for (const char* kind : {"inproc", "tcp"}) strata::Table(kind, quick);
  return 0;
}
