// The recorder behind one timeline of the whole cluster (cluster.timeline,
// docs/design/timeline.md): spans of named work, each tagged with the node
// it was done for, kept per thread in a bounded buffer until the
// coordinator gathers them (run/timeline_trace.h writes the Chrome trace).
//
// Off until Enable(): then a Span costs one relaxed atomic load and nothing
// else. On: two clock reads and an append under the thread's own
// (uncontended) lock. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::timeline {

// One span. `name`, `cat` and `track` point at string literals or at
// Intern()ed strings: they live as long as the process.
struct Event {
  const char* name = "";
  const char* cat = "";
  const char* track = "";  // the row it is drawn on within its node
  int64_t start_ns = 0;    // this process's steady clock
  int64_t dur_ns = 0;
  int64_t arg = -1;  // a step, a byte count, a peer (name-dependent); -1 none
  int32_t node = -1;
  // Spans that overlap others of their track (requests in flight) are
  // drawn as async slices.
  bool async = false;
};

// This process's steady clock, in nanoseconds.
int64_t NowNs();

namespace internal {
extern std::atomic<bool> on;
}  // namespace internal

// True while recording.
inline bool On() { return internal::on.load(std::memory_order_relaxed); }

// Starts recording with room for `events_per_thread` spans per thread
// (the oldest are dropped beyond it, and counted); drops whatever an
// earlier recording left. Disable() stops recording and keeps what was
// recorded for Take().
void Enable(int64_t events_per_thread);
void Disable();

// Records from construction to destruction when `on`.
class ScopedRecording {
 public:
  ScopedRecording(bool on, int64_t events_per_thread) : on_(on) {
    if (on_) Enable(events_per_thread);
  }
  ~ScopedRecording() {
    if (on_) Disable();
  }
  ScopedRecording(const ScopedRecording&) = delete;
  ScopedRecording& operator=(const ScopedRecording&) = delete;

 private:
  const bool on_;
};

// The node the calling thread's spans belong to (-1: none; spans of such a
// thread need an explicit node), and the name of its track.
void SetThread(int32_t node, const std::string& track);
int32_t ThreadNode();

// A copy of `s` that lives as long as the process (one per distinct text).
const char* Intern(const std::string& s);

// Records a span measured elsewhere. `node` -1: the calling thread's node;
// `track` null: the calling thread's track. No-op while off, or when the
// span has no node.
void Add(const char* name, const char* cat, int64_t start_ns, int64_t end_ns,
         int64_t arg = -1, int32_t node = -1, const char* track = nullptr,
         bool async = false);

// A span from construction to End() (or the end of the scope), on the
// calling thread's track, of `node` (-1: the calling thread's node).
class Span {
 public:
  Span(const char* name, const char* cat, int64_t arg = -1, int32_t node = -1)
      : name_(name),
        cat_(cat),
        arg_(arg),
        node_(node),
        start_(On() ? NowNs() : -1) {}
  ~Span() { End(); }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  void End() {
    if (start_ < 0) return;
    Add(name_, cat_, start_, NowNs(), arg_, node_);
    start_ = -1;
  }

 private:
  const char* name_;
  const char* cat_;
  int64_t arg_;
  int32_t node_;
  int64_t start_;
};

// A node's clock offset to the coordinator's, estimated from request/reply
// pairs as NTP does: a request sent at `sent` (local clock), stamped
// `remote` by the coordinator, answered at `received` (local) says
// remote ~ (sent + received) / 2 + offset, within half the round trip; the
// sample with the shortest round trip is kept. Not thread-safe.
struct ClockEstimate {
  int64_t offset_ns = 0;  // add to a local time to get the coordinator's
  int64_t rtt_ns = -1;    // of the sample kept; -1: no sample yet
  int64_t samples = 0;
  void Add(int64_t sent, int64_t remote, int64_t received) {
    const int64_t rtt = received - sent;
    if (rtt < 0 || remote <= 0) return;
    ++samples;
    if (rtt_ns >= 0 && rtt >= rtt_ns) return;
    rtt_ns = rtt;
    offset_ns = remote - (sent + rtt / 2);
  }
};

// What was recorded for `node`, taken out of the buffers (oldest first per
// thread), and how many of its spans the bounded buffers dropped.
struct Taken {
  std::vector<Event> events;
  int64_t dropped = 0;
};
Taken Take(int32_t node);

}  // namespace strata::timeline
