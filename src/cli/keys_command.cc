#include "cli/keys_command.h"

#include <cstdio>
#include <memory>
#include <string>

#include "common/fs.h"
#include "common/log.h"
#include "transport/zmq/curve_keys.h"

namespace strata {

void AddKeysCommand(CLI::App& app, int* exit_code) {
  CLI::App* keys = app.add_subcommand(
      "keys", "CurveZMQ keys for cluster.security = \"curve\"");
  keys->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  CLI::App* generate = keys->add_subcommand(
      "generate",
      "Make the cluster's key pair: DIR/cluster.key (public and secret key, "
      "mode 0600; copy it to every machine's cluster.keys_dir) and "
      "DIR/cluster.pub (the public key). One key pair serves the whole "
      "cluster.");
  generate->add_option("dir", *dir, "directory to write the files into")
      ->required();
  generate->add_flag("--force", *force,
                     "replace existing key files (nodes that keep the old "
                     "key are refused from then on)");
  generate->callback([=]() {
    auto pair = GenerateCurveKeyPair();
    Status st =
        pair.ok() ? WriteClusterKeyFiles(*dir, *pair, *force) : pair.status();
    if (!st.ok()) {
      LogError("{}", st.message());
      *exit_code = 1;
      return;
    }
    std::printf(
        "%s: the cluster's key pair (secret, mode 0600): copy it into "
        "cluster.keys_dir on every machine of the cluster\n"
        "%s: its public key %s\n"
        "run with: --set cluster.security=curve --set cluster.keys_dir=%s\n",
        JoinPath(*dir, kClusterKeyFile).c_str(),
        JoinPath(*dir, kClusterPublicKeyFile).c_str(), pair->public_key.c_str(),
        dir->c_str());
    *exit_code = 0;
  });
}

}  // namespace strata
