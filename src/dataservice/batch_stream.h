#pragma once

// The mini-batch streaming service (paper 000; docs/design/data_service.md):
// data servers (cluster.data_servers, the "data" role) load the dataset once
// and serve mini-batches to the workers, which then load nothing.
//
// Wire protocol (both directions through RpcEndpoint request / reply):
//   kBatchRequest  worker -> data server. header.key_begin: batches wanted
//                  (0: acknowledgements only). Acknowledgements ride along:
//                  payload 0 the acknowledged sequence numbers (int64), payload
//                  1 how many losses each carries (int64; 0 or the batch size),
//                  payload 2 the losses (float32, concatenated); an
//                  optional payload 3: batches given back untrained (int64
//                  sequence numbers; a checkpoint round under dynamic
//                  assignment), served to the next worker that asks.
//   kBatchReply    header.key_begin: kBatchReady, kBatchWait or kBatchEnd;
//                  ready: header.clock = k batches (1 <= k <= wanted), each
//                  as three payloads: its header (EncodeBatchHeader), the
//                  features (float32, N x C x H x W, raw) and the labels
//                  (int64, N), sent without a copy.
//   kNodeLost      coordinator -> data server: a worker was lost; its
//                  leased batches are served to the others.
// A worker talks to data server w mod m; data server j serves the workers
// of its group and, in dynamic mode, the examples i with i mod m == j.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/rpc.h"

namespace strata {

inline constexpr uint32_t kBatchReady = 0;
inline constexpr uint32_t kBatchWait = 1;
inline constexpr uint32_t kBatchEnd = 2;

// The typed header of a served batch.
struct BatchHeader {
  int64_t epoch = 0;
  int64_t seq = 0;
  int64_t channels = 1, height = 1, width = 1;
  std::vector<int64_t> ids;  // example ids, in batch order
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  int64_t example_size() const { return channels * height * width; }
};
// Little-endian: magic "SBAT", version (u16), dtype (u16, 1 = float32),
// epoch, seq, N, C, H, W (i64 each), then N ids (i64).
Buffer EncodeBatchHeader(const BatchHeader& h);
// DataLoss naming the fault for a short, foreign or inconsistent header.
Result<BatchHeader> DecodeBatchHeader(const Buffer& b);

// A batch as the worker receives it.
struct StreamedBatch {
  BatchHeader header;
  Buffer features;  // float32, header.size() x example_size()
  Buffer labels;    // int64, header.size()
};

// The worker's side: whenever fewer than `prefetch` batches are here or on
// their way, asks for `prefetch` more in one request, so the next batch is
// there when a step ends with one request per `prefetch` steps or so;
// acknowledgements (with per-example losses when asked) ride on the next
// request. Not thread-safe: the
// worker's training thread only.
class BatchStream {
 public:
  // `cancelled` (may be null) is polled while waiting: when it returns a
  // non-empty reason (the coordinator ended the run), Next() stops waiting
  // and returns kCancelled with it.
  BatchStream(RpcEndpoint& rpc, NodeId data_server, std::string server_name,
              int prefetch, std::chrono::milliseconds timeout,
              std::function<std::string()> cancelled = nullptr);
  // The next batch; false at the end of the data. Errors name the data
  // server (lost, timed out, malformed reply).
  Result<bool> Next(StreamedBatch* out);
  // The worker trained on batch `seq`; `losses` (one per example) may be
  // empty.
  void Ack(int64_t seq, const std::vector<float>& losses);
  // Sends the acknowledgements not sent yet and waits for the reply.
  Status Flush();
  // The same, keeping the batches on their way (a checkpoint round: the
  // data server's cursor then knows every batch trained so far).
  Status SendAcks();
  // The same, and gives back the batches prefetched and not trained (those
  // on their way too, once they arrived): at a checkpoint round with
  // dynamic assignment, where a worker still short of the round's step may
  // need them (docs/design/data_service.md, "Delivery").
  Status GiveBack();
  // Seconds spent waiting in Next() for a batch that was not there yet.
  double wait_s() const { return wait_s_; }

 private:
  void Request(int64_t want);
  // Sends the acknowledgements (and the batches given back) in a request
  // for no batch, and waits for its reply.
  Status SendNow();
  // Asks for `prefetch` more batches when fewer are here or on their way.
  void Refill();
  // Waits for the oldest request's reply, in slices so that the end of the
  // run is noticed within 100 ms. Named errors: timed out, cancelled, lost.
  Result<Message> AwaitReply(const std::shared_ptr<RpcCall>& call,
                             std::chrono::steady_clock::time_point deadline);
  // A reply's batches into ready_. DataLoss naming the fault.
  Status TakeBatches(Message& reply, int64_t asked);
  // A kBatchWait reply: waits a moment (or gives up at the deadline or the
  // end of the run).
  Status WaitForLeases(std::chrono::steady_clock::time_point deadline);

  RpcEndpoint& rpc_;
  const NodeId server_;
  const std::string name_;
  const int prefetch_;
  const std::chrono::milliseconds timeout_;
  const std::function<std::string()> cancelled_;
  // Requests in flight and how many batches each asked for; batches that
  // arrived and were not taken yet.
  std::deque<std::pair<std::shared_ptr<RpcCall>, int64_t>> in_flight_;
  int64_t asked_ = 0;
  std::deque<StreamedBatch> ready_;
  std::vector<int64_t> ack_seqs_;
  std::vector<int64_t> ack_counts_;
  std::vector<float> ack_losses_;
  std::vector<int64_t> give_back_;
  bool ended_ = false;
  double wait_s_ = 0;
};

}  // namespace strata
