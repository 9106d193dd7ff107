#include "common/timeline.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "common/mutex.h"

namespace strata::timeline {
namespace internal {
std::atomic<bool> on{false};
}  // namespace internal

namespace {

// One thread's spans: a ring of at most `capacity` events.
struct Buffer {
  Mutex mu;
  std::vector<Event> events GUARDED_BY(mu);
  size_t next GUARDED_BY(mu) = 0;  // once full: the oldest, overwritten next
  std::map<int32_t, int64_t> dropped GUARDED_BY(mu);

  void Append(const Event& e, size_t capacity) {
    MutexLock lock(&mu);
    if (events.size() < capacity) {
      events.push_back(e);
      return;
    }
    if (capacity == 0) return;
    ++dropped[events[next].node];
    events[next] = e;
    next = (next + 1) % capacity;
  }
};

struct Registry {
  Mutex mu;
  std::vector<std::shared_ptr<Buffer>> buffers GUARDED_BY(mu);
  std::set<std::string> interned GUARDED_BY(mu);
  std::atomic<size_t> capacity{0};
};

Registry& TheRegistry() {
  static Registry* r = new Registry;  // never destroyed: threads may outlive
  return *r;
}

thread_local int32_t t_node = -1;
thread_local const char* t_track = "";
thread_local std::shared_ptr<Buffer> t_buffer;

Buffer& ThreadBuffer() {
  if (!t_buffer) {
    t_buffer = std::make_shared<Buffer>();
    Registry& r = TheRegistry();
    MutexLock lock(&r.mu);
    r.buffers.push_back(t_buffer);
  }
  return *t_buffer;
}

}  // namespace

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Enable(int64_t events_per_thread) {
  Registry& r = TheRegistry();
  {
    MutexLock lock(&r.mu);
    for (const auto& b : r.buffers) {
      MutexLock inner(&b->mu);
      b->events.clear();
      b->next = 0;
      b->dropped.clear();
    }
  }
  r.capacity = static_cast<size_t>(std::max<int64_t>(events_per_thread, 0));
  internal::on = true;
}

void Disable() { internal::on = false; }

void SetThread(int32_t node, const std::string& track) {
  t_node = node;
  t_track = Intern(track);
}

int32_t ThreadNode() { return t_node; }

const char* Intern(const std::string& s) {
  Registry& r = TheRegistry();
  MutexLock lock(&r.mu);
  return r.interned.insert(s).first->c_str();
}

void Add(const char* name, const char* cat, int64_t start_ns, int64_t end_ns,
         int64_t arg, int32_t node, const char* track, bool async) {
  if (!On()) return;
  Event e;
  e.node = node >= 0 ? node : t_node;
  if (e.node < 0) return;
  e.name = name;
  e.cat = cat;
  e.track = track != nullptr ? track : (*t_track != '\0' ? t_track : "other");
  e.start_ns = start_ns;
  e.dur_ns = std::max<int64_t>(end_ns - start_ns, 0);
  e.arg = arg;
  e.async = async;
  ThreadBuffer().Append(e, TheRegistry().capacity.load());
}

Taken Take(int32_t node) {
  Taken out;
  Registry& r = TheRegistry();
  MutexLock lock(&r.mu);
  for (const auto& b : r.buffers) {
    MutexLock inner(&b->mu);
    std::vector<Event> keep;
    const size_t n = b->events.size();
    for (size_t i = 0; i < n; ++i) {
      Event& e = b->events[(b->next + i) % n];  // oldest first
      if (e.node == node)
        out.events.push_back(e);
      else
        keep.push_back(e);
    }
    b->events = std::move(keep);
    b->next = 0;
    auto d = b->dropped.find(node);
    if (d != b->dropped.end()) {
      out.dropped += d->second;
      b->dropped.erase(d);
    }
  }
  return out;
}

}  // namespace strata::timeline
