// What one timeline span costs (common/timeline.h): off (the default), on
// (two clock reads and an append under the thread's own lock), and a
// request's span (its name interned as well, as RpcEndpoint does).
// bench/timeline_bench.py turns these into a cost per training step.
#include <benchmark/benchmark.h>

#include "common/timeline.h"

namespace {

using namespace strata;

void BM_SpanOff(benchmark::State& state) {
  timeline::Disable();
  timeline::SetThread(1, "main");
  for (auto _ : state) {
    timeline::Span s("step", "bench");
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_SpanOff);

void BM_SpanOn(benchmark::State& state) {
  timeline::Enable(1 << 16);  // a full ring: the steady state of a long run
  timeline::SetThread(1, "main");
  for (auto _ : state) {
    timeline::Span s("step", "bench");
    benchmark::ClobberMemory();
  }
  timeline::Disable();
  timeline::Take(1);
}
BENCHMARK(BM_SpanOn);

void BM_RequestSpanOn(benchmark::State& state) {
  timeline::Enable(1 << 16);
  for (auto _ : state) {
    const int64_t t0 = timeline::NowNs();
    const char* name = timeline::Intern("pull_request");
    timeline::Add(name, "rpc", t0, timeline::NowNs(), 2, 1, "requests", true);
  }
  timeline::Disable();
  timeline::Take(1);
}
BENCHMARK(BM_RequestSpanOn);

}  // namespace

BENCHMARK_MAIN();
