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
  BareZmqCluster(int servers, int workers, size_t max_bytes)
      : servers_(servers), workers_(workers) {
    block_ = MakeBlock(max_bytes / static_cast<size_t>(servers));
    for (int s = 0; s < servers; ++s) {
      auto node = std::make_unique<Server>();
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
          if (DrainMessage(node.dealers[s]) == 0) Die("bare zmq: no reply");
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
  };
  struct Worker {
    std::unique_ptr<zmq::context_t> context;
    std::vector<zmq::socket_t> dealers;
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

  // Receives one whole message; returns its frame count (0 on timeout).
  static int DrainMessage(zmq::socket_t& socket) {
    int frames = 0;
    zmq::message_t part;
    do {
      if (!socket.recv(part, zmq::recv_flags::none)) return frames;
      ++frames;
    } while (part.more());
    return frames;
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
      if (request.more()) DrainMessage(router);  // the pushed payload
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
  std::shared_ptr<uint8_t> block_;
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Server>> servers_v_;
  std::vector<std::unique_ptr<Worker>> workers_v_;
};

}  // namespace strata::bench
