#pragma once

// A second baseline for ps_bench: plain ZeroMQ (cppzmq) request/reply moving
// the same bytes, without strata's layers (no wire header, validation,
// reassembly, RPC bookkeeping, server optimizer or copy into a model). It
// shows how much of the gap between ours and raw TCP sockets is ZeroMQ's own
// cost on this machine and how much is ours.
//
// Layout as in ours: one context (1 I/O thread) per node; each server a
// ROUTER served by one thread; each worker one DEALER per server, driven by
// the worker's thread, which sends to every server and then collects every
// reply. Payloads go as frames of at most 1 MiB (ours does the same), sent
// without a copy. A push is a request frame + the payload frames, answered
// by an 8-byte ack; a pull is a request frame answered by the payload frames,
// which the worker receives and drops (raw likewise receives into a buffer
// and does nothing with it).
//
// With `work` (the "zmq+work" column), bare ZeroMQ also does the work on the
// bytes that ours does, so that ours / zmq+work is the cost of our layers
// alone: a server keeps float parameters and, once a push's frames are all
// in, applies plain SGD (p -= lr * g) frame by frame, as ParameterServer
// does in asynchronous mode; a worker copies each pulled frame into a
// destination as it arrives, as ours receives a pull in place.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "bench_common.h"

namespace strata::bench {

class BareZmqCluster {
 public:
  BareZmqCluster(int servers, int workers, size_t max_bytes, bool work = false)
      : servers_(servers), workers_(workers), work_(work) {
    const size_t share = max_bytes / static_cast<size_t>(servers);
    block_ = MakeBlock(share);
    // The gradient ours pushes (ps_bench: 1e-3 everywhere). MakeBlock's
    // 0x01 bytes read as 2.4e-38, whose product with the learning rate is
    // subnormal: the SGD pass then took 10x as long on some CPUs.
    std::fill_n(reinterpret_cast<float*>(block_.get()), share / sizeof(float),
                1e-3f);
    for (int s = 0; s < servers; ++s) {
      auto node = std::make_unique<Server>();
      if (work) node->params.assign(share / sizeof(float), 0.5f);
      node->context = std::make_unique<zmq::context_t>(1);
      node->router = std::make_unique<zmq::socket_t>(*node->context,
                                                     zmq::socket_type::router);
      node->router->set(zmq::sockopt::linger, 0);
      node->router->set(zmq::sockopt::rcvtimeo, 200);
      node->router->bind("tcp://127.0.0.1:*");
      node->endpoint = node->router->get(zmq::sockopt::last_endpoint);
      servers_v_.push_back(std::move(node));
    }
    for (int w = 0; w < workers; ++w) {
      auto node = std::make_unique<Worker>();
      if (work) node->dest.assign(max_bytes, 0);
      node->context = std::make_unique<zmq::context_t>(1);
      for (int s = 0; s < servers; ++s) {
        node->dealers.emplace_back(*node->context, zmq::socket_type::dealer);
        node->dealers.back().set(zmq::sockopt::linger, 0);
        node->dealers.back().connect(servers_v_[s]->endpoint);
      }
      workers_v_.push_back(std::move(node));
    }
    for (auto& s : servers_v_) {
      s->thread = std::thread([this, node = s.get()] { Serve(*node); });
    }
  }

  ~BareZmqCluster() {
    stop_.store(true);
    for (auto& s : servers_v_) s->thread.join();
    for (auto& w : workers_v_) w->dealers.clear();
    for (auto& s : servers_v_) s->router.reset();
  }

  // Seconds for `ops` operations of `bytes` per worker, all workers at once.
  double Run(Op op, size_t bytes, int ops) {
    const size_t share = bytes / static_cast<size_t>(servers_);
    return TimeParallel(workers_, [&](int w) {
      Worker& node = *workers_v_[w];
      for (int k = 0; k < ops; ++k) {
        for (int s = 0; s < servers_; ++s) {
          zmq::socket_t& d = node.dealers[s];
          const uint64_t req[2] = {op == Op::kPush ? 0u : 1u, share};
          const bool more = op == Op::kPush && share > 0;
          d.send(zmq::buffer(req, sizeof(req)),
                 more ? zmq::send_flags::sndmore : zmq::send_flags::none);
          if (op == Op::kPush) SendFrames(d, share);
        }
        for (int s = 0; s < servers_; ++s) {
          uint8_t* dest =
              work_ && op == Op::kPull
                  ? node.dest.data() + static_cast<size_t>(s) * share
                  : nullptr;
          if (DrainMessage(node.dealers[s], dest) == 0) {
            Die("bare zmq: no reply");
          }
        }
      }
    });
  }

 private:
  struct Server {
    std::unique_ptr<zmq::context_t> context;
    std::unique_ptr<zmq::socket_t> router;
    std::string endpoint;
    std::thread thread;
    std::vector<float> params;  // with work: the server's range
  };
  struct Worker {
    std::unique_ptr<zmq::context_t> context;
    std::vector<zmq::socket_t> dealers;
    std::vector<uint8_t> dest;  // with work: where pulls are copied
  };

  static void NoFree(void*, void*) {}

  // Sends `bytes` of the shared block as frames of at most 1 MiB, the last
  // one ending the message; zero copy.
  void SendFrames(zmq::socket_t& socket, size_t bytes) {
    for (size_t off = 0; off < bytes; off += kMiB) {
      const size_t n = std::min(kMiB, bytes - off);
      zmq::message_t part(block_.get() + off, n, &NoFree, nullptr);
      socket.send(part, off + n < bytes ? zmq::send_flags::sndmore
                                        : zmq::send_flags::none);
    }
  }

  // Receives one whole message, copying each frame after the previous one
  // into `dest` if it is not null; returns its frame count (0 on timeout).
  static int DrainMessage(zmq::socket_t& socket, uint8_t* dest = nullptr) {
    int frames = 0;
    zmq::message_t part;
    do {
      if (!socket.recv(part, zmq::recv_flags::none)) return frames;
      if (dest != nullptr) {
        std::memcpy(dest, part.data(), part.size());
        dest += part.size();
      }
      ++frames;
    } while (part.more());
    return frames;
  }

  // Receives a push's payload frames, then applies them to `params` as one
  // SGD step.
  static void ApplyPush(zmq::socket_t& socket, std::vector<float>& params) {
    std::vector<zmq::message_t> frames;
    do {
      frames.emplace_back();
      if (!socket.recv(frames.back(), zmq::recv_flags::none)) {
        Die("bare zmq: recv");
      }
    } while (frames.back().more());
    constexpr float kLr = 1e-3f;
    float* p = params.data();
    for (const zmq::message_t& f : frames) {
      const float* g = static_cast<const float*>(f.data());
      const size_t n = f.size() / sizeof(float);
      for (size_t i = 0; i < n; ++i) p[i] -= kLr * g[i];
      p += n;
    }
  }

  void Serve(Server& node) {
    zmq::socket_t& router = *node.router;
    router.set(zmq::sockopt::rcvtimeo, 200);
    while (!stop_.load()) {
      zmq::message_t id;
      if (!router.recv(id, zmq::recv_flags::none)) continue;  // timeout
      zmq::message_t request;
      if (!router.recv(request, zmq::recv_flags::none)) Die("bare zmq: recv");
      uint64_t req[2] = {0, 0};
      std::memcpy(req, request.data(), std::min(sizeof(req), request.size()));
      if (request.more()) {  // the pushed payload
        if (work_) {
          ApplyPush(router, node.params);
        } else {
          DrainMessage(router);
        }
      }
      router.send(id, zmq::send_flags::sndmore);
      if (req[0] == 0) {
        const uint64_t ack = 1;
        router.send(zmq::buffer(&ack, sizeof(ack)), zmq::send_flags::none);
      } else {
        SendFrames(router, req[1]);
      }
    }
  }

  const int servers_;
  const int workers_;
  const bool work_;
  std::shared_ptr<uint8_t> block_;
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Server>> servers_v_;
  std::vector<std::unique_ptr<Worker>> workers_v_;
};

}  // namespace strata::bench
