#pragma once

// CurveZMQ keys: Curve25519 key pairs in ZeroMQ's Z85 text form (40
// characters per key), the key files `strata keys generate` writes, and the
// keys a ZeroMQ transport runs with (ZmqOptions::curve). No LibTorch. Every
// function is thread-safe (no shared state).

#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"

namespace strata {

// A public key and the secret key it belongs to, Z85-encoded.
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};

// What a ZeroMQ transport needs for CURVE: its ROUTER is a CURVE server with
// `own`, every DEALER it opens is a CURVE client presenting `own` to a peer
// whose server key is `server_public_key`, and the ZAP handler admits only
// clients whose public key is in `allowed_client_keys`.
//
// Design: strata uses one key pair for the whole cluster (ForCluster): every
// node is server and client with it, so the server key of every peer is the
// cluster public key and the only admitted client key is that same key. A
// CURVE client proves it holds the secret of the key it presents, so a peer
// admitted this way holds the cluster secret. Per-node keys would need the
// coordinator to hand out every node's public key with the cluster map (and a
// server key per route); not built.
struct CurveKeys {
  CurveKeyPair own;
  std::string server_public_key;
  std::vector<std::string> allowed_client_keys;

  static CurveKeys ForCluster(const CurveKeyPair& cluster) {
    return CurveKeys{cluster, cluster.public_key, {cluster.public_key}};
  }
};

// OK when this process's libzmq can do CURVE (zmq_has("curve"));
// kUnimplemented, saying so, when it was built without it.
Status CheckCurveSupport();

// A fresh key pair from libzmq's random source. kUnimplemented without
// CURVE support, kInternal if libzmq fails.
Result<CurveKeyPair> GenerateCurveKeyPair();

// OK when `key` is a Z85-encoded 32-byte key (40 characters of the Z85
// alphabet); kInvalidArgument naming `what` and the fault otherwise.
Status CheckCurveKey(const std::string& key, const std::string& what);

// OK when both keys are well formed and the public key is the one that
// belongs to the secret key; kInvalidArgument naming `what` otherwise.
Status CheckCurveKeyPair(const CurveKeyPair& pair, const std::string& what);

// Checks every key of `keys` (CheckCurveKey, CheckCurveKeyPair, at least one
// allowed client key); kInvalidArgument naming the faulty key.
Status CheckCurveKeys(const CurveKeys& keys);

// The files of one cluster key pair, in the directory given to `strata keys
// generate` (cluster.keys_dir).
inline constexpr char kClusterKeyFile[] = "cluster.key";  // both keys, 0600
inline constexpr char kClusterPublicKeyFile[] = "cluster.pub";  // public only

// Writes <dir>/cluster.key (the public and the secret key, mode 0600) and
// <dir>/cluster.pub (the public key, mode 0644), creating `dir`. Each file is
// written whole or not at all (temporary file, fsync, rename). Unless
// `overwrite`, kFailedPrecondition naming the file when either exists
// (nothing is written then). kInvalidArgument for a malformed pair, kIoError
// naming the file that could not be written.
Status WriteClusterKeyFiles(const std::string& dir, const CurveKeyPair& pair,
                            bool overwrite);

// Reads a key file with a public and a secret key (cluster.key). kNotFound
// when it is missing; kInvalidArgument naming the file (and the line) when it
// is garbled: an unknown or repeated entry, a key that is not 40 Z85
// characters, a missing key, or a public key that does not belong to the
// secret key. Logs a warning when others than its owner may read the file.
Result<CurveKeyPair> ReadCurveKeyPairFile(const std::string& path);

// Reads a public key file (cluster.pub): as above, with the public key only.
Result<std::string> ReadCurvePublicKeyFile(const std::string& path);

// The run's security from the config: nullopt for cluster.security = "none";
// for "curve", CurveKeys::ForCluster with the key pair in
// <cluster.keys_dir>/cluster.key (and, when present, a cluster.pub that must
// hold the same public key). Errors name the config key or the file and what
// is wrong: cluster.keys_dir empty, a file missing or garbled, no CURVE in
// libzmq.
Result<std::optional<CurveKeys>> CurveKeysFromConfig(const Config& config);

}  // namespace strata
