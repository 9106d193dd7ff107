#include "transport/zmq/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "common/fs.h"
#include "common/log.h"

namespace strata {
namespace {

constexpr size_t kZ85KeyChars = 40;
constexpr char kPublicEntry[] = "public-key";
constexpr char kSecretEntry[] = "secret-key";

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// The entries of a key file: lines `name = "value"`; '#' starts a comment
// line. kInvalidArgument naming the file and line for anything else.
Result<std::map<std::string, std::string>> ParseKeyFile(
    const std::string& path, const std::vector<std::string>& known) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::map<std::string, std::string> entries;
  std::istringstream in(text);
  std::string raw;
  for (int line = 1; std::getline(in, raw); ++line) {
    const std::string s = Trim(raw);
    if (s.empty() || s[0] == '#') continue;
    const size_t eq = s.find('=');
    const std::string name = Trim(s.substr(0, eq));
    const std::string value =
        eq == std::string::npos ? "" : Trim(s.substr(eq + 1));
    if (eq == std::string::npos || value.size() < 2 || value.front() != '"' ||
        value.back() != '"') {
      return Status::InvalidArgument(
          "{}: line {}: expected name = \"value\" (a key file written by "
          "`strata keys generate`)",
          path, line);
    }
    bool is_known = false;
    for (const std::string& k : known) is_known = is_known || k == name;
    if (!is_known) {
      return Status::InvalidArgument("{}: line {}: unknown entry '{}'", path,
                                     line, name);
    }
    if (!entries.emplace(name, value.substr(1, value.size() - 2)).second) {
      return Status::InvalidArgument("{}: line {}: '{}' given twice", path,
                                     line, name);
    }
  }
  for (const std::string& k : known) {
    if (entries.count(k) == 0) {
      return Status::InvalidArgument("{}: no {} in the file", path, k);
    }
  }
  return entries;
}

// Writes `content` to `path` with `mode`: temporary file, fsync, then rename
// (or, unless `overwrite`, link, which fails if `path` appeared meanwhile).
Status WriteKeyFile(const std::string& path, const std::string& content,
                    mode_t mode, bool overwrite) {
  std::string tmp = path + ".tmp-XXXXXX";
  const int fd = ::mkstemp(tmp.data());  // created 0600
  if (fd < 0) {
    return Status::IoError("{}: cannot write: {}", path, std::strerror(errno));
  }
  bool ok = ::fchmod(fd, mode) == 0;
  size_t done = 0;
  while (ok && done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int write_errno = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return Status::IoError("{}: cannot write: {}", path,
                           std::strerror(write_errno));
  }
  if (overwrite) {
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return Status::IoError("{}: cannot rename into place: {}", path,
                             std::strerror(err));
    }
    return Status::Ok();
  }
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  ::unlink(tmp.c_str());
  if (rc != 0 && err == EEXIST) {
    return Status::FailedPrecondition(
        "{} exists; pass --force to replace it (nodes still holding the old "
        "key are then refused)",
        path);
  }
  if (rc != 0) {
    return Status::IoError("{}: cannot create: {}", path, std::strerror(err));
  }
  return Status::Ok();
}

void WarnIfOthersMayRead(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    LogWarning(
        "{} holds the cluster's secret key but is mode {:04o}: others on this "
        "machine may read it (chmod 600 {})",
        path, st.st_mode & 07777, path);
  }
}

}  // namespace

Status CheckCurveSupport() {
  if (zmq_has("curve") == 0) {
    return Status::Unimplemented(
        "this libzmq has no CURVE support (zmq_has(\"curve\") is false: it "
        "was built without libsodium); cluster.security = \"curve\" needs a "
        "libzmq built with it, such as Debian's libzmq5");
  }
  return Status::Ok();
}

Result<CurveKeyPair> GenerateCurveKeyPair() {
  RETURN_IF_ERROR(CheckCurveSupport());
  char pub[kZ85KeyChars + 1] = {};
  char sec[kZ85KeyChars + 1] = {};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return Status::Internal("zmq_curve_keypair failed: {}",
                            zmq_strerror(zmq_errno()));
  }
  return CurveKeyPair{pub, sec};
}

Status CheckCurveKey(const std::string& key, const std::string& what) {
  if (key.size() != kZ85KeyChars) {
    return Status::InvalidArgument(
        "{}: a CURVE key is {} Z85 characters, this one has {}", what,
        kZ85KeyChars, key.size());
  }
  uint8_t binary[32];
  if (zmq_z85_decode(binary, key.c_str()) == nullptr) {
    return Status::InvalidArgument(
        "{}: not a Z85-encoded key (characters outside the Z85 alphabet)",
        what);
  }
  return Status::Ok();
}

Status CheckCurveKeyPair(const CurveKeyPair& pair, const std::string& what) {
  RETURN_IF_ERROR(CheckCurveKey(pair.public_key, what + ": public key"));
  RETURN_IF_ERROR(CheckCurveKey(pair.secret_key, what + ": secret key"));
  RETURN_IF_ERROR(CheckCurveSupport());
  char derived[kZ85KeyChars + 1] = {};
  if (zmq_curve_public(derived, pair.secret_key.c_str()) != 0) {
    return Status::InvalidArgument("{}: cannot derive the public key: {}", what,
                                   zmq_strerror(zmq_errno()));
  }
  if (pair.public_key != derived) {
    return Status::InvalidArgument(
        "{}: the public key does not belong to the secret key (the pair is "
        "from two different keys)",
        what);
  }
  return Status::Ok();
}

Status CheckCurveKeys(const CurveKeys& keys) {
  RETURN_IF_ERROR(CheckCurveKeyPair(keys.own, "this node's CURVE key pair"));
  RETURN_IF_ERROR(
      CheckCurveKey(keys.server_public_key, "the peers' CURVE server key"));
  if (keys.allowed_client_keys.empty()) {
    return Status::InvalidArgument(
        "CURVE: no client key is allowed, so no peer could connect");
  }
  for (size_t i = 0; i < keys.allowed_client_keys.size(); ++i) {
    RETURN_IF_ERROR(
        CheckCurveKey(keys.allowed_client_keys[i],
                      fmt::format("allowed CURVE client key {}", i)));
  }
  return Status::Ok();
}

Status WriteClusterKeyFiles(const std::string& dir, const CurveKeyPair& pair,
                            bool overwrite) {
  RETURN_IF_ERROR(CheckCurveKeyPair(pair, "cluster key pair"));
  const std::string key_path = JoinPath(dir, kClusterKeyFile);
  const std::string pub_path = JoinPath(dir, kClusterPublicKeyFile);
  if (!overwrite) {
    for (const std::string& p : {key_path, pub_path}) {
      if (FileExists(p)) {
        return Status::FailedPrecondition(
            "{} exists; pass --force to replace it (nodes still holding the "
            "old key are then refused)",
            p);
      }
    }
  }
  RETURN_IF_ERROR(MakeDirs(dir));
  const std::string secret = fmt::format(
      "# strata: the CURVE key pair of one cluster (strata keys generate; "
      "docs/design/security.md, Security).\n"
      "# SECRET: whoever holds this file can join the cluster. Keep it mode "
      "0600 and copy it\n"
      "# only into cluster.keys_dir on the cluster's own machines.\n"
      "{} = \"{}\"\n{} = \"{}\"\n",
      kPublicEntry, pair.public_key, kSecretEntry, pair.secret_key);
  const std::string pub = fmt::format(
      "# strata: the CURVE public key of one cluster (strata keys generate). "
      "Not secret.\n{} = \"{}\"\n",
      kPublicEntry, pair.public_key);
  RETURN_IF_ERROR(WriteKeyFile(key_path, secret, 0600, overwrite));
  return WriteKeyFile(pub_path, pub, 0644, overwrite);
}

Result<CurveKeyPair> ReadCurveKeyPairFile(const std::string& path) {
  ASSIGN_OR_RETURN(auto entries,
                   ParseKeyFile(path, {kPublicEntry, kSecretEntry}));
  CurveKeyPair pair{entries[kPublicEntry], entries[kSecretEntry]};
  RETURN_IF_ERROR(CheckCurveKeyPair(pair, path));
  WarnIfOthersMayRead(path);
  return pair;
}

Result<std::string> ReadCurvePublicKeyFile(const std::string& path) {
  ASSIGN_OR_RETURN(auto entries, ParseKeyFile(path, {kPublicEntry}));
  RETURN_IF_ERROR(CheckCurveKey(entries[kPublicEntry], path + ": public key"));
  return entries[kPublicEntry];
}

Result<std::optional<CurveKeys>> CurveKeysFromConfig(const Config& config) {
  const std::string& security = config.GetString("cluster.security");
  if (security == "none") return std::optional<CurveKeys>();
  if (security != "curve") {
    return Status::InvalidArgument(
        "cluster.security = \"{}\": want \"none\" or \"curve\"", security);
  }
  const std::string& dir = config.GetString("cluster.keys_dir");
  if (dir.empty()) {
    return Status::InvalidArgument(
        "cluster.security = \"curve\" needs cluster.keys_dir: the directory "
        "`strata keys generate DIR` wrote {} into",
        kClusterKeyFile);
  }
  RETURN_IF_ERROR(
      CheckCurveSupport().WithContext("cluster.security = \"curve\""));
  const std::string key_path = JoinPath(dir, kClusterKeyFile);
  auto pair = ReadCurveKeyPairFile(key_path);
  if (!pair.ok()) {
    if (pair.status().code() == Status::Code::kNotFound) {
      return Status::NotFound(
          "cluster.keys_dir = \"{}\": no {} there (make one with `strata keys "
          "generate {}` and copy it to every machine of the cluster)",
          dir, kClusterKeyFile, dir);
    }
    return pair.status().WithContext(
        fmt::format("cluster.keys_dir = \"{}\"", dir));
  }
  const std::string pub_path = JoinPath(dir, kClusterPublicKeyFile);
  if (FileExists(pub_path)) {
    auto pub = ReadCurvePublicKeyFile(pub_path);
    if (!pub.ok()) {
      return pub.status().WithContext(
          fmt::format("cluster.keys_dir = \"{}\"", dir));
    }
    if (*pub != pair->public_key) {
      return Status::InvalidArgument(
          "cluster.keys_dir = \"{}\": {} and {} hold different public keys "
          "(one of them is from another `strata keys generate`)",
          dir, kClusterKeyFile, kClusterPublicKeyFile);
    }
  }
  return std::optional<CurveKeys>(CurveKeys::ForCluster(*pair));
}

}  // namespace strata
