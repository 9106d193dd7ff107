// All-reduce bus bandwidth of strata's collective layer (Gloo over TCP, as
// the allreduce, ring and local-sgd modes use it) with n processes on
// loopback, against raw TCP point-to-point between two processes measured
// in the same run, and against a ceiling: a bare ring all-reduce (reduce-
// scatter + all-gather) on raw sockets, the same traffic pattern with no
// library at all. On a machine with few cores, loopback bandwidth is the
// CPU's memcpy: a point-to-point transfer has both cores to itself, an
// all-reduce's n concurrent transfers (and its additions) share them. busbw =
// size / time x 2 (n - 1) / n (the nccl-tests definition: what each link
// carries in a bandwidth-optimal all-reduce), so busbw / raw says how close the
// collective gets to what the wire between two processes can do. Usage:
// allreduce_bench [--reps R] [--sizes 1,16,64] (MiB) [--procs 2,4]. Prints one
// row per (n, size); medians over R.
#include <fcntl.h>
#include <gloo/rendezvous/file_store.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "bench_common.h"
#include "collective/collective.h"

namespace strata::bench {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

// Raw TCP between two processes: the parent sends `bytes` R times, the
// child reads each message whole and answers one byte. Returns the median
// bytes/s of one message.
double RawPointToPoint(size_t bytes, int reps) {
  sockaddr_in addr{};
  const int listener = LoopbackListener(&addr);
  const socklen_t len = sizeof(addr);
  const pid_t child = ::fork();
  if (child == 0) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) ::_exit(2);
    NoDelay(fd);
    std::vector<uint8_t> buf(bytes);
    for (int r = 0; r < reps + 1; ++r) {
      if (!ReadAll(fd, buf.data(), bytes)) ::_exit(3);
      const uint8_t ack = 1;
      WriteAll(fd, &ack, 1);
    }
    ::_exit(0);
  }
  int fd = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  if (fd < 0) Die("raw accept");
  NoDelay(fd);
  std::vector<uint8_t> buf(bytes, 7);
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {  // the first is a warm-up
    const auto t0 = Clock::now();
    WriteAll(fd, buf.data(), bytes);
    uint8_t ack;
    if (!ReadAll(fd, &ack, 1)) Die("raw ack");
    if (r > 0) rates.push_back(bytes / Seconds(t0, Clock::now()));
  }
  ::close(fd);
  int status = 0;
  ::waitpid(child, &status, 0);
  return Median(rates);
}

// Runs `body(rank)` in n forked processes; rank 0's result comes back
// through a pipe. A process that fails exits non-zero (body calls _exit),
// and then the bench dies saying so.
template <typename Body>
double ForkRanks(int n, Body body) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) Die("pipe");
  std::vector<pid_t> children;
  for (int rank = 0; rank < n; ++rank) {
    const pid_t pid = ::fork();
    if (pid != 0) {
      children.push_back(pid);
      continue;
    }
    const double result = body(rank);
    if (rank == 0 &&
        ::write(pipefd[1], &result, sizeof(result)) != sizeof(result))
      ::_exit(9);
    ::_exit(0);
  }
  ::close(pipefd[1]);
  double result = 0;
  bool ok = ::read(pipefd[0], &result, sizeof(result)) ==
            static_cast<ssize_t>(sizeof(result));
  ::close(pipefd[0]);
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok) Die("a benchmark process failed");
  return result;
}

void SetNonBlocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// One ring step: sends `out` to the next member while receiving `in` from
// the previous one (both non-blocking, one poll loop).
bool Exchange(int next, const uint8_t* out, size_t out_n, int prev, uint8_t* in,
              size_t in_n) {
  size_t sent = 0, got = 0;
  while (sent < out_n || got < in_n) {
    pollfd fds[2] = {{next, POLLOUT, 0}, {prev, POLLIN, 0}};
    const int nfds = ::poll(fds, 2, 10000);
    if (nfds <= 0) return false;
    if (sent < out_n && (fds[0].revents & POLLOUT)) {
      const ssize_t k = ::send(next, out + sent, out_n - sent, MSG_NOSIGNAL);
      if (k > 0)
        sent += static_cast<size_t>(k);
      else if (k < 0 && errno != EAGAIN && errno != EINTR)
        return false;
    }
    if (got < in_n && (fds[1].revents & (POLLIN | POLLHUP))) {
      const ssize_t k = ::recv(prev, in + got, in_n - got, 0);
      if (k > 0)
        got += static_cast<size_t>(k);
      else if (k == 0 || (errno != EAGAIN && errno != EINTR))
        return false;
    }
  }
  return true;
}

// The ceiling: n processes in a ring of raw TCP sockets, the bandwidth-
// optimal ring all-reduce (n - 1 reduce-scatter steps, n - 1 all-gather
// steps, each moving 1/n of the buffer). Median seconds per all-reduce.
double RawRingSeconds(int n, size_t bytes, int reps) {
  std::vector<int> listeners(n);
  std::vector<sockaddr_in> addrs(n);
  for (int r = 0; r < n; ++r) listeners[r] = LoopbackListener(&addrs[r]);
  const double seconds = ForkRanks(n, [&](int rank) -> double {
    const int next = ::socket(AF_INET, SOCK_STREAM, 0);
    const sockaddr_in& to = addrs[(rank + 1) % n];
    if (::connect(next, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) !=
        0)
      ::_exit(2);
    const int prev = ::accept(listeners[rank], nullptr, nullptr);
    if (prev < 0) ::_exit(3);
    NoDelay(next);
    NoDelay(prev);
    SetNonBlocking(next);
    SetNonBlocking(prev);
    const size_t count = bytes / sizeof(float);
    std::vector<float> data(count, 1.0f + rank), scratch(count / n + 1);
    auto chunk_begin = [&](int c) { return count * c / n; };
    auto chunk_size = [&](int c) {
      return chunk_begin(c + 1) - chunk_begin(c);
    };
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {
      // A token around the ring lines the members up before timing.
      uint8_t token = 0;
      if (!Exchange(next, &token, 1, prev, &token, 1)) ::_exit(4);
      const auto t0 = Clock::now();
      for (int s = 0; s < n - 1; ++s) {
        const int send_c = ((rank - s) % n + n) % n;
        const int recv_c = ((rank - s - 1) % n + n) % n;
        if (!Exchange(
                next,
                reinterpret_cast<const uint8_t*>(&data[chunk_begin(send_c)]),
                chunk_size(send_c) * sizeof(float), prev,
                reinterpret_cast<uint8_t*>(scratch.data()),
                chunk_size(recv_c) * sizeof(float)))
          ::_exit(5);
        float* dst = &data[chunk_begin(recv_c)];
        for (size_t i = 0; i < chunk_size(recv_c); ++i) dst[i] += scratch[i];
      }
      for (int s = 0; s < n - 1; ++s) {
        const int send_c = ((rank + 1 - s) % n + n) % n;
        const int recv_c = ((rank - s) % n + n) % n;
        if (!Exchange(
                next,
                reinterpret_cast<const uint8_t*>(&data[chunk_begin(send_c)]),
                chunk_size(send_c) * sizeof(float), prev,
                reinterpret_cast<uint8_t*>(&data[chunk_begin(recv_c)]),
                chunk_size(recv_c) * sizeof(float)))
          ::_exit(6);
      }
      if (r > 0) times.push_back(Seconds(t0, Clock::now()));
    }
    return Median(times);
  });
  for (int fd : listeners) ::close(fd);
  return seconds;
}

// n processes all-reduce `bytes` of floats R times through strata's
// Collective; rank 0 writes the median seconds per all-reduce into `out`.
double AllReduceSeconds(int n, size_t bytes, int reps) {
  const std::string dir =
      std::filesystem::temp_directory_path() /
      ("strata_allreduce_bench_" + std::to_string(::getpid()) + "_" +
       std::to_string(n) + "_" + std::to_string(bytes));
  std::filesystem::create_directories(dir);
  const double seconds = ForkRanks(n, [&](int rank) -> double {
    gloo::rendezvous::FileStore store(dir);
    CollectiveOptions o;
    o.rank = rank;
    o.size = n;
    o.timeout = std::chrono::milliseconds(60000);
    auto group = Collective::Connect(o, store);
    if (!group.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank,
                   group.status().ToString().c_str());
      ::_exit(2);
    }
    std::vector<float> data(bytes / sizeof(float), 1.0f + rank);
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {
      if (!(*group)->Barrier().ok()) ::_exit(3);
      const auto t0 = Clock::now();
      if (!(*group)->AllReduceSum(data.data(), data.size()).ok()) ::_exit(4);
      if (r > 0) times.push_back(Seconds(t0, Clock::now()));
    }
    // Every element is the sum of 1 + rank over the ranks, reps + 1 times
    // compounded; check one element is finite and grew.
    if (!(data[0] > 1.0f)) ::_exit(5);
    return Median(times);
  });
  std::filesystem::remove_all(dir);
  return seconds;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using namespace strata::bench;
  int reps = 7;
  std::vector<int> sizes = {1, 16, 64};
  std::vector<int> procs = {2, 4};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--reps")
      reps = std::atoi(argv[i + 1]);
    else if (flag == "--sizes")
      sizes = ParseList(argv[i + 1]);
    else if (flag == "--procs")
      procs = ParseList(argv[i + 1]);
    else
      Die("unknown flag " + flag + " (--reps, --sizes, --procs)");
  }
  std::printf(
      "all-reduce bus bandwidth (Gloo through strata's Collective), n "
      "processes on loopback, vs raw TCP point-to-point between 2 processes; "
      "median of %d\n",
      reps);
  std::printf("%4s %8s %10s %11s %10s %12s %9s %12s\n", "n", "size", "time_ms",
              "busbw_GB/s", "raw_GB/s", "ring_GB/s", "vs_raw", "vs_raw_ring");
  for (int mib : sizes) {
    const size_t bytes = static_cast<size_t>(mib) * kMiB;
    for (int n : procs) {
      // Raw and collective alternate per row, so both see the same machine.
      const double raw = RawPointToPoint(bytes, reps);
      const double t = AllReduceSeconds(n, bytes, reps);
      const double ring_t = RawRingSeconds(n, bytes, reps);
      const double busbw = bytes / t * 2.0 * (n - 1) / n;
      const double ring_busbw = bytes / ring_t * 2.0 * (n - 1) / n;
      std::printf("%4d %8s %10.2f %11.2f %10.2f %12.2f %9.2f %12.2f\n", n,
                  SizeName(bytes).c_str(), t * 1e3, busbw / 1e9, raw / 1e9,
                  ring_busbw / 1e9, busbw / raw, busbw / ring_busbw);
      std::fflush(stdout);
    }
  }
  return 0;
}
