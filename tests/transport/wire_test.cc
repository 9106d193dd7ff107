#include "transport/wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "transport/message.h"
#include "transport/placement.h"

namespace strata::wire {
namespace {

MessageHeader SampleHeader() {
  MessageHeader h;
  h.type = MessageType::kPush;
  h.flags = 0xA5A5;
  h.sender = 3;
  h.receiver = 7;
  h.request_id = 0x1122334455667788ull;
  h.key_begin = -5;
  h.key_end = int64_t{1} << 40;
  h.clock = 42;
  return h;
}

std::vector<uint8_t> Bytes(const Buffer& b) {
  return std::vector<uint8_t>(b.data(), b.data() + b.size());
}

Buffer Pattern(size_t size, uint8_t seed) {
  Buffer b = Buffer::Allocate(size);
  for (size_t i = 0; i < size; ++i) {
    b.data()[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 12));
  }
  return b;
}

bool SamePattern(const Buffer& b, size_t size, uint8_t seed) {
  if (b.size() != size) return false;
  for (size_t i = 0; i < size; ++i) {
    if (b.data()[i] != static_cast<uint8_t>(seed + i * 7 + (i >> 12))) {
      return false;
    }
  }
  return true;
}

Message SampleMessage(const std::vector<size_t>& sizes) {
  Message m;
  m.header = SampleHeader();
  for (size_t i = 0; i < sizes.size(); ++i) {
    m.payloads.push_back(Pattern(sizes[i], static_cast<uint8_t>(i * 13)));
  }
  return m;
}

// Deep copy of a segment list (frames are views; the fuzz test mutates
// copies, never the original payloads).
std::vector<Segment> Clone(const std::vector<Segment>& segments) {
  std::vector<Segment> out;
  for (const Segment& s : segments) {
    Segment c;
    for (const Buffer& f : s) c.push_back(Buffer::CopyOf(f.data(), f.size()));
    out.push_back(std::move(c));
  }
  return out;
}

TEST(TransportWireHeaderTest, RoundTrip) {
  const std::vector<uint64_t> sizes = {0, 1, 4096, (3u << 20) + 7};
  Buffer frame = EncodeHeader(SampleHeader(), sizes, 99);
  ASSERT_EQ(frame.size(), EncodedHeaderBytes(4));
  Result<DecodedHeader> d = DecodeHeader(frame.data(), frame.size(), {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->header, SampleHeader());
  EXPECT_EQ(d->transfer_id, 99u);
  EXPECT_EQ(d->payload_sizes, sizes);
  EXPECT_EQ(d->payload_bytes, 4096u + 1 + (3u << 20) + 7);
}

TEST(TransportWireHeaderTest, IsLittleEndianOnTheWire) {
  Buffer frame = EncodeHeader(SampleHeader(), {}, 0);
  EXPECT_EQ(std::memcmp(frame.data(), "STRM", 4), 0);
  EXPECT_EQ(frame.data()[4], kVersion);
  EXPECT_EQ(frame.data()[5], 0);
  EXPECT_EQ(frame.data()[6], static_cast<uint8_t>(MessageType::kPush));
}

// Each case corrupts one thing and expects kDataLoss whose message names it.
TEST(TransportWireHeaderTest, RejectsEachKindOfFault) {
  struct Case {
    const char* name;
    std::function<void(std::vector<uint8_t>*)> corrupt;
    const char* expect_in_message;
  };
  const std::vector<Case> cases = {
      {"truncated", [](auto* b) { b->resize(40); }, "shorter"},
      {"magic", [](auto* b) { (*b)[0] ^= 1; }, "magic"},
      {"version", [](auto* b) { (*b)[4] = 2; }, "version 2"},
      {"type zero", [](auto* b) { (*b)[6] = 0; }, "type"},
      {"type unknown", [](auto* b) { (*b)[6] = 200; }, "unknown(200)"},
      {"negative sender", [](auto* b) { (*b)[15] = 0x80; }, "sender"},
      {"too many payloads", [](auto* b) { (*b)[22] = 1; }, "payloads"},
      {"count vs length",
       [](auto* b) { (*b)[20] = 3; },  // declares 3 payloads, carries 2
       "need"},
      {"declared length", [](auto* b) { (*b)[60] ^= 8; }, "declares"},
      {"extra bytes", [](auto* b) { b->push_back(0); }, "bytes"},
      {"key range", [](auto* b) { (*b)[39] = 0x7f; }, "begin > end"},
      {"payload too big",
       [](auto* b) { (*b)[64 + 8 + 7] = 0x10; },  // payload 1 > 1 EiB
       "payload 1"},
  };
  const std::vector<uint8_t> good =
      Bytes(EncodeHeader(SampleHeader(), {8, 16}, 1));
  ASSERT_TRUE(DecodeHeader(good.data(), good.size(), {}).ok());
  for (const Case& c : cases) {
    std::vector<uint8_t> bad = good;
    c.corrupt(&bad);
    Result<DecodedHeader> d = DecodeHeader(bad.data(), bad.size(), {});
    ASSERT_FALSE(d.ok()) << c.name;
    EXPECT_EQ(d.status().code(), Status::Code::kDataLoss) << c.name;
    EXPECT_NE(d.status().message().find(c.expect_in_message), std::string::npos)
        << c.name << ": " << d.status().message();
  }
}

TEST(TransportWireHeaderTest, EnforcesLimits) {
  MessageLimits limits;
  limits.max_payloads = 2;
  limits.max_message_bytes = 100;
  Buffer three = EncodeHeader(SampleHeader(), {1, 1, 1}, 0);
  EXPECT_FALSE(DecodeHeader(three.data(), three.size(), limits).ok());
  Buffer big = EncodeHeader(SampleHeader(), {60, 41}, 0);
  EXPECT_FALSE(DecodeHeader(big.data(), big.size(), limits).ok());
  Buffer fits = EncodeHeader(SampleHeader(), {60, 40}, 0);
  EXPECT_TRUE(DecodeHeader(fits.data(), fits.size(), limits).ok());
  // Sizes that would overflow a 64-bit sum are caught term by term.
  Buffer wrap = EncodeHeader(SampleHeader(), {~uint64_t{0}, 2}, 0);
  EXPECT_FALSE(DecodeHeader(wrap.data(), wrap.size(), {}).ok());
}

TEST(TransportWireHeaderTest, AcceptsUserTypes) {
  MessageHeader h = SampleHeader();
  h.type = static_cast<MessageType>(0x1234);
  Buffer frame = EncodeHeader(h, {}, 0);
  Result<DecodedHeader> d = DecodeHeader(frame.data(), frame.size(), {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(MessageTypeName(d->header.type), "user(4660)");
}

TEST(TransportWireContinuationTest, RoundTripAndRejects) {
  Buffer c = EncodeContinuation({5, 9});
  Result<Continuation> d = DecodeContinuation(c.data(), c.size());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->transfer_id, 5u);
  EXPECT_EQ(d->segment_index, 9u);
  EXPECT_FALSE(DecodeContinuation(c.data(), c.size() - 1).ok());
  std::vector<uint8_t> bad = Bytes(c);
  bad[4] = 3;
  EXPECT_FALSE(DecodeContinuation(bad.data(), bad.size()).ok());
}

TEST(TransportWireSegmentsTest, LayoutOfSmallAndLargePayloads) {
  constexpr size_t kFrame = 1 << 20;
  std::vector<Segment> segments =
      EncodeSegments(SampleMessage({0, 1, 4096, (3u << 20) + 7}), 1, kFrame);
  // Segment 0: header, the 1-byte and 4 KiB payloads (they fit in a frame's
  // worth), then 3 MiB + 7 needs 4 frames: the first opens segment 1, ...
  ASSERT_EQ(segments.size(), 5u);
  EXPECT_EQ(segments[0].size(), 3u);
  for (size_t s = 1; s < segments.size(); ++s) {
    ASSERT_EQ(segments[s].size(), 2u);
    EXPECT_EQ(segments[s][0].size(), kContinuationBytes);
  }
  EXPECT_EQ(segments[4][1].size(), 7u);
}

TEST(TransportWireSegmentsTest, DataFramesAreViewsOfThePayload) {
  Message m = SampleMessage({1 << 16});
  const uint8_t* data = m.payloads[0].data();
  std::vector<Segment> segments = EncodeSegments(std::move(m), 1, 1 << 20);
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0][1].data(), data);
}

class TransportAssemblerRoundTripTest
    : public ::testing::TestWithParam<size_t> {};

TEST_P(TransportAssemblerRoundTripTest, DeliversEveryPayloadIntact) {
  const size_t frame_bytes = GetParam();
  const std::vector<size_t> sizes = {0, 1, 4096, (3u << 20) + 7, 0, 100000};
  MessageAssembler assembler({{}, 7, BufferPool::Create(64 << 20), {}});
  for (int round = 0; round < 3; ++round) {  // the assembler is reusable
    std::vector<Segment> segments =
        EncodeSegments(SampleMessage(sizes), round + 1, frame_bytes);
    std::optional<Message> got;
    for (size_t s = 0; s < segments.size(); ++s) {
      Status abandoned;
      auto r = assembler.Add(&segments[s], &abandoned);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_TRUE(abandoned.ok());
      if (s + 1 < segments.size()) {
        ASSERT_FALSE(r->has_value()) << "early completion at segment " << s;
        EXPECT_TRUE(assembler.in_progress());
      } else {
        ASSERT_TRUE(r->has_value());
        got = std::move(*r.value());
      }
    }
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->header, SampleHeader());
    ASSERT_EQ(got->payloads.size(), sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_TRUE(
          SamePattern(got->payloads[i], sizes[i], static_cast<uint8_t>(i * 13)))
          << "payload " << i << " frame " << frame_bytes;
    }
    EXPECT_FALSE(assembler.in_progress());
  }
}

INSTANTIATE_TEST_SUITE_P(FrameSizes, TransportAssemblerRoundTripTest,
                         ::testing::Values(size_t{1000}, size_t{64 << 10},
                                           size_t{1} << 20, size_t{16} << 20));

// Receive in place: a placed payload is written into the owner's memory
// frame by frame while the message is still arriving, and delivered as a
// view of it; the other payloads are unaffected; the lookup sees the header.
TEST(TransportAssemblerTest, PlacedPayloadIsWrittenInPlaceAsFramesArrive) {
  const std::vector<size_t> sizes = {4096, (2u << 20) + 100, 300};
  std::vector<uint8_t> dest(sizes[1], 0xEE);
  auto placement =
      std::make_shared<PayloadPlacement>(1, dest.data(), dest.size());
  MessageHeader seen;
  MessageAssembler::Options opts;
  opts.placement = [&](const MessageHeader& h) {
    seen = h;
    return placement;
  };
  MessageAssembler assembler(std::move(opts));
  std::vector<Segment> segments =
      EncodeSegments(SampleMessage(sizes), 1, 64 << 10);
  ASSERT_GT(segments.size(), 4u);
  std::optional<Message> got;
  for (size_t s = 0; s < segments.size(); ++s) {
    auto r = assembler.Add(&segments[s], nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (s == segments.size() / 2) {
      // Half way: the first bytes of payload 1 are in place already.
      EXPECT_EQ(dest[0], static_cast<uint8_t>(13));
      EXPECT_EQ(dest.back(), 0xEE);
    }
    if (r->has_value()) got = std::move(*r.value());
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(seen, SampleHeader());
  EXPECT_EQ(got->payloads[1].data(), dest.data());
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(
        SamePattern(got->payloads[i], sizes[i], static_cast<uint8_t>(i * 13)))
        << "payload " << i;
  }
}

// A pinned placement (a transport's write into it still under way, as a
// UCX rendezvous): Revoke() waits for Unpin(), up to its bound, and says
// whether the write ended; once revoked, nothing new is pinned or written.
TEST(PayloadPlacementTest, RevokeWaitsForAPinnedWriteToEnd) {
  std::vector<uint8_t> dest(16, 0);
  PayloadPlacement p(0, dest.data(), dest.size());
  const uint8_t one = 1;
  ASSERT_TRUE(p.Pin());
  EXPECT_FALSE(p.Revoke(std::chrono::milliseconds(50)));  // still pinned
  EXPECT_FALSE(p.Pin());
  EXPECT_FALSE(p.Write(0, &one, 1));
  std::atomic<bool> unpinned{false};
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    unpinned = true;
    p.Unpin();
  });
  EXPECT_TRUE(p.Revoke(std::chrono::milliseconds(30000)));
  EXPECT_TRUE(unpinned.load());
  writer.join();
  EXPECT_TRUE(p.Revoke(std::chrono::milliseconds(0)));  // idempotent
  EXPECT_EQ(dest[0], 0);
}

TEST(TransportAssemblerTest, PlacementOfTheWrongSizeIsIgnored) {
  std::vector<uint8_t> dest(1000, 0xEE);
  auto placement =
      std::make_shared<PayloadPlacement>(0, dest.data(), dest.size());
  MessageAssembler::Options opts;
  opts.placement = [&](const MessageHeader&) { return placement; };
  MessageAssembler assembler(std::move(opts));
  std::vector<Segment> segments =
      EncodeSegments(SampleMessage({200000}), 1, 64 << 10);
  std::optional<Message> got;
  for (Segment& seg : segments) {
    auto r = assembler.Add(&seg, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (r->has_value()) got = std::move(*r.value());
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(SamePattern(got->payloads[0], 200000, 0));
  EXPECT_EQ(std::count(dest.begin(), dest.end(), 0xEE), 1000);
}

// Revoked half way (its owner gave up): nothing more is written, the payload
// is delivered empty, and the next message is assembled normally.
TEST(TransportAssemblerTest, RevokedPlacementStopsWritingAndDropsThePayload) {
  const size_t size = 1 << 20;
  std::vector<uint8_t> dest(size, 0xEE);
  auto placement = std::make_shared<PayloadPlacement>(0, dest.data(), size);
  MessageAssembler::Options opts;
  bool place = true;
  opts.placement = [&](const MessageHeader&) {
    return place ? placement : nullptr;
  };
  MessageAssembler assembler(std::move(opts));
  std::vector<Segment> segments =
      EncodeSegments(SampleMessage({size, 10}), 1, 64 << 10);
  const size_t half = segments.size() / 2;
  std::optional<Message> got;
  for (size_t s = 0; s < segments.size(); ++s) {
    if (s == half) placement->Revoke();
    auto r = assembler.Add(&segments[s], nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (r->has_value()) got = std::move(*r.value());
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->payloads[0].empty());
  EXPECT_TRUE(SamePattern(got->payloads[1], 10, 13));
  EXPECT_EQ(dest[0], 0);            // written before the revocation
  EXPECT_EQ(dest[size - 1], 0xEE);  // not after
  place = false;
  segments = EncodeSegments(SampleMessage({size}), 2, 64 << 10);
  for (Segment& seg : segments) {
    auto r = assembler.Add(&seg, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (r->has_value()) got = std::move(*r.value());
  }
  EXPECT_TRUE(SamePattern(got->payloads[0], size, 0));
}

TEST(TransportAssemblerTest, AdoptsSingleFramePayloadWithoutCopy) {
  Message m = SampleMessage({1 << 20});
  const uint8_t* sent = m.payloads[0].data();
  std::vector<Segment> segments = EncodeSegments(std::move(m), 1, 1 << 20);
  MessageAssembler assembler({});
  auto r = assembler.Add(&segments[0], nullptr);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ(r.value()->payloads[0].data(), sent);
}

TEST(TransportAssemblerTest, GathersMultiFramePayloadsWithoutCopy) {
  // 3.5 MiB in 1 MiB frames: the payload arrives as a gathered buffer whose
  // pieces are the frames themselves.
  const size_t size = (7u << 19);
  Message m = SampleMessage({size});
  const uint8_t* sent = m.payloads[0].data();
  std::vector<Segment> segments = EncodeSegments(std::move(m), 1, 1 << 20);
  MessageAssembler assembler({{}, 7, BufferPool::Create(64 << 20), {}});
  std::optional<Message> got;
  for (Segment& s : segments) {
    auto r = assembler.Add(&s, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (r->has_value()) got = std::move(*r.value());
  }
  ASSERT_TRUE(got.has_value());
  const Buffer& b = got->payloads[0];
  EXPECT_TRUE(b.gathered());
  std::vector<size_t> offsets;
  b.ForEachPiece([&](size_t offset, const uint8_t* data, size_t) {
    offsets.push_back(offset);
    EXPECT_EQ(data, sent + offset);  // a view of the sent bytes
  });
  EXPECT_EQ(offsets, (std::vector<size_t>{0, 1 << 20, 2 << 20, 3 << 20}));
  EXPECT_TRUE(SamePattern(b, size, 0));
}

TEST(TransportAssemblerTest, RejectsMisroutedAndOutOfOrderSegments) {
  MessageAssembler assembler({{}, /*expected_receiver=*/8, nullptr, {}});
  std::vector<Segment> segments =
      EncodeSegments(SampleMessage({5000}), 1, 1000);  // receiver is 7
  auto r = assembler.Add(&segments[0], nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("addressed to node 7"),
            std::string::npos);

  MessageAssembler ordered({{}, 7, nullptr, {}});
  segments = EncodeSegments(SampleMessage({5000}), 1, 1000);
  ASSERT_TRUE(ordered.Add(&segments[0], nullptr).ok());
  auto skip = ordered.Add(&segments[2], nullptr);  // segment 1 went missing
  ASSERT_FALSE(skip.ok());
  EXPECT_NE(skip.status().message().find("expected segment 1"),
            std::string::npos);
  EXPECT_FALSE(ordered.in_progress());
  auto orphan = ordered.Add(&segments[3], nullptr);
  ASSERT_FALSE(orphan.ok());
  EXPECT_NE(orphan.status().message().find("no message in progress"),
            std::string::npos);
}

TEST(TransportAssemblerTest, NewHeaderAbandonsUnfinishedMessage) {
  MessageAssembler assembler({});
  std::vector<Segment> first = EncodeSegments(SampleMessage({5000}), 1, 1000);
  std::vector<Segment> second = EncodeSegments(SampleMessage({10}), 2, 1000);
  ASSERT_TRUE(assembler.Add(&first[0], nullptr).ok());
  Status abandoned;
  auto r = assembler.Add(&second[0], &abandoned);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->has_value());
  EXPECT_EQ(abandoned.code(), Status::Code::kDataLoss);
  EXPECT_NE(abandoned.message().find("1000 of 5000"), std::string::npos)
      << abandoned.message();
}

TEST(TransportAssemblerTest, RejectsOverrunsAndEmptyFrames) {
  MessageAssembler assembler({});
  std::vector<Segment> s = EncodeSegments(SampleMessage({100}), 1, 1000);
  s[0].push_back(Buffer::Allocate(1));  // one byte more than declared
  auto r = assembler.Add(&s[0], nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("follows the last"), std::string::npos);

  s = EncodeSegments(SampleMessage({100}), 1, 1000);
  s[0][1] = Buffer::Allocate(101);
  r = assembler.Add(&s[0], nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("overruns"), std::string::npos);

  s = EncodeSegments(SampleMessage({100}), 1, 1000);
  s[0].insert(s[0].begin() + 1, Buffer());
  r = assembler.Add(&s[0], nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("empty data frame"), std::string::npos);

  Segment empty;
  EXPECT_FALSE(assembler.Add(&empty, nullptr).ok());
}

// Fuzz: 10,000 random and mutated header frames. Nothing may crash (run under
// ASan/UBSan to make "crash" strict); random bytes are always rejected; a
// mutation that is accepted must decode to a header that encodes back to the
// very same bytes (the decoder accepts only canonical input).
TEST(TransportWireFuzzTest, DecodeHeaderOnRandomAndMutatedBytes) {
  std::mt19937_64 rng(20240611);
  const std::vector<uint8_t> good =
      Bytes(EncodeHeader(SampleHeader(), {8, 0, 4096}, 77));
  int random_rejected = 0, mutated_rejected = 0, mutated_accepted = 0;
  for (int i = 0; i < 10000; ++i) {
    std::vector<uint8_t> bytes;
    const bool random = i % 2 == 0;
    if (random) {
      bytes.resize(rng() % 200);
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    } else {
      bytes = good;
      const int kind = static_cast<int>(rng() % 4);
      if (kind == 0) {
        bytes.resize(rng() % bytes.size());
      } else if (kind == 1) {
        const int extra = 1 + static_cast<int>(rng() % 16);
        for (int k = 0; k < extra; ++k)
          bytes.push_back(static_cast<uint8_t>(rng()));
      } else {
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k) {
          bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
        }
      }
    }
    Result<DecodedHeader> d = DecodeHeader(bytes.data(), bytes.size(), {});
    if (!d.ok()) {
      ASSERT_EQ(d.status().code(), Status::Code::kDataLoss);
      ASSERT_FALSE(d.status().message().empty());
      (random ? random_rejected : mutated_rejected)++;
      continue;
    }
    ASSERT_FALSE(random) << "random bytes accepted at iteration " << i;
    ++mutated_accepted;
    std::vector<uint8_t> again =
        Bytes(EncodeHeader(d->header, d->payload_sizes, d->transfer_id));
    ASSERT_EQ(again, bytes) << "accepted non-canonical header at " << i;
    ASSERT_GE(d->header.sender, 0);
    ASSERT_LE(d->header.key_begin, d->header.key_end);
  }
  EXPECT_EQ(random_rejected, 5000);
  // Truncations, extensions and most flips must be caught; flips of free
  // fields (flags, ids, clock) legitimately decode.
  EXPECT_GT(mutated_rejected, 2500);
  EXPECT_GT(mutated_accepted, 0);
}

// Fuzz: streams of valid segments mangled in random ways (dropped, repeated,
// swapped, corrupted, truncated, injected frames). The assembler must never
// crash, anything it delivers must be self-consistent, and a clean message fed
// afterwards must always come through intact.
TEST(TransportWireFuzzTest, AssemblerSurvivesMangledStreams) {
  std::mt19937_64 rng(7);
  MessageAssembler assembler(
      {{}, kInvalidNodeId, BufferPool::Create(1 << 24), {}});
  const auto start = std::chrono::steady_clock::now();
  int delivered_clean = 0, errors = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    ASSERT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::seconds(10));
    std::vector<size_t> sizes(rng() % 4);
    for (size_t& s : sizes) s = rng() % 20000;
    std::vector<Segment> segments = Clone(EncodeSegments(
        SampleMessage(sizes), static_cast<uint32_t>(iter), 4096));
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations && !segments.empty(); ++m) {
      Segment& seg = segments[rng() % segments.size()];
      switch (rng() % 7) {
        case 0:  // drop a segment
          segments.erase(segments.begin() + (&seg - segments.data()));
          break;
        case 1: {  // repeat a segment
          Segment copy;
          for (const Buffer& f : seg)
            copy.push_back(Buffer::CopyOf(f.data(), f.size()));
          segments.push_back(std::move(copy));
          break;
        }
        case 2:  // swap two segments
          std::swap(seg, segments[rng() % segments.size()]);
          break;
        case 3: {  // corrupt bytes of a frame
          if (seg.empty()) break;
          Buffer& f = seg[rng() % seg.size()];
          if (f.empty()) break;
          const int flips = 1 + static_cast<int>(rng() % 8);
          for (int k = 0; k < flips; ++k) {
            // Mostly hit the first bytes, where headers live.
            const size_t limit =
                std::min<size_t>(f.size(), rng() % 2 ? 80 : f.size());
            f.data()[rng() % limit] ^= static_cast<uint8_t>(1 + rng() % 255);
          }
          break;
        }
        case 4: {  // truncate or extend a frame
          if (seg.empty()) break;
          Buffer& f = seg[rng() % seg.size()];
          const size_t n = rng() % (f.size() + 32);
          Buffer g = Buffer::Allocate(n);
          if (std::min(n, f.size()) > 0) {
            std::memcpy(g.data(), f.data(), std::min(n, f.size()));
          }
          f = std::move(g);
          break;
        }
        case 5: {  // inject a random frame
          Buffer g = Buffer::Allocate(rng() % 100);
          for (size_t k = 0; k < g.size(); ++k)
            g.data()[k] = static_cast<uint8_t>(rng());
          seg.insert(seg.begin() + rng() % (seg.size() + 1), std::move(g));
          break;
        }
        case 6:  // empty a segment
          seg.clear();
          break;
      }
    }
    for (Segment& seg : segments) {
      Status abandoned;
      auto r = assembler.Add(&seg, &abandoned);
      if (!r.ok()) {
        ASSERT_EQ(r.status().code(), Status::Code::kDataLoss);
        ++errors;
        continue;
      }
      if (r->has_value()) {
        const Message& msg = **r;
        ASSERT_TRUE(IsValidMessageType(msg.header.type));
        ASSERT_LE(msg.header.key_begin, msg.header.key_end);
        ASSERT_LE(msg.payloads.size(), MessageLimits{}.max_payloads);
      }
    }
    // Recovery: a clean message always gets through, whatever came before.
    std::vector<Segment> clean =
        EncodeSegments(SampleMessage({3000, 9000}), 1u << 31, 4096);
    std::optional<Message> got;
    for (Segment& seg : clean) {
      auto r = assembler.Add(&seg, nullptr);
      ASSERT_TRUE(r.ok()) << "iteration " << iter << ": "
                          << r.status().ToString();
      if (r->has_value()) got = std::move(*r.value());
    }
    ASSERT_TRUE(got.has_value()) << "iteration " << iter;
    ASSERT_TRUE(SamePattern(got->payloads[0], 3000, 0));
    ASSERT_TRUE(SamePattern(got->payloads[1], 9000, 13));
    ++delivered_clean;
  }
  EXPECT_EQ(delivered_clean, 2000);
  EXPECT_GT(errors, 1000);
}

}  // namespace
}  // namespace strata::wire
