// CurveZMQ: key files (curve_keys.h) and ZeroMQ transports with
// ZmqOptions::curve. Nodes holding the cluster key pair talk; a node with a
// key that is not allowed, with another cluster's keys, or with no keys at
// all (a plain transport or a raw ZeroMQ socket sending well-formed strata
// messages) delivers nothing, and the curve node logs and counts the
// refusal. Every negative case has a control showing the same traffic
// arrives where it should. Network tests use 127.0.0.1 only.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/config.h"
#include "common/fs.h"
#include "transport/curve_test_util.h"
#include "transport/wire.h"
#include "transport/zmq/curve_keys.h"
#include "transport/zmq/transport.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kWait{5000};

std::string TempDir() {
  const char* root = std::getenv("STRATA_TEST_TMP");
  std::string base = root != nullptr ? root : "/tmp";
  EXPECT_TRUE(MakeDirs(base).ok());
  std::string d = base + "/curve_test_XXXXXX";
  EXPECT_NE(::mkdtemp(d.data()), nullptr);
  return d;
}

CurveKeyPair NewPair() {
  auto pair = GenerateCurveKeyPair();
  EXPECT_TRUE(pair.ok()) << pair.status().ToString();
  return *pair;
}

int Mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<int>(st.st_mode & 0777);
}

// ---------------------------------------------------------------- key files

TEST(CurveKeysTest, GeneratedPairsAreWellFormedAndDistinct) {
  const CurveKeyPair a = NewPair(), b = NewPair();
  EXPECT_EQ(a.public_key.size(), 40u);
  EXPECT_EQ(a.secret_key.size(), 40u);
  EXPECT_TRUE(CheckCurveKeyPair(a, "a").ok());
  EXPECT_NE(a.public_key, b.public_key);
  EXPECT_NE(a.secret_key, b.secret_key);
  // Halves of two pairs do not make a pair.
  Status mixed = CheckCurveKeyPair({a.public_key, b.secret_key}, "mixed");
  EXPECT_EQ(mixed.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(mixed.message().find("does not belong"), std::string::npos)
      << mixed.message();
}

TEST(CurveKeysTest, KeyFilesRoundTripAndTheSecretFileIsMode0600) {
  const std::string dir = TempDir() + "/keys";  // created by the write
  const CurveKeyPair pair = NewPair();
  // Even with a permissive umask the secret is readable by its owner only.
  const mode_t old_umask = ::umask(0);
  Status written = WriteClusterKeyFiles(dir, pair, /*overwrite=*/false);
  ::umask(old_umask);
  ASSERT_TRUE(written.ok()) << written.ToString();
  const std::string key_path = JoinPath(dir, kClusterKeyFile);
  const std::string pub_path = JoinPath(dir, kClusterPublicKeyFile);
  EXPECT_EQ(Mode(key_path), 0600);
  EXPECT_EQ(Mode(pub_path), 0644);

  auto read = ReadCurveKeyPairFile(key_path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->public_key, pair.public_key);
  EXPECT_EQ(read->secret_key, pair.secret_key);
  auto pub = ReadCurvePublicKeyFile(pub_path);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  EXPECT_EQ(*pub, pair.public_key);
  // The public file holds no secret.
  EXPECT_EQ(ReadFile(pub_path)->find(pair.secret_key), std::string::npos);
}

TEST(CurveKeysTest, ExistingFilesAreKeptUnlessOverwriting) {
  const std::string dir = TempDir();
  const CurveKeyPair first = NewPair(), second = NewPair();
  ASSERT_TRUE(WriteClusterKeyFiles(dir, first, false).ok());
  Status again = WriteClusterKeyFiles(dir, second, false);
  EXPECT_EQ(again.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(again.message().find(kClusterKeyFile), std::string::npos)
      << again.message();
  EXPECT_NE(again.message().find("--force"), std::string::npos);
  EXPECT_EQ(ReadCurveKeyPairFile(JoinPath(dir, kClusterKeyFile))->secret_key,
            first.secret_key);
  EXPECT_EQ(*ReadCurvePublicKeyFile(JoinPath(dir, kClusterPublicKeyFile)),
            first.public_key);

  ASSERT_TRUE(WriteClusterKeyFiles(dir, second, /*overwrite=*/true).ok());
  EXPECT_EQ(ReadCurveKeyPairFile(JoinPath(dir, kClusterKeyFile))->secret_key,
            second.secret_key);
  EXPECT_EQ(Mode(JoinPath(dir, kClusterKeyFile)), 0600);

  // A lone cluster.pub also stops a write without --force.
  const std::string other = TempDir();
  ASSERT_TRUE(
      WriteFileAtomic(JoinPath(other, kClusterPublicKeyFile), "x\n").ok());
  Status lone = WriteClusterKeyFiles(other, first, false);
  EXPECT_EQ(lone.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(lone.message().find(kClusterPublicKeyFile), std::string::npos);
  EXPECT_FALSE(FileExists(JoinPath(other, kClusterKeyFile)));
}

TEST(CurveKeysTest, MissingOrGarbledFilesAreRefusedNamingTheFileAndFault) {
  const std::string dir = TempDir();
  const std::string missing = JoinPath(dir, "nope.key");
  auto none = ReadCurveKeyPairFile(missing);
  EXPECT_EQ(none.status().code(), Status::Code::kNotFound);
  EXPECT_NE(none.status().message().find(missing), std::string::npos);

  const CurveKeyPair a = NewPair(), b = NewPair();
  auto file = [](const std::string& pub, const std::string& sec) {
    return "public-key = \"" + pub + "\"\nsecret-key = \"" + sec + "\"\n";
  };
  struct Case {
    std::string content;
    std::string fault;  // expected in the message
  };
  const std::vector<Case> cases = {
      {file("abc", a.secret_key), "40 Z85 characters"},
      {file(std::string(40, '~'), a.secret_key), "Z85 alphabet"},
      {file(b.public_key, a.secret_key), "does not belong"},
      {"public-key = \"" + a.public_key + "\"\n", "no secret-key"},
      {"# comment\nthis is not a key file\n", "line 2"},
      {file(a.public_key, a.secret_key) + "secret-key = \"x\"\n", "twice"},
      {file(a.public_key, a.secret_key) + "colour = \"blue\"\n",
       "unknown entry 'colour'"},
      {"", "no public-key"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = JoinPath(dir, "bad" + std::to_string(i) + ".key");
    ASSERT_TRUE(WriteFileAtomic(path, cases[i].content).ok());
    auto r = ReadCurveKeyPairFile(path);
    ASSERT_FALSE(r.ok()) << "case " << i << " was accepted";
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << i;
    EXPECT_NE(r.status().message().find(path), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(cases[i].fault), std::string::npos)
        << "case " << i << ": " << r.status().message();
  }
  // The well-formed control is accepted.
  const std::string good = JoinPath(dir, "good.key");
  ASSERT_TRUE(WriteFileAtomic(good, file(a.public_key, a.secret_key)).ok());
  EXPECT_TRUE(ReadCurveKeyPairFile(good).ok());
}

TEST(CurveKeysTest, TheConfigNamesWhatIsMissing) {
  Config config;
  auto none = CurveKeysFromConfig(config);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());  // the default: plain TCP

  ASSERT_TRUE(config.ApplyOverride("cluster.security=curve").ok());
  auto no_dir = CurveKeysFromConfig(config);
  EXPECT_EQ(no_dir.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(no_dir.status().message().find("cluster.keys_dir"),
            std::string::npos)
      << no_dir.status().message();

  const std::string dir = TempDir();
  ASSERT_TRUE(config.ApplyOverride("cluster.keys_dir=" + dir).ok());
  auto empty_dir = CurveKeysFromConfig(config);
  EXPECT_EQ(empty_dir.status().code(), Status::Code::kNotFound);
  EXPECT_NE(empty_dir.status().message().find("cluster.key"),
            std::string::npos);
  EXPECT_NE(empty_dir.status().message().find(dir), std::string::npos);

  const CurveKeyPair pair = NewPair();
  ASSERT_TRUE(WriteClusterKeyFiles(dir, pair, false).ok());
  auto keys = CurveKeysFromConfig(config);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ASSERT_TRUE(keys->has_value());
  EXPECT_EQ((*keys)->own.secret_key, pair.secret_key);
  EXPECT_EQ((*keys)->server_public_key, pair.public_key);
  EXPECT_EQ((*keys)->allowed_client_keys,
            std::vector<std::string>{pair.public_key});

  // A cluster.pub from another generate is caught.
  const CurveKeyPair other = NewPair();
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, kClusterPublicKeyFile),
                              "public-key = \"" + other.public_key + "\"\n")
                  .ok());
  auto mismatch = CurveKeysFromConfig(config);
  EXPECT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("different public keys"),
            std::string::npos)
      << mismatch.status().message();
}

// ---------------------------------------------------------------- transport

Message Tagged(uint64_t request_id, size_t bytes = 64) {
  Message m;
  m.header.type = MessageType::kPush;
  m.header.request_id = request_id;
  Buffer b = Buffer::Allocate(bytes);
  for (size_t i = 0; i < bytes; ++i) b.data()[i] = static_cast<uint8_t>(i * 7);
  m.payloads.push_back(std::move(b));
  return m;
}

// Receives on `t` until `until` holds or `limit` passes; returns the
// request ids of what arrived.
std::vector<uint64_t> ReceiveUntil(
    Transport& t,
    const std::function<bool(const std::vector<uint64_t>&)>& until,
    milliseconds limit) {
  std::vector<uint64_t> ids;
  const auto deadline = Clock::now() + limit;
  while (!until(ids) && Clock::now() < deadline) {
    Result<Message> got = t.Recv(milliseconds(50));
    if (got.ok()) ids.push_back(got->header.request_id);
  }
  return ids;
}

// A raw ZeroMQ DEALER, with no keys, sends one well-formed strata message
// the way a ZmqTransport would.
void SendRawWellFormed(zmq::socket_t& socket, Message msg) {
  for (wire::Segment& segment :
       wire::EncodeSegments(std::move(msg), /*transfer=*/1, 1 << 20)) {
    for (size_t i = 0; i < segment.size(); ++i) {
      auto sent = socket.send(zmq::buffer(segment[i].data(), segment[i].size()),
                              i + 1 < segment.size() ? zmq::send_flags::sndmore
                                                     : zmq::send_flags::none);
      ASSERT_TRUE(sent.has_value());
    }
  }
}

TEST(ZmqCurveTest, NodesWithTheClusterKeysExchangeMessages) {
  const CurveKeys keys = CurveKeys::ForCluster(NewPair());
  auto a = curve_test::TcpNode(1, keys);
  auto b = curve_test::TcpNode(2, keys);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Connect(2, b->endpoint()).ok());
  ASSERT_TRUE(b->Connect(1, a->endpoint()).ok());
  // Small and multi-frame (3 MiB) messages, both ways.
  ASSERT_TRUE(a->Send(2, Tagged(11)).ok());
  ASSERT_TRUE(a->Send(2, Tagged(12, 3 << 20)).ok());
  ASSERT_TRUE(b->Send(1, Tagged(21)).ok());
  for (uint64_t want : {11, 12}) {
    Result<Message> got = b->Recv(kWait);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->header.request_id, want);
    EXPECT_EQ(got->header.sender, 1);
    const Buffer& payload = got->payloads[0];
    const Message sent = Tagged(want, want == 12 ? 3 << 20 : 64);
    ASSERT_EQ(payload.size(), sent.payloads[0].size());
    EXPECT_EQ(
        std::memcmp(payload.data(), sent.payloads[0].data(), payload.size()),
        0);
  }
  Result<Message> back = a->Recv(kWait);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->header.request_id, 21u);
  EXPECT_EQ(a->stats().connections_refused, 0u);
  EXPECT_EQ(b->stats().connections_refused, 0u);
}

TEST(ZmqCurveTest, AClientKeyNotAllowedDeliversNothingAndIsLoggedOnce) {
  const CurveKeyPair cluster = NewPair();
  auto server = curve_test::TcpNode(2, CurveKeys::ForCluster(cluster));
  auto member = curve_test::TcpNode(1, CurveKeys::ForCluster(cluster));
  // The intruder knows the cluster's public key (it is not secret) but not
  // its secret: it presents a key pair of its own.
  const CurveKeyPair intruder_pair = NewPair();
  auto intruder = curve_test::TcpNode(
      3,
      CurveKeys{intruder_pair, cluster.public_key, {intruder_pair.public_key}});
  ASSERT_TRUE(server && member && intruder);

  testing::internal::CaptureStderr();
  // Three tries, each on a fresh connection (a refused ZeroMQ client does
  // not retry by itself), each with messages queued behind the handshake.
  std::vector<uint64_t> got;
  for (uint64_t attempt = 1; attempt <= 3; ++attempt) {
    ASSERT_TRUE(intruder->Connect(2, server->endpoint()).ok());
    ASSERT_TRUE(intruder->Send(2, Tagged(30 + attempt)).ok());  // queued
    std::vector<uint64_t> ids = ReceiveUntil(
        *server,
        [&](const std::vector<uint64_t>&) {
          return server->stats().connections_refused >= attempt;
        },
        kWait);
    got.insert(got.end(), ids.begin(), ids.end());
    ASSERT_TRUE(intruder->Disconnect(2).ok());
  }
  // Control: a member with the cluster's keys gets through the same server.
  ASSERT_TRUE(member->Connect(2, server->endpoint()).ok());
  ASSERT_TRUE(member->Send(2, Tagged(1)).ok());
  std::vector<uint64_t> more = ReceiveUntil(
      *server,
      [](const std::vector<uint64_t>& ids) {
        return std::find(ids.begin(), ids.end(), 1u) != ids.end();
      },
      kWait);
  got.insert(got.end(), more.begin(), more.end());
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(got, std::vector<uint64_t>{1}) << "only the member's message";
  EXPECT_GE(server->stats().connections_refused, 3u);
  EXPECT_EQ(server->stats().messages_received, 1u);
  // Logged with the peer's address and key, once for all the retries.
  EXPECT_EQ(curve_test::Count(log, intruder_pair.public_key), 1u) << log;
  EXPECT_NE(log.find("refused a CURVE client from 127.0.0.1"),
            std::string::npos)
      << log;
}

TEST(ZmqCurveTest, AnotherClustersKeysDeliverNothing) {
  const CurveKeyPair cluster = NewPair();
  auto server = curve_test::TcpNode(2, CurveKeys::ForCluster(cluster));
  // A node of another cluster: its server key is not this server's.
  auto stranger = curve_test::TcpNode(3, CurveKeys::ForCluster(NewPair()));
  ASSERT_TRUE(server && stranger);
  testing::internal::CaptureStderr();
  ASSERT_TRUE(stranger->Connect(2, server->endpoint()).ok());
  ASSERT_TRUE(stranger->Send(2, Tagged(41)).ok());
  std::vector<uint64_t> got = ReceiveUntil(
      *server,
      [&](const std::vector<uint64_t>&) {
        return server->stats().connections_refused >= 1;
      },
      kWait);
  auto late = ReceiveUntil(
      *server, [](const std::vector<uint64_t>&) { return false; },
      milliseconds(300));
  got.insert(got.end(), late.begin(), late.end());
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(got.empty());
  EXPECT_GE(server->stats().connections_refused, 1u);
  EXPECT_NE(log.find("another cluster's keys"), std::string::npos) << log;
}

TEST(ZmqCurveTest, PeersWithoutKeysAreRefusedByZeroMQ) {
  const CurveKeys keys = CurveKeys::ForCluster(NewPair());
  auto server = curve_test::TcpNode(2, keys);
  auto plain_server =
      curve_test::TcpNode(4, std::nullopt);  // control: no CURVE
  auto plain =
      curve_test::TcpNode(3, std::nullopt);  // a strata node without keys
  ASSERT_TRUE(server && plain_server && plain);

  zmq::context_t ctx(1);
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(server->endpoint());
  zmq::socket_t raw_control(ctx, zmq::socket_type::dealer);
  raw_control.set(zmq::sockopt::linger, 0);
  raw_control.connect(plain_server->endpoint());

  auto push_to = [](NodeId receiver) {
    Message push;
    push.header.type = MessageType::kPush;
    push.header.sender = 1;
    push.header.receiver = receiver;
    push.header.request_id = 51;
    push.payloads.push_back(Buffer::CopyOf("gradient", 8));
    return push;
  };
  Message push = push_to(2);
  Message control = push_to(4);

  testing::internal::CaptureStderr();
  SendRawWellFormed(raw, std::move(push));
  SendRawWellFormed(raw_control, std::move(control));
  ASSERT_TRUE(plain->Connect(2, server->endpoint()).ok());
  ASSERT_TRUE(plain->Send(2, Tagged(52)).ok());

  // The control shows the raw message is well formed: a node without CURVE
  // delivers it.
  Result<Message> delivered = plain_server->Recv(kWait);
  ASSERT_TRUE(delivered.ok()) << delivered.status().ToString();
  EXPECT_EQ(delivered->header.request_id, 51u);

  std::vector<uint64_t> got = ReceiveUntil(
      *server,
      [&](const std::vector<uint64_t>&) {
        return server->stats().connections_refused >= 2;
      },
      kWait);
  auto late = ReceiveUntil(
      *server, [](const std::vector<uint64_t>&) { return false; },
      milliseconds(300));
  got.insert(got.end(), late.begin(), late.end());
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(got.empty()) << got.size() << " message(s) got through";
  EXPECT_EQ(server->stats().messages_dropped, 0u);  // never even read
  EXPECT_GE(server->stats().connections_refused, 2u);
  // Why depends on who noticed the mismatch first: this side ("has no
  // CURVE keys") or the peer, which hung up ("broke off").
  EXPECT_NE(log.find("node 2: refused a connection at " + server->endpoint()),
            std::string::npos)
      << log;
}

TEST(ZmqCurveTest, TransportsSharingAContextKeepTheirOwnAllowedKeys) {
  // One ZeroMQ context, so one ZAP handler, for every node here: each CURVE
  // node is asked about its own allowed keys (its ZAP domain), and plain
  // nodes in the same context are not affected.
  auto ctx = ZmqContext::Create(1);
  ASSERT_TRUE(ctx.ok());
  const CurveKeyPair a = NewPair(), b = NewPair();
  auto node_a = curve_test::TcpNode(1, CurveKeys::ForCluster(a), *ctx);
  auto node_b = curve_test::TcpNode(2, CurveKeys::ForCluster(b), *ctx);
  // Holds key A and calls both servers by their own public keys.
  auto to_a = curve_test::TcpNode(3, CurveKeys::ForCluster(a), *ctx);
  auto to_b =
      curve_test::TcpNode(4, CurveKeys{a, b.public_key, {a.public_key}}, *ctx);
  auto plain_rx = curve_test::TcpNode(5, std::nullopt, *ctx);
  auto plain_tx = curve_test::TcpNode(6, std::nullopt, *ctx);
  ASSERT_TRUE(node_a && node_b && to_a && to_b && plain_rx && plain_tx);

  testing::internal::CaptureStderr();
  ASSERT_TRUE(to_a->Connect(1, node_a->endpoint()).ok());
  ASSERT_TRUE(to_b->Connect(2, node_b->endpoint()).ok());
  ASSERT_TRUE(plain_tx->Connect(5, plain_rx->endpoint()).ok());
  ASSERT_TRUE(to_a->Send(1, Tagged(61)).ok());
  ASSERT_TRUE(to_b->Send(2, Tagged(62)).ok());
  ASSERT_TRUE(plain_tx->Send(5, Tagged(63)).ok());

  Result<Message> at_a = node_a->Recv(kWait);
  ASSERT_TRUE(at_a.ok()) << at_a.status().ToString();
  EXPECT_EQ(at_a->header.request_id, 61u);
  Result<Message> at_plain = plain_rx->Recv(kWait);
  ASSERT_TRUE(at_plain.ok()) << at_plain.status().ToString();
  EXPECT_EQ(at_plain->header.request_id, 63u);
  std::vector<uint64_t> at_b = ReceiveUntil(
      *node_b,
      [&](const std::vector<uint64_t>&) {
        return node_b->stats().connections_refused >= 1;
      },
      kWait);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(at_b.empty());
  EXPECT_GE(node_b->stats().connections_refused, 1u);
  EXPECT_EQ(node_a->stats().connections_refused, 0u);
  EXPECT_NE(log.find("node 2: refused a CURVE client"), std::string::npos)
      << log;
  EXPECT_NE(log.find(a.public_key), std::string::npos) << log;
}

TEST(ZmqCurveTest, MalformedKeysAreRefusedAtCreation) {
  const CurveKeyPair pair = NewPair();
  struct Case {
    CurveKeys keys;
    std::string fault;
  };
  CurveKeys short_secret = CurveKeys::ForCluster(pair);
  short_secret.own.secret_key = "tooshort";
  CurveKeys bad_server = CurveKeys::ForCluster(pair);
  bad_server.server_public_key = std::string(40, '~');
  CurveKeys nobody = CurveKeys::ForCluster(pair);
  nobody.allowed_client_keys.clear();
  CurveKeys mixed = CurveKeys::ForCluster(pair);
  mixed.own.public_key = NewPair().public_key;
  for (const Case& c :
       {Case{short_secret, "secret key"}, Case{bad_server, "server key"},
        Case{nobody, "no client key"}, Case{mixed, "does not belong"}}) {
    ZmqOptions options;
    options.curve = c.keys;
    auto t = NewZmqTransport(1, options);
    ASSERT_FALSE(t.ok()) << c.fault;
    EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.fault), std::string::npos)
        << t.status().message();
  }
}

}  // namespace
}  // namespace strata
