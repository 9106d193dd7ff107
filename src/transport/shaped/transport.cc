#include "transport/shaped/transport.h"

#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <deque>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "common/timeline.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

class SteadyClock final : public ShaperClock {
 public:
  int64_t NowNs() const override {
    return std::chrono::duration_cast<nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  int64_t MaxSleepNs() const override { return INT64_MAX / 4; }
};

// A message held until `due_ns`.
struct Timed {
  int64_t due_ns = 0;
  uint64_t seq = 0;
  NodeId peer = kInvalidNodeId;
  uint64_t bytes = 0;
  Message msg;
};

// Messages released when they are due, in (due, push) order. After Close()
// what is left comes out at once, then PopDue() says the queue ended.
// Thread-safe; one thread pops.
class TimedQueue {
 public:
  explicit TimedQueue(const ShaperClock* clock) : clock_(clock) {}

  void Push(Timed t) {
    MutexLock lock(&mu_);
    t.seq = next_seq_++;
    bytes_ += t.bytes;
    heap_.push_back(std::move(t));
    std::push_heap(heap_.begin(), heap_.end(), Later);
    cv_.SignalAll();
  }

  std::optional<Timed> PopDue() {
    MutexLock lock(&mu_);
    bool timed_out = false;  // the last wait ran its time
    for (;;) {
      if (heap_.empty()) {
        if (closed_) return std::nullopt;
        cv_.WaitFor(milliseconds(500));
        timed_out = false;
        continue;
      }
      // Woken this early, the message leaves on time on average: a timed
      // wait overshoots by about lead_ns_ (the thread's wake-up).
      const int64_t wait = heap_.front().due_ns - clock_->NowNs();
      if (closed_ || wait <= lead_ns_) break;
      timed_out = !cv_.WaitFor(
          nanoseconds(std::min(wait - lead_ns_, clock_->MaxSleepNs())));
    }
    if (timed_out) Learn(clock_->NowNs() - heap_.front().due_ns);
    std::pop_heap(heap_.begin(), heap_.end(), Later);
    Timed t = std::move(heap_.back());
    heap_.pop_back();
    bytes_ -= t.bytes;
    room_cv_.SignalAll();
    return t;
  }

  // Waits until fewer than `limit` bytes are held (or none at all), up to
  // `timeout`; false when it ran out.
  bool WaitForRoom(uint64_t limit, milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock lock(&mu_);
    while (bytes_ >= limit && !heap_.empty() && !closed_) {
      if (!room_cv_.WaitUntil(deadline)) return false;
    }
    return true;
  }

  void Close() {
    MutexLock lock(&mu_);
    closed_ = true;
    cv_.SignalAll();
    room_cv_.SignalAll();
  }

 private:
  // How late (> 0) or early a timed wait released the message: the lead
  // follows the overshoot (a moving average, bounded to 1 ms).
  void Learn(int64_t late_ns) REQUIRES(mu_) {
    const int64_t overshoot = late_ns + lead_ns_;
    lead_ns_ += (std::clamp<int64_t>(overshoot, 0, 1000000) - lead_ns_) / 8;
  }
  static bool Later(const Timed& a, const Timed& b) {
    return a.due_ns != b.due_ns ? a.due_ns > b.due_ns : a.seq > b.seq;
  }

  const ShaperClock* const clock_;
  Mutex mu_;
  CondVar cv_{&mu_};
  CondVar room_cv_{&mu_};
  std::vector<Timed> heap_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  bool closed_ GUARDED_BY(mu_) = false;
  int64_t lead_ns_ GUARDED_BY(mu_) = 0;
};

// Timed waits on the shaper's threads end when asked, not up to the
// kernel's default 50 us later.
void TightTimers() { ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); }

void JoinUnlessSelf(std::thread& t) {
  if (!t.joinable()) return;
  if (t.get_id() == std::this_thread::get_id()) {
    t.detach();
  } else {
    t.join();
  }
}

class ShapedTransport final : public Transport {
 public:
  ShapedTransport(std::unique_ptr<Transport> inner, ShapedOptions o)
      : inner_(std::move(inner)),
        o_(std::move(o)),
        clock_(o_.clock ? o_.clock : SteadyShaperClock()),
        egress_(o_.seed),
        out_(clock_.get()),
        in_(clock_.get()) {
    const bool direct = inner_->SetDirectDelivery([this](Message& m) {
      Intake(std::move(m));
      return true;
    });
    sender_ = std::thread([this] { SendLoop(); });
    deliverer_ = std::thread([this] { DeliverLoop(); });
    if (!direct) pump_ = std::thread([this] { PumpLoop(); });
  }
  ~ShapedTransport() override { Close(); }

  NodeId node_id() const override { return inner_->node_id(); }
  Status Bind(const std::string& endpoint) override {
    return inner_->Bind(endpoint);
  }
  std::string endpoint() const override { return inner_->endpoint(); }

  Status Connect(NodeId peer, const std::string& endpoint) override {
    RETURN_IF_ERROR(inner_->Connect(peer, endpoint));
    MutexLock lock(&mu_);
    routes_.insert(peer);
    return Status::Ok();
  }
  Status Disconnect(NodeId peer) override {
    RETURN_IF_ERROR(inner_->Disconnect(peer));
    MutexLock lock(&mu_);
    routes_.erase(peer);
    return Status::Ok();
  }

  Status Send(NodeId to, Message msg) override;
  Result<Message> Recv(milliseconds timeout) override;
  void Close() override;

  TransportStats stats() const override {
    TransportStats s = inner_->stats();
    s.messages_dropped += dropped_.load();
    return s;
  }
  bool SetDirectDelivery(std::function<bool(Message&)> sink) override {
    MutexLock lock(&sink_mu_);
    sink_ = std::move(sink);
    return true;
  }
  bool DeliversOnSendersThreads() const override { return false; }
  void Interrupt() override {
    MutexLock lock(&ready_mu_);
    interrupted_ = true;
    ready_cv_.SignalAll();
  }
  void SetPlacement(PlacementLookup lookup) override {
    inner_->SetPlacement(std::move(lookup));
  }

 private:
  // A message that reached this node: held until its receiving interface
  // has taken it.
  void Intake(Message msg) {
    const uint64_t bytes = WireBytes(msg);
    const LinkSpec link = o_.links(msg.header.sender, node_id());
    {
      MutexLock lock(&ingress_mu_);
      const int64_t now = clock_->NowNs();
      const int64_t due = ingress_.Deliver(link, bytes, now);
      const bool wait = held_ > 0 || due > now;
      ++held_;
      if (wait) {
        in_.Push(Timed{due, 0, msg.header.sender, bytes, std::move(msg)});
        return;
      }
    }
    // Due now and nothing held ahead of it: handed over on this thread (one
    // thread hand-off fewer). A message that comes meanwhile waits behind
    // it in the queue (held_).
    Hand(std::move(msg));
    Released();
  }
  void Released() {
    MutexLock lock(&ingress_mu_);
    --held_;
  }
  void SendLoop();
  void DeliverLoop();
  void PumpLoop();
  // To the sink, or to Recv() (where it keeps its order behind others).
  void Hand(Message msg);

  const std::unique_ptr<Transport> inner_;
  const ShapedOptions o_;
  const std::shared_ptr<const ShaperClock> clock_;
  std::atomic<bool> closed_{false};
  std::atomic<uint64_t> dropped_{0};

  Mutex mu_;  // the sending side
  EgressSchedule egress_ GUARDED_BY(mu_);
  std::set<NodeId> routes_ GUARDED_BY(mu_);

  Mutex ingress_mu_;
  IngressSchedule ingress_ GUARDED_BY(ingress_mu_);
  int64_t held_ GUARDED_BY(ingress_mu_) = 0;  // taken in, not yet handed

  Mutex sink_mu_;  // held while the sink runs
  std::function<bool(Message&)> sink_ GUARDED_BY(sink_mu_);

  Mutex ready_mu_;
  CondVar ready_cv_{&ready_mu_};
  std::deque<Message> ready_ GUARDED_BY(ready_mu_);
  bool interrupted_ GUARDED_BY(ready_mu_) = false;

  TimedQueue out_;
  TimedQueue in_;
  std::thread sender_;
  std::thread deliverer_;
  std::thread pump_;
};

Status ShapedTransport::Send(NodeId to, Message msg) {
  if (closed_) {
    return Status::Cancelled("node {}: Send() to node {} after Close()",
                             node_id(), to);
  }
  const LinkSpec link = o_.links(node_id(), to);
  if (!link.shaped()) return inner_->Send(to, std::move(msg));
  // Checked now: the wrapped transport's own check comes when it is due.
  RETURN_IF_ERROR(ValidateOutgoing(msg, MessageLimits{}));
  const uint64_t bytes = WireBytes(msg);
  if (!out_.WaitForRoom(o_.max_queued_bytes, o_.send_timeout)) {
    return Status::DeadlineExceeded(
        "node {}: the emulated link to node {} still held {} or more bytes "
        "after {} ms (net.* shapes it slower than this node sends)",
        node_id(), to, o_.max_queued_bytes, o_.send_timeout.count());
  }
  MutexLock lock(&mu_);
  if (routes_.count(to) == 0) {
    return Status::NotFound("node {}: no route to node {} (Connect() first)",
                            node_id(), to);
  }
  const Departure d = egress_.Schedule(to, link, bytes, clock_->NowNs());
  if (o_.on_departure) o_.on_departure(to, bytes, d);
  if (timeline::On()) {
    // Serialisation on this node's interface (never overlapping), then the
    // whole way to the receiver (overlapping: an async span).
    const int64_t b = static_cast<int64_t>(bytes);
    timeline::Add("on the wire", "link", d.start_ns, d.end_ns, b, node_id(),
                  "link out");
    timeline::Add("to the receiver", "link", d.start_ns, d.arrive_ns, to,
                  node_id(), "link out", /*async=*/true);
  }
  // Under the lock: the queue's order among equal times is Send()'s.
  out_.Push(Timed{d.arrive_ns, 0, to, bytes, std::move(msg)});
  return Status::Ok();
}

void ShapedTransport::SendLoop() {
  TightTimers();
  while (std::optional<Timed> t = out_.PopDue()) {
    const Status s = inner_->Send(t->peer, std::move(t->msg));
    if (s.ok()) continue;
    if (dropped_.fetch_add(1) < 5) {
      LogWarning(
          "node {}: a message over the emulated link to node {} was "
          "lost when it was due: {}",
          node_id(), t->peer, s.ToString());
    }
  }
}

void ShapedTransport::DeliverLoop() {
  TightTimers();
  while (std::optional<Timed> t = in_.PopDue()) {
    // The node is closing: what is in flight is dropped.
    if (!closed_) Hand(std::move(t->msg));
    Released();
  }
}

void ShapedTransport::Hand(Message msg) {
  {
    MutexLock lock(&ready_mu_);
    if (!ready_.empty()) {
      ready_.push_back(std::move(msg));
      ready_cv_.SignalAll();
      return;
    }
  }
  {
    MutexLock lock(&sink_mu_);
    if (sink_ && sink_(msg)) return;
  }
  MutexLock lock(&ready_mu_);
  ready_.push_back(std::move(msg));
  ready_cv_.SignalAll();
}

void ShapedTransport::PumpLoop() {
  while (!closed_) {
    Result<Message> m = inner_->Recv(milliseconds(100));
    if (m.ok()) {
      Intake(std::move(*m));
    } else if (m.status().code() == Status::Code::kCancelled) {
      return;
    } else if (m.status().code() == Status::Code::kFailedPrecondition) {
      std::this_thread::sleep_for(milliseconds(20));  // not bound yet
    }
  }
}

Result<Message> ShapedTransport::Recv(milliseconds timeout) {
  if (endpoint().empty() && !closed_) {
    return Status::FailedPrecondition("node {}: Recv() before Bind()",
                                      node_id());
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&ready_mu_);
  while (ready_.empty()) {
    if (closed_) {
      return Status::Cancelled("node {}: transport closed", node_id());
    }
    if (interrupted_) {
      interrupted_ = false;
      return Status::DeadlineExceeded("node {}: Recv() interrupted", node_id());
    }
    if (timeout.count() <= 0 || !ready_cv_.WaitUntil(deadline)) {
      if (!ready_.empty()) break;
      return Status::DeadlineExceeded("node {} ({}): no message within {} ms",
                                      node_id(), endpoint(), timeout.count());
    }
  }
  Message m = std::move(ready_.front());
  ready_.pop_front();
  return m;
}

void ShapedTransport::Close() {
  if (closed_.exchange(true)) return;
  // What is scheduled leaves now, then the wrapped transport closes.
  out_.Close();
  JoinUnlessSelf(sender_);
  inner_->SetDirectDelivery(nullptr);
  inner_->Close();
  JoinUnlessSelf(pump_);
  in_.Close();
  JoinUnlessSelf(deliverer_);
  MutexLock lock(&ready_mu_);
  ready_cv_.SignalAll();
}

}  // namespace

std::shared_ptr<const ShaperClock> SteadyShaperClock() {
  static const std::shared_ptr<const ShaperClock> clock =
      std::make_shared<SteadyClock>();
  return clock;
}

Result<std::unique_ptr<Transport>> NewShapedTransport(
    std::unique_ptr<Transport> inner, ShapedOptions options) {
  if (inner == nullptr) {
    return Status::InvalidArgument("an emulated link needs a transport");
  }
  if (!options.links) {
    return Status::InvalidArgument(
        "node {}: an emulated network needs its link lookup", inner->node_id());
  }
  return std::unique_ptr<Transport>(
      new ShapedTransport(std::move(inner), std::move(options)));
}

}  // namespace strata
