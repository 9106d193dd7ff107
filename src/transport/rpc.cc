#include "transport/rpc.h"

#include <algorithm>
#include <deque>

#include "common/log.h"
#include "common/mutex.h"
#include "common/timeline.h"
#include "transport/spin_wait.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long one Recv() by whoever receives waits before looking around again.
constexpr milliseconds kReceiveSlice{50};
// After the last waiting caller left, the endpoint's thread leaves the
// receiving side to callers this long, so that a loop of requests keeps it.
constexpr milliseconds kCallerLinger{20};
// Messages queued for the endpoint's thread before offering threads wait,
// and how long they wait for room.
constexpr size_t kMaxQueued = 4096;
constexpr milliseconds kQueueFullWait{30000};
// How long Stop() waits for callers still inside Wait() to leave.
constexpr milliseconds kStopWait{10000};

bool IsReply(const MessageHeader& h) { return (h.flags & kReplyFlag) != 0; }
bool IsReply(const Message& m) { return IsReply(m.header); }

thread_local bool t_inline_sends = false;   // InlineSendScope
std::atomic<uint64_t> g_handled_inline{0};  // RpcEndpoint::HandledInline()

}  // namespace

namespace rpc_internal {

// What an endpoint shares with its calls: the transport, the calls waiting
// for replies, and the leader/follower state of the receiving side.
struct EndpointState {
  using Handler = std::function<void(Message)>;

  explicit EndpointState(std::unique_ptr<Transport> t)
      : transport(std::move(t)) {}

  // The waiting call for a reply's request id (removed), or null.
  std::shared_ptr<RpcCall> TakePending(uint64_t request_id) EXCLUDES(mu) {
    MutexLock lock(&mu);
    auto it = pending.find(request_id);
    if (it == pending.end()) return nullptr;
    std::shared_ptr<RpcCall> call = std::move(it->second);
    pending.erase(it);
    resend.erase(request_id);
    return call;
  }

  // Completes `call` with `reply` (a kError reply becomes its status).
  static void CompleteCall(RpcCall& call, Message reply) {
    if (reply.header.type == MessageType::kError) {
      // The replier's status code travels in the header's clock (ReplyError);
      // an unknown value (an older or foreign peer) reads as kUnavailable.
      const int64_t code = reply.header.clock;
      const bool known =
          code > static_cast<int64_t>(Status::Code::kOk) &&
          code <= static_cast<int64_t>(Status::Code::kUnimplemented);
      call.Complete(Status(
          known ? static_cast<Status::Code>(code) : Status::Code::kUnavailable,
          fmt::format("node {} answered {}: {}", reply.header.sender,
                      call.what_, ErrorText(reply))));
    } else {
      call.Complete(std::move(reply));
    }
  }

  // Completes the call a reply belongs to, or logs that none waits for it.
  void DeliverReply(Message reply) {
    std::shared_ptr<RpcCall> call = TakePending(reply.header.request_id);
    if (call == nullptr) {
      LogDebug("node {}: reply {} from node {} matches no request (late?)",
               transport->node_id(), reply.header.request_id,
               reply.header.sender);
      return;
    }
    CompleteCall(*call, std::move(reply));
  }

  // Completes every waiting call with `status`, or (null) with a
  // cancellation naming the call.
  void CancelAll(const Status* status) EXCLUDES(mu) {
    std::map<uint64_t, std::shared_ptr<RpcCall>> calls;
    {
      MutexLock lock(&mu);
      calls.swap(pending);
      resend.clear();
      if (status != nullptr) cancelled = std::make_unique<Status>(*status);
    }
    for (auto& [id, call] : calls) {
      call->Complete(
          status != nullptr
              ? *status
              : Status::Cancelled("node {} stopped before the reply to {}",
                                  transport->node_id(), call->what_));
    }
    WakeCallers();
  }

  void WakeCallers() EXCLUDES(lf_mu) {
    MutexLock lock(&lf_mu);
    callers_cv.SignalAll();
  }

  // A message that arrived, offered by the receiving caller or (in-process)
  // by the sender's thread: a reply is completed at once, unless messages
  // are queued for the endpoint's thread, in which case it queues behind
  // them, as does anything for the handler. Always takes the message.
  bool Offer(Message& msg, bool may_wait = true) EXCLUDES(lf_mu) {
    {
      MutexLock lock(&lf_mu);
      if (HandledInline(msg)) return true;
      if (queued > 0 || !IsReply(msg)) return Enqueue(msg, may_wait);
    }
    // Nothing was queued at the check. A message queued since then came
    // from another sender concurrently (no order between senders) or not
    // at all (callers receive one at a time).
    DeliverReply(std::move(msg));
    return true;
  }

  // Queues `msg` for the endpoint's thread. Back-pressure, as a
  // transport's own queue would apply: a full queue holds the offering
  // thread (a sender, in-process) until the endpoint's thread makes room or
  // stops; past the wait the message is declined and takes the transport's
  // way (and its send timeout). A transport's own receiving thread
  // (`may_wait` false) is never held: the endpoint's replies may need it to
  // make progress; the message it offered is declined at once and queued
  // there.
  bool Enqueue(Message& msg, bool may_wait) REQUIRES(lf_mu) {
    if (!may_wait && queue.size() >= kMaxQueued && !stopping) return false;
    const Clock::time_point deadline = Clock::now() + kQueueFullWait;
    while (queue.size() >= kMaxQueued && !stopping) {
      if (!room_cv.WaitUntil(deadline)) break;
    }
    if (queue.size() >= kMaxQueued && !stopping) return false;
    queue.push_back(std::move(msg));
    ++queued;
    loop_cv.Signal();
    return true;
  }

  // Handles `msg` here, on the sender's thread, if the endpoint is idle and
  // the message may be (RpcEndpoint::SetInlineHandling); lets go of lf_mu
  // while the handler runs. Counted in `queued` while it runs, so that what
  // comes meanwhile queues behind it and nobody else handles a message.
  bool HandledInline(Message& msg) REQUIRES(lf_mu) {
    if (queued > 0 || stopping || !inline_handler || !t_inline_sends ||
        IsReply(msg) || !may_inline(msg.header)) {
      return false;
    }
    inline_busy = true;
    ++queued;
    lf_mu.Unlock();
    g_handled_inline.fetch_add(1, std::memory_order_relaxed);
    {
      // What the handler itself sends is not handled inline in turn.
      const InlineSendScope not_nested(false);
      inline_handler(std::move(msg));
    }
    lf_mu.Lock();
    --queued;
    inline_busy = false;
    if (!queue.empty()) loop_cv.Signal();
    return true;
  }

  // Waits for `call` until `end`, receiving whenever nobody else does.
  // False if the endpoint is stopping or its transport closed (the caller
  // then waits for the call plainly: Stop() completes it).
  bool WaitAsCaller(RpcCall& call, Clock::time_point end) EXCLUDES(lf_mu) {
    MutexLock lock(&lf_mu);
    if (stopping) return false;
    ++waiters;
    bool closed = false;
    while (!call.Ready()) {
      const Clock::time_point now = Clock::now();
      if (now >= end) break;
      if (!receiving) {
        receiving = true;
        lock.Unlock();
        closed = ReceiveAsCaller(std::min(
            std::chrono::ceil<milliseconds>(end - now), kReceiveSlice));
        lock.Lock();
        receiving = false;
        // Another caller's reply may have come, or one may receive now.
        callers_cv.SignalAll();
        if (closed) break;
        continue;
      }
      if (loop_receiving && !interrupted) {
        interrupted = true;
        transport->Interrupt();
      }
      (void)callers_cv.WaitUntil(end);
    }
    --waiters;
    last_wait_end = Clock::now();
    if (stopping) callers_cv.SignalAll();  // Stop() waits for waiters == 0
    return !closed;
  }

  // One receive by a waiting caller: what comes is offered (a reply
  // completes its call). True when the transport is closed.
  bool ReceiveAsCaller(milliseconds wait) EXCLUDES(lf_mu) {
    Result<Message> msg = transport->Recv(wait);
    if (msg.ok()) {
      if (!Offer(*msg)) {
        LogWarning(
            "node {}: dropped a {} from node {}: the handler's queue "
            "stayed full for {} ms",
            transport->node_id(), MessageTypeName(msg->header.type),
            msg->header.sender, kQueueFullWait.count());
      }
      return false;
    }
    if (msg.status().code() == Status::Code::kCancelled) return true;
    if (msg.status().code() != Status::Code::kDeadlineExceeded) {
      LogWarning("node {}: receive failed: {}", transport->node_id(),
                 msg.status().ToString());
    }
    return false;
  }

  // The endpoint's thread (RpcEndpoint::Loop) until `running` goes false:
  // handles what is queued for it, and otherwise drains the transport's
  // own queue (direct delivery) or receives when no caller does.
  void Serve(const std::atomic<bool>& running, const Handler& handler)
      EXCLUDES(lf_mu) {
    const bool direct = !callers_receive;
    MutexLock lock(&lf_mu);
    // In-process: what reached the transport's queue before the sink was
    // set is received at the start and whenever the loop was idle for a
    // slice.
    bool drain = direct;
    bool counted = direct;  // the first drain is counted already (Start())
    while (running.load()) {
      if (drain && !inline_busy) {
        drain = false;
        // Being handled: no sender handles a message inline meanwhile.
        if (!counted) ++queued;
        counted = false;
        lock.Unlock();
        for (Result<Message> msg = transport->Recv(milliseconds(0)); msg.ok();
             msg = transport->Recv(milliseconds(0))) {
          Dispatch(std::move(msg).value(), handler);
        }
        lock.Lock();
        --queued;
      }
      if (!queue.empty() && !inline_busy) {
        HandleQueued(handler);
      } else if (direct) {
        // A drain put off (an inline handler was running) stays due.
        if (IdleDirect(running)) drain = true;
      } else {
        TakeTurn(running, handler);
      }
    }
  }

  // Handles the first queued message on the endpoint's thread.
  void HandleQueued(const Handler& handler) REQUIRES(lf_mu) {
    Message msg = std::move(queue.front());
    queue.pop_front();
    lf_mu.Unlock();
    Dispatch(std::move(msg), handler);
    lf_mu.Lock();
    --queued;
    callers_cv.SignalAll();
    room_cv.SignalAll();
  }

  // Direct delivery, nothing to handle: senders (or the transport's
  // receiving thread) queue. In process, polls for the next message a
  // while before sleeping (spin_wait.h). True when it slept a whole slice
  // (the transport's own queue is drained then).
  bool IdleDirect(const std::atomic<bool>& running) REQUIRES(lf_mu) {
    // Nothing is being dispatched here, so `queued` counts what waits in
    // the queue, and a message a sender handles inline (which leaves
    // nothing to do here).
    lf_mu.Unlock();
    const bool more = SpinUntil(
        [this, &running] {
          const int inline_now = inline_busy.load(std::memory_order_acquire);
          return queued.load(std::memory_order_acquire) > inline_now ||
                 !running.load(std::memory_order_acquire);
        },
        spin.load() ? SpinWaitBudget() : std::chrono::microseconds(0));
    lf_mu.Lock();
    // Looked at again under the lock: a message queued just after the
    // spin gave up notified nobody, and an inline handler may have ended.
    if (!running.load() || (!queue.empty() && !inline_busy)) return false;
    // Spinning again after an inline handler came and went; while one
    // runs, its end wakes this thread if it left something queued.
    if (more && !inline_busy) return false;
    return !loop_cv.WaitFor(kReceiveSlice);
  }

  // Callers receive: the endpoint's thread receives once when no caller
  // does (nor has for kCallerLinger), and otherwise waits.
  void TakeTurn(const std::atomic<bool>& running, const Handler& handler)
      REQUIRES(lf_mu) {
    const Clock::time_point now = Clock::now();
    if (receiving || waiters > 0) {
      (void)loop_cv.WaitFor(kReceiveSlice);
      return;
    }
    if (now - last_wait_end < kCallerLinger) {
      (void)loop_cv.WaitUntil(last_wait_end + kCallerLinger);
      return;
    }
    receiving = loop_receiving = true;
    interrupted = false;
    lf_mu.Unlock();
    // Dispatched while still receiving, so that nothing after it overtakes.
    ReceiveOnce(running, handler);
    lf_mu.Lock();
    receiving = loop_receiving = false;
    callers_cv.SignalAll();
  }

  // One receive on the endpoint's thread; what comes is dispatched.
  void ReceiveOnce(const std::atomic<bool>& running, const Handler& handler) {
    Result<Message> msg = transport->Recv(kReceiveSlice);
    if (msg.ok()) {
      Dispatch(std::move(msg).value(), handler);
    } else if (msg.status().code() != Status::Code::kDeadlineExceeded &&
               running.load()) {
      LogWarning("node {}: receive failed: {}", transport->node_id(),
                 msg.status().ToString());
      if (msg.status().code() == Status::Code::kCancelled) {
        std::this_thread::sleep_for(kReceiveSlice);  // closed: do not spin
      }
    }
  }

  // A reply completes its call; anything else goes to the handler.
  void Dispatch(Message msg, const Handler& handler) {
    if (IsReply(msg)) {
      DeliverReply(std::move(msg));
    } else {
      handler(std::move(msg));
    }
  }

  const std::unique_ptr<Transport> transport;

  Mutex mu;
  std::map<uint64_t, std::shared_ptr<RpcCall>> pending GUARDED_BY(mu);
  // CancelPending(): the status every later request fails with at once
  // (the node is shutting down; no new wait may outlast that).
  std::unique_ptr<Status> cancelled GUARDED_BY(mu);
  // KeepRequestsForResend(): the requests' messages, by request id.
  std::atomic<bool> keep_for_resend{false};
  std::map<uint64_t, Message> resend GUARDED_BY(mu);

  // Leader/follower state (RpcEndpoint::callers_receive()).
  std::atomic<bool> callers_receive{false};
  // Whether waits for a message poll before sleeping (spin_wait.h): only
  // where the message comes from another thread of this process.
  std::atomic<bool> spin{false};
  Mutex lf_mu;
  CondVar callers_cv{&lf_mu};                // a call done, receiving side free
  CondVar loop_cv{&lf_mu};                   // something queued, stopping
  CondVar room_cv{&lf_mu};                   // the queue has room again
  bool receiving GUARDED_BY(lf_mu) = false;  // someone in Recv()
  bool loop_receiving GUARDED_BY(lf_mu) = false;  // the endpoint's thread
  bool interrupted GUARDED_BY(lf_mu) = false;
  bool stopping GUARDED_BY(lf_mu) = false;
  int waiters GUARDED_BY(lf_mu) = 0;
  Clock::time_point last_wait_end GUARDED_BY(lf_mu);
  // Messages for the endpoint's thread in arrival order; `queued` also
  // counts the one it is working on. Changed under lf_mu; atomic so that
  // the idle loop can poll it without the lock.
  std::deque<Message> queue GUARDED_BY(lf_mu);
  std::atomic<int> queued{0};
  // Inline handling (RpcEndpoint::SetInlineHandling): set before the
  // endpoint starts (under lf_mu, which readers hold while they look), then
  // read-only; `inline_busy` while a sender's thread handles a message (the
  // endpoint's thread then handles nothing).
  std::function<bool(const MessageHeader&)> may_inline;
  std::function<void(Message)> inline_handler;
  // Changed under lf_mu; atomic so that the idle loop can poll it.
  std::atomic<bool> inline_busy{false};
};

}  // namespace rpc_internal

using rpc_internal::EndpointState;

Result<Message> RpcCall::Wait(milliseconds timeout) {
  const Clock::time_point end =
      Clock::now() + std::max(timeout, milliseconds(0));
  // In process the reply is completed on another thread of this process
  // (the replier's, or the endpoint's when messages were queued before it):
  // poll for it a while before sleeping (spin_wait.h). Callers that receive
  // replies themselves sleep in the transport's Recv() instead.
  if (in_process_) {
    (void)SpinUntil(
        [this] { return done_.load(std::memory_order_acquire); },
        std::min<std::chrono::microseconds>(SpinWaitBudget(), timeout));
  }
  MutexLock lock(&mu_);
  bool waited = false;
  if (!done_) {
    if (std::shared_ptr<EndpointState> ep = endpoint_.lock()) {
      lock.Unlock();
      waited = ep->WaitAsCaller(*this, end);
      lock.Lock();
    }
  }
  if (!waited) {
    while (!done_.load()) {
      if (!cv_.WaitUntil(end)) break;
    }
  }
  if (!done_) {
    return Status::DeadlineExceeded("no reply to {} within {} ms", what_,
                                    timeout.count());
  }
  return std::move(*result_);
}

bool RpcCall::Ready() const {
  MutexLock lock(&mu_);
  return done_.load();
}

void RpcCall::Complete(Result<Message> result) {
  const int64_t now = timeline::NowNs();
  {
    MutexLock lock(&mu_);
    if (done_) return;
    result_ = std::make_unique<Result<Message>>(std::move(result));
    completed_ns_ = now;
    // Recorded before the caller can see the reply: a worker sends its
    // timeline right after its last request returns.
    if (span_name_ != nullptr)
      timeline::Add(span_name_, "rpc", sent_ns_, now, to_, from_, "requests",
                    /*async=*/true);
    done_ = true;
  }
  cv_.SignalAll();
}

InlineSendScope::InlineSendScope(bool on) : previous_(t_inline_sends) {
  t_inline_sends = on;
}

InlineSendScope::~InlineSendScope() { t_inline_sends = previous_; }

bool InlineSendScope::active() { return t_inline_sends; }

std::string ErrorText(const Message& msg) {
  if (msg.payloads.empty()) return "(no message)";
  const Buffer& b = msg.payloads[0];
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

RpcEndpoint::RpcEndpoint(std::unique_ptr<Transport> transport, Handler handler)
    : state_(std::make_shared<EndpointState>(std::move(transport))),
      handler_(std::move(handler)) {}

RpcEndpoint::~RpcEndpoint() { Stop(); }

Transport& RpcEndpoint::transport() { return *state_->transport; }

NodeId RpcEndpoint::node_id() const { return state_->transport->node_id(); }

bool RpcEndpoint::callers_receive() const {
  return state_->callers_receive.load();
}

void RpcEndpoint::Start() {
  if (running_.exchange(true)) return;
  // In-process transports hand every message to Offer() on the sender's
  // thread (a reply completes its call there); the others let waiting
  // callers receive (see rpc.h). Either way, one thread hand-off fewer per
  // request.
  EndpointState* state = state_.get();
  {
    // Before any sender can reach Offer(): inline handling (in process
    // only; undone below otherwise), and the first drain of what reached
    // the transport's own queue before, counted as being handled so that
    // nothing is handled inline ahead of it (Loop()).
    MutexLock lock(&state->lf_mu);
    if (may_inline_) {
      state->may_inline = may_inline_;
      state->inline_handler = handler_;
    }
    ++state->queued;
  }
  // Where the backend runs the sink on a receiving thread of its own (UCX's
  // progress thread), that thread has nothing else to do until the next
  // message arrives: requests that may be handled inline are handled on it.
  const bool on_senders = state->transport->DeliversOnSendersThreads();
  const bool direct = state->transport->SetDirectDelivery(
      on_senders ? std::function<bool(Message&)>(
                       [state](Message& m) { return state->Offer(m); })
                 : [state](Message& m) {
                     const InlineSendScope receiving_thread(true);
                     return state->Offer(m, /*may_wait=*/false);
                   });
  state_->callers_receive = !direct;
  state_->spin = direct && on_senders;
  if (!direct) {
    // Callers receive (no drain); inline handling needs the sender's thread.
    MutexLock lock(&state->lf_mu);
    state->may_inline = nullptr;
    state->inline_handler = nullptr;
    --state->queued;
  }
  // Replies to calls that carry a placement are received in place.
  state->transport->SetPlacement(
      [state](const MessageHeader& h) -> std::shared_ptr<PayloadPlacement> {
        // An error reply's text never goes where the parameters go.
        if (!IsReply(h) || h.type == MessageType::kError) return nullptr;
        MutexLock lock(&state->mu);
        auto it = state->pending.find(h.request_id);
        if (it == state->pending.end() || it->second->to_ != h.sender) {
          return nullptr;
        }
        return it->second->placement_;
      });
  thread_ = std::thread([this] { Loop(); });
}

void RpcEndpoint::Stop() {
  EndpointState& s = *state_;
  // No sender is inside the fast path once this returns.
  s.transport->SetDirectDelivery(nullptr);
  s.transport->SetPlacement(nullptr);
  const bool was_running = running_.exchange(false);
  {
    MutexLock lock(&s.lf_mu);
    s.stopping = true;
    s.loop_cv.SignalAll();
    s.room_cv.SignalAll();
  }
  s.transport->Interrupt();
  if (was_running && thread_.joinable()) thread_.join();
  s.CancelAll(nullptr);
  s.transport->Close();
  MutexLock lock(&s.lf_mu);
  const Clock::time_point deadline = Clock::now() + kStopWait;
  while (s.waiters != 0) {
    if (!s.callers_cv.WaitUntil(deadline)) break;
  }
  if (s.waiters != 0) {
    LogWarning(
        "node {}: {} caller(s) still inside RpcCall::Wait() {} ms after "
        "Stop()",
        s.transport->node_id(), s.waiters, kStopWait.count());
  }
}

void RpcEndpoint::Loop() {
  timeline::SetThread(node_id(), "handler");
  state_->Serve(running_, handler_);
}

std::shared_ptr<RpcCall> RpcEndpoint::Request(
    NodeId to, Message msg, std::shared_ptr<PayloadPlacement> placement) {
  auto call = std::make_shared<RpcCall>();
  call->to_ = to;
  call->from_ = node_id();
  call->sent_ns_ = timeline::NowNs();
  if (timeline::On() && msg.header.type != MessageType::kHeartbeat)
    call->span_name_ = timeline::Intern(MessageTypeName(msg.header.type));
  call->placement_ = std::move(placement);
  call->what_ =
      fmt::format("{} to node {}", MessageTypeName(msg.header.type), to);
  if (state_->callers_receive.load()) {
    call->endpoint_ = state_;
  } else {
    call->in_process_ = running_.load() && state_->spin.load();
  }
  const uint64_t id = next_id_.fetch_add(1);
  msg.header.request_id = id;
  msg.header.flags &= ~kReplyFlag;
  {
    MutexLock lock(&state_->mu);
    if (state_->cancelled != nullptr) {
      call->Complete(*state_->cancelled);
      return call;
    }
    state_->pending[id] = call;
    if (state_->keep_for_resend.load()) {
      Message kept;
      kept.header = msg.header;
      for (const Buffer& p : msg.payloads) kept.payloads.push_back(p.Share());
      state_->resend[id] = std::move(kept);
    }
  }
  Status st = state_->transport->Send(to, std::move(msg));
  if (!st.ok()) {
    {
      MutexLock lock(&state_->mu);
      state_->pending.erase(id);
      state_->resend.erase(id);
    }
    call->Complete(st);
  }
  return call;
}

Status RpcEndpoint::Reply(const Message& request, Message reply) {
  reply.header.request_id = request.header.request_id;
  reply.header.flags |= kReplyFlag;
  return state_->transport->Send(request.header.sender, std::move(reply));
}

Status RpcEndpoint::ReplyError(const Message& request, const Status& status) {
  Message m;
  m.header.type = MessageType::kError;
  // The code survives the RPC: the caller's status has the same one.
  m.header.clock = static_cast<int64_t>(status.code());
  std::string text = status.ToString();
  m.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
  return Reply(request, std::move(m));
}

void RpcEndpoint::ReplyOrLog(const Message& request, Message reply) {
  Status st = Reply(request, std::move(reply));
  if (!st.ok()) {
    LogWarning("node {}: reply to {} from node {} not sent: {}", node_id(),
               MessageTypeName(request.header.type), request.header.sender,
               st.message());
  }
}

void RpcEndpoint::ReplyErrorOrLog(const Message& request,
                                  const Status& status) {
  Status st = ReplyError(request, status);
  if (!st.ok()) {
    LogWarning("node {}: error reply to {} from node {} not sent: {}",
               node_id(), MessageTypeName(request.header.type),
               request.header.sender, st.message());
  }
}

void RpcEndpoint::CancelPending(const Status& status) {
  state_->CancelAll(&status);
}

uint64_t RpcEndpoint::HandledInline() {
  return g_handled_inline.load(std::memory_order_relaxed);
}

void RpcEndpoint::SetInlineHandling(
    std::function<bool(const MessageHeader&)> may_inline) {
  may_inline_ = std::move(may_inline);
}

void RpcEndpoint::KeepRequestsForResend(bool keep) {
  state_->keep_for_resend = keep;
}

int RpcEndpoint::Resend(NodeId to) {
  std::vector<Message> again;
  {
    MutexLock lock(&state_->mu);
    for (auto it = state_->resend.begin(); it != state_->resend.end();) {
      auto call = state_->pending.find(it->first);
      if (call == state_->pending.end() || call->second->Ready()) {
        it = state_->resend.erase(it);  // answered, or given up on
        continue;
      }
      if (call->second->to_ == to) {
        Message m;
        m.header = it->second.header;
        for (const Buffer& p : it->second.payloads)
          m.payloads.push_back(p.Share());
        again.push_back(std::move(m));
      }
      ++it;
    }
  }
  int sent = 0;
  for (Message& m : again) {
    Status st = state_->transport->Send(to, std::move(m));
    if (st.ok()) {
      ++sent;
    } else {
      LogWarning("node {}: resending to node {}: {}", node_id(), to,
                 st.message());
    }
  }
  return sent;
}

Status RpcEndpoint::Send(NodeId to, Message msg) {
  msg.header.flags &= ~kReplyFlag;
  return state_->transport->Send(to, std::move(msg));
}

}  // namespace strata
