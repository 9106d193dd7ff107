// The ceiling a UCX data plane could reach on this machine (issue 13, part
// 2): UCX active messages (UCP, Debian's libucx-dev) moving the bytes of a
// parameter-server push and pull, 1 worker + 1 server on two threads of one
// process, against the raw blocking TCP sockets of ps_bench (the same
// request/reply pattern), alternating, in the same run. Nothing of strata's
// stack is in either column: this measures whether UCX itself is worth a
// transport here, before one is built.
//
//   push: the worker sends N bytes (one active message); the server acks
//         with 8 bytes.
//   pull: the worker sends a 16-byte request; the server answers with N
//         bytes, received into a preallocated buffer.
//
// Endpoints connect through a UCX listener on 127.0.0.1 (client-server
// mode), as nodes on separate machines would. UCX picks its transports
// (shared memory, CMA, TCP) from the environment: run with UCX_TLS=tcp,
// UCX_TLS=sm,tcp, UCX_RNDV_SCHEME=get_zcopy, ... to compare them.
//
//   build/bench/ucx_bench [--sizes=1M,16M,64M] [--reps=5]
#include <arpa/inet.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"

namespace strata {
namespace {

using namespace bench;  // NOLINT: the shared bench vocabulary

constexpr unsigned kData = 1;     // active message id: N bytes
constexpr unsigned kRequest = 2;  // active message id: a pull request
constexpr unsigned kAck = 3;      // active message id: a push's ack
constexpr double kWaitSeconds = 60;

void CheckUcs(ucs_status_t s, const char* what) {
  if (s != UCS_OK) {
    std::fprintf(stderr, "ucx_bench: %s: %s\n", what, ucs_status_string(s));
    std::exit(1);
  }
}

// One side: a UCP worker progressed by one thread, its endpoint to the
// other side, counters of what arrived, and the buffer data lands in.
struct Side {
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  std::atomic<long> data{0};      // kData messages fully received
  std::atomic<long> requests{0};  // kRequest messages
  std::atomic<long> acks{0};      // kAck messages
  std::vector<uint8_t> landing;
};

void DataLanded(void* request, ucs_status_t status, size_t, void* user) {
  CheckUcs(status, "receiving a rendezvous message");
  static_cast<Side*>(user)->data++;
  ucp_request_free(request);
}

ucs_status_t OnData(void* arg, const void*, size_t, void* data, size_t length,
                    const ucp_am_recv_param_t* param) {
  Side* side = static_cast<Side*>(arg);
  if (side->landing.size() < length) side->landing.resize(length);
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = DataLanded;
    p.user_data = side;
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(side->worker, data,
                                              side->landing.data(), length, &p);
    if (UCS_PTR_IS_ERR(r)) CheckUcs(UCS_PTR_STATUS(r), "ucp_am_recv_data_nbx");
    if (r == nullptr) side->data++;
    return UCS_OK;
  }
  std::memcpy(side->landing.data(), data, length);
  side->data++;
  return UCS_OK;
}

ucs_status_t OnRequest(void* arg, const void*, size_t, void*, size_t,
                       const ucp_am_recv_param_t*) {
  static_cast<Side*>(arg)->requests++;
  return UCS_OK;
}

ucs_status_t OnAck(void* arg, const void*, size_t, void*, size_t,
                   const ucp_am_recv_param_t*) {
  static_cast<Side*>(arg)->acks++;
  return UCS_OK;
}

void SetHandler(Side& side, unsigned id, ucp_am_recv_callback_t cb) {
  ucp_am_handler_param_t h{};
  h.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                 UCP_AM_HANDLER_PARAM_FIELD_ARG |
                 UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  h.id = id;
  h.cb = cb;
  h.arg = &side;
  h.flags = UCP_AM_FLAG_WHOLE_MSG;
  CheckUcs(ucp_worker_set_am_recv_handler(side.worker, &h), "AM handler");
}

// Progresses `side` until `done()` or the deadline (then exits, naming
// what it waited for).
template <typename Done>
void ProgressUntil(Side& side, Done done, const char* what) {
  const auto deadline =
      Clock::now() + std::chrono::duration<double>(kWaitSeconds);
  while (!done()) {
    ucp_worker_progress(side.worker);
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "ucx_bench: no %s within %.0f s\n", what,
                   kWaitSeconds);
      std::exit(1);
    }
  }
}

void Send(Side& side, unsigned id, const void* data, size_t n) {
  ucp_request_param_t p{};
  ucs_status_ptr_t r = ucp_am_send_nbx(side.ep, id, nullptr, 0, data, n, &p);
  if (UCS_PTR_IS_ERR(r)) CheckUcs(UCS_PTR_STATUS(r), "ucp_am_send_nbx");
  if (r == nullptr) return;
  ProgressUntil(
      side, [&] { return ucp_request_check_status(r) != UCS_INPROGRESS; },
      "send completion");
  CheckUcs(ucp_request_check_status(r), "send");
  ucp_request_free(r);
}

class UcxPair {
 public:
  explicit UcxPair(size_t max_bytes) : payload_(max_bytes, 1) {
    ucp_config_t* config = nullptr;
    CheckUcs(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    CheckUcs(ucp_init(&params, config, &context_), "ucp_init");
    ucp_config_release(config);
    for (Side* s : {&server_, &worker_}) {
      ucp_worker_params_t wp{};
      wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
      wp.thread_mode = UCS_THREAD_MODE_SINGLE;
      CheckUcs(ucp_worker_create(context_, &wp, &s->worker), "worker");
      SetHandler(*s, kData, OnData);
      SetHandler(*s, kRequest, OnRequest);
      SetHandler(*s, kAck, OnAck);
      s->landing.resize(max_bytes);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                    UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<sockaddr*>(&addr);
    lp.sockaddr.addrlen = sizeof(addr);
    lp.conn_handler.cb = [](ucp_conn_request_h request, void* arg) {
      Side* server = static_cast<Side*>(arg);
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
      ep.conn_request = request;
      CheckUcs(ucp_ep_create(server->worker, &ep, &server->ep), "server ep");
    };
    lp.conn_handler.arg = &server_;
    CheckUcs(ucp_listener_create(server_.worker, &lp, &listener_), "listener");
    ucp_listener_attr_t la{};
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    CheckUcs(ucp_listener_query(listener_, &la), "listener query");
    addr.sin_port = reinterpret_cast<sockaddr_in*>(&la.sockaddr)->sin_port;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<sockaddr*>(&addr);
    ep.sockaddr.addrlen = sizeof(addr);
    CheckUcs(ucp_ep_create(worker_.worker, &ep, &worker_.ep), "worker ep");
    server_thread_ = std::thread([this] { Serve(); });
  }

  ~UcxPair() {
    stop_ = true;
    server_thread_.join();
    for (Side* s : {&worker_, &server_}) {
      if (s->ep != nullptr) {
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_EP_CLOSE_FLAG_FORCE;  // no flush: both sides are done
        ucs_status_ptr_t r = ucp_ep_close_nbx(s->ep, &p);
        if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
          for (int i = 0;
               i < 100000 && ucp_request_check_status(r) == UCS_INPROGRESS;
               ++i) {
            ucp_worker_progress(worker_.worker);
            ucp_worker_progress(server_.worker);
          }
          ucp_request_free(r);
        }
      }
    }
    ucp_listener_destroy(listener_);
    ucp_worker_destroy(worker_.worker);
    ucp_worker_destroy(server_.worker);
    ucp_cleanup(context_);
  }

  // Seconds for `ops` operations of `bytes`.
  double Run(Op op, size_t bytes, int ops) {
    bytes_ = bytes;
    const auto start = Clock::now();
    for (int k = 0; k < ops; ++k) {
      if (op == Op::kPush) {
        const long want = worker_.acks + 1;
        Send(worker_, kData, payload_.data(), bytes);
        ProgressUntil(
            worker_, [&] { return worker_.acks >= want; }, "ack");
      } else {
        const long want = worker_.data + 1;
        const uint8_t request[16] = {};
        Send(worker_, kRequest, request, sizeof(request));
        ProgressUntil(
            worker_, [&] { return worker_.data >= want; }, "pull reply");
      }
    }
    return Seconds(start, Clock::now());
  }

 private:
  // The server thread: acks every push, answers every pull request.
  void Serve() {
    long data = 0, requests = 0;
    const uint64_t ack = 0;
    while (!stop_) {
      ucp_worker_progress(server_.worker);
      if (server_.data > data) {
        ++data;
        Send(server_, kAck, &ack, sizeof(ack));
      }
      if (server_.requests > requests) {
        ++requests;
        Send(server_, kData, payload_.data(), bytes_);
      }
    }
  }

  std::vector<uint8_t> payload_;
  ucp_context_h context_ = nullptr;
  ucp_listener_h listener_ = nullptr;
  Side server_, worker_;
  std::atomic<size_t> bytes_{0};
  std::atomic<bool> stop_{false};
  std::thread server_thread_;
};

size_t ParseSize(const std::string& s) {
  const char unit = s.empty() ? 0 : s.back();
  const size_t n = std::strtoull(s.c_str(), nullptr, 10);
  return unit == 'K' ? n * kKiB : unit == 'M' ? n * kMiB : n;
}

int Main(int argc, char** argv) {
  std::vector<size_t> sizes = {kMiB, 16 * kMiB, 64 * kMiB};
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (auto v = FlagValue(arg, "sizes")) {
      sizes.clear();
      for (const std::string& s : SplitCommas(*v))
        sizes.push_back(ParseSize(s));
    } else if (auto r = FlagValue(arg, "reps")) {
      reps = std::atoi(r->c_str());
    } else {
      std::fprintf(stderr,
                   "usage: ucx_bench [--sizes=1M,16M,64M] [--reps=N]\n");
      return 2;
    }
  }
  size_t max_bytes = 0;
  for (size_t s : sizes) max_bytes = std::max(max_bytes, s);
  const char* tls = std::getenv("UCX_TLS");
  std::printf(
      "UCX active messages vs raw TCP, 1 worker + 1 server, UCX_TLS=%s\n",
      tls != nullptr ? tls : "(default: all)");
  std::printf("%-5s %-7s %12s %12s %8s\n", "op", "size", "ucx MB/s", "raw MB/s",
              "ucx/raw");
  UcxPair ucx(max_bytes);
  RawCluster raw(1, 1, max_bytes, RawCluster::Threads::kPerNode);
  for (Op op : {Op::kPush, Op::kPull}) {
    for (size_t bytes : sizes) {
      const int ops = static_cast<int>(std::max<size_t>(4, 256 * kMiB / bytes));
      ucx.Run(op, bytes, 2);  // warm up (registration caches, connections)
      raw.Run(op, bytes, 2);
      std::vector<double> u, r, ratio;
      for (int k = 0; k < reps; ++k) {
        const double a =
            bytes * static_cast<double>(ops) / ucx.Run(op, bytes, ops) / 1e6;
        const double b =
            bytes * static_cast<double>(ops) / raw.Run(op, bytes, ops) / 1e6;
        u.push_back(a);
        r.push_back(b);
        ratio.push_back(a / b);
      }
      std::printf("%-5s %-7s %12.0f %12.0f %8.2f\n", OpName(op),
                  SizeName(bytes).c_str(), Median(u), Median(r), Median(ratio));
    }
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
