#include "dataservice/batch_stream.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/seconds.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kBatchMagic = 0x54414253;  // "SBAT" little-endian
constexpr uint16_t kBatchVersion = 1;
constexpr uint16_t kDtypeFloat32 = 1;
constexpr size_t kFixedHeader = 4 + 2 + 2 + 6 * 8;

void PutI64(std::vector<uint8_t>* out, int64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i)
    b[i] = static_cast<uint8_t>(uint64_t(v) >> (8 * i));
  out->insert(out->end(), b, b + 8);
}

int64_t GetI64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

}  // namespace

Buffer EncodeBatchHeader(const BatchHeader& h) {
  std::vector<uint8_t> out;
  out.reserve(kFixedHeader + 8 * h.ids.size());
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<uint8_t>(kBatchMagic >> (8 * i)));
  out.push_back(kBatchVersion & 0xff);
  out.push_back(kBatchVersion >> 8);
  out.push_back(kDtypeFloat32 & 0xff);
  out.push_back(kDtypeFloat32 >> 8);
  for (int64_t v : {h.epoch, h.seq, h.size(), h.channels, h.height, h.width})
    PutI64(&out, v);
  for (int64_t id : h.ids) PutI64(&out, id);
  return Buffer::FromVector(std::move(out));
}

Result<BatchHeader> DecodeBatchHeader(const Buffer& b) {
  if (b.size() < kFixedHeader) {
    return Status::DataLoss("batch header of {} bytes (at least {} expected)",
                            b.size(), kFixedHeader);
  }
  const uint8_t* p = b.data();
  const uint32_t magic = uint32_t(p[0]) | uint32_t(p[1]) << 8 |
                         uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  const uint16_t version = static_cast<uint16_t>(p[4] | p[5] << 8);
  const uint16_t dtype = static_cast<uint16_t>(p[6] | p[7] << 8);
  if (magic != kBatchMagic) return Status::DataLoss("not a batch header");
  if (version != kBatchVersion || dtype != kDtypeFloat32) {
    return Status::DataLoss(
        "batch header version {} dtype {} (this build reads version {} "
        "float32)",
        version, dtype, kBatchVersion);
  }
  BatchHeader h;
  h.epoch = GetI64(p + 8);
  h.seq = GetI64(p + 16);
  const int64_t n = GetI64(p + 24);
  h.channels = GetI64(p + 32);
  h.height = GetI64(p + 40);
  h.width = GetI64(p + 48);
  if (n < 0 || h.channels < 1 || h.height < 1 || h.width < 1 ||
      static_cast<uint64_t>(n) != (b.size() - kFixedHeader) / 8 ||
      (b.size() - kFixedHeader) % 8 != 0) {
    return Status::DataLoss("batch header: {} examples of {}x{}x{} in {} bytes",
                            n, h.channels, h.height, h.width, b.size());
  }
  h.ids.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) h.ids[i] = GetI64(p + kFixedHeader + 8 * i);
  return h;
}

BatchStream::BatchStream(RpcEndpoint& rpc, NodeId data_server,
                         std::string server_name, int prefetch,
                         std::chrono::milliseconds timeout,
                         std::function<std::string()> cancelled)
    : rpc_(rpc),
      server_(data_server),
      name_(std::move(server_name)),
      prefetch_(std::max(1, prefetch)),
      timeout_(timeout),
      cancelled_(std::move(cancelled)) {}

void BatchStream::Request(int64_t want) {
  Message m;
  m.header.type = MessageType::kBatchRequest;
  m.header.key_begin = want;
  m.header.key_end = want;
  m.payloads.push_back(Buffer::CopyOf(ack_seqs_));
  m.payloads.push_back(Buffer::CopyOf(ack_counts_));
  m.payloads.push_back(Buffer::CopyOf(ack_losses_));
  if (!give_back_.empty()) m.payloads.push_back(Buffer::CopyOf(give_back_));
  give_back_.clear();
  ack_seqs_.clear();
  ack_counts_.clear();
  ack_losses_.clear();
  in_flight_.emplace_back(rpc_.Request(server_, std::move(m)), want);
  asked_ += want;
}

void BatchStream::Refill() {
  if (!ended_ && static_cast<int64_t>(ready_.size()) + asked_ < prefetch_)
    Request(prefetch_);
}

void BatchStream::Ack(int64_t seq, const std::vector<float>& losses) {
  ack_seqs_.push_back(seq);
  ack_counts_.push_back(static_cast<int64_t>(losses.size()));
  ack_losses_.insert(ack_losses_.end(), losses.begin(), losses.end());
}

Result<Message> BatchStream::AwaitReply(const std::shared_ptr<RpcCall>& call,
                                        Clock::time_point deadline) {
  Result<Message> r = Status::DeadlineExceeded("not yet");
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    r = call->Wait(std::clamp(left, std::chrono::milliseconds(1),
                              std::chrono::milliseconds(100)));
    if (r.ok() || r.status().code() != Status::Code::kDeadlineExceeded ||
        Clock::now() >= deadline)
      break;
    if (cancelled_) {
      const std::string reason = cancelled_();
      if (!reason.empty()) {
        return Status::Cancelled("stopped waiting for a batch from {}: {}",
                                 name_, reason);
      }
    }
  }
  if (r.ok()) return r;
  if (r.status().code() == Status::Code::kDeadlineExceeded) {
    return Status::DeadlineExceeded(
        "no batch from {} in {:.1f} s (cluster.request_timeout_ms)", name_,
        timeout_.count() / 1000.0);
  }
  return r.status().WithContext(fmt::format("batch from {}", name_));
}

Status BatchStream::WaitForLeases(Clock::time_point deadline) {
  // Another worker holds the epoch's last leases: ask again shortly.
  if (Clock::now() > deadline) {
    return Status::DeadlineExceeded(
        "{} kept this worker waiting {:.1f} s for leased batches to be "
        "acknowledged or returned",
        name_, timeout_.count() / 1000.0);
  }
  if (cancelled_ && !cancelled_().empty()) {
    return Status::Cancelled("stopped waiting for a batch from {}: {}", name_,
                             cancelled_());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return Status::Ok();
}

Status BatchStream::TakeBatches(Message& r, int64_t asked) {
  const int64_t count = r.header.clock;
  if (r.header.key_begin != kBatchReady || count < 1 || count > asked ||
      r.payloads.size() != static_cast<size_t>(3 * count)) {
    return Status::DataLoss("malformed batch reply from {}", name_);
  }
  for (int64_t k = 0; k < count; ++k) {
    ASSIGN_OR_RETURN(BatchHeader h, DecodeBatchHeader(r.payloads[3 * k]));
    const uint64_t n = static_cast<uint64_t>(h.size());
    Buffer& features = r.payloads[3 * k + 1];
    Buffer& labels = r.payloads[3 * k + 2];
    if (features.size() !=
            n * static_cast<uint64_t>(h.example_size()) * sizeof(float) ||
        labels.size() != n * sizeof(int64_t)) {
      return Status::DataLoss(
          "batch {} from {}: {} feature and {} label bytes for {} examples",
          h.seq, name_, features.size(), labels.size(), n);
    }
    StreamedBatch b;
    b.header = std::move(h);
    b.features = std::move(features);
    b.labels = std::move(labels);
    ready_.push_back(std::move(b));
  }
  return Status::Ok();
}

Result<bool> BatchStream::Next(StreamedBatch* out) {
  const auto start = Clock::now();
  const auto deadline = start + timeout_;
  auto done = [&](bool got) {
    wait_s_ += Seconds(start, Clock::now());
    return got;
  };
  while (true) {
    // Keep `prefetch` batches on their way: one request for `prefetch`
    // batches whenever fewer than that are here or in flight.
    Refill();
    if (!ready_.empty()) {
      *out = std::move(ready_.front());
      ready_.pop_front();
      Refill();  // the next batches travel while this step computes
      return done(true);
    }
    if (in_flight_.empty()) return done(false);  // ended, all drained
    std::shared_ptr<RpcCall> call = in_flight_.front().first;
    const int64_t asked = in_flight_.front().second;
    ASSIGN_OR_RETURN(Message r, AwaitReply(call, deadline));
    in_flight_.pop_front();
    asked_ -= asked;
    if (r.header.key_begin == kBatchEnd) {
      ended_ = true;
      continue;  // drain the other requests: they may still hold batches
    }
    if (r.header.key_begin == kBatchWait) {
      RETURN_IF_ERROR(WaitForLeases(deadline));
      continue;
    }
    RETURN_IF_ERROR(TakeBatches(r, asked));
  }
}

Status BatchStream::SendNow() {
  Request(0);
  std::shared_ptr<RpcCall> call = in_flight_.back().first;
  in_flight_.pop_back();
  Result<Message> r = call->Wait(timeout_);
  if (!r.ok())
    return r.status().WithContext(fmt::format("acknowledging to {}", name_));
  return Status::Ok();
}

Status BatchStream::SendAcks() {
  if (ack_seqs_.empty()) return Status::Ok();
  return SendNow();
}

Status BatchStream::GiveBack() {
  // The batches on their way are leased to this worker too.
  const auto deadline = Clock::now() + timeout_;
  while (!in_flight_.empty()) {
    const auto [call, asked] = in_flight_.front();
    ASSIGN_OR_RETURN(Message r, AwaitReply(call, deadline));
    in_flight_.pop_front();
    asked_ -= asked;
    if (r.header.key_begin == kBatchEnd) ended_ = true;
    if (r.header.key_begin == kBatchReady)
      RETURN_IF_ERROR(TakeBatches(r, asked));
  }
  for (const StreamedBatch& b : ready_) give_back_.push_back(b.header.seq);
  ready_.clear();
  if (!give_back_.empty()) ended_ = false;  // they may come back here
  if (ack_seqs_.empty() && give_back_.empty()) return Status::Ok();
  return SendNow();
}

Status BatchStream::Flush() {
  // Whatever is still in flight is not needed any more.
  in_flight_.clear();
  ready_.clear();
  asked_ = 0;
  if (ack_seqs_.empty()) return Status::Ok();
  return SendNow();
}

}  // namespace strata
