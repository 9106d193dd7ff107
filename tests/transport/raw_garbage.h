#pragma once

// Raw TCP garbage for a transport's listening port (the ZeroMQ and UCX
// garbage tests): `rounds` connections to 127.0.0.1 at the port of
// `endpoint` (scheme://HOST:PORT), each writing 64 KiB of random bytes and
// closing. With `zmtp_start`, the first round's first byte is 0xFF, as a
// ZMTP greeting starts.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace strata::test_garbage {

inline ::testing::AssertionResult SendRawTcpGarbage(const std::string& endpoint,
                                                    uint32_t seed, int rounds,
                                                    bool zmtp_start = false) {
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  std::mt19937 rng(seed);
  for (int round = 0; round < rounds; ++round) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return ::testing::AssertionFailure() << "socket()";
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      return ::testing::AssertionFailure() << "connect to port " << port;
    }
    std::vector<uint8_t> junk(1 << 16);
    for (uint8_t& b : junk) b = static_cast<uint8_t>(rng());
    if (round == 0 && zmtp_start) junk[0] = 0xFF;
    (void)!::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    ::close(fd);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace strata::test_garbage
