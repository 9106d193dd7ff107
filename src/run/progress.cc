#include "run/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "common/log.h"

namespace strata {

Progress::Progress(std::string what, int64_t total, bool terminal,
                   double log_interval_s)
    : what_(std::move(what)),
      total_(total),
      terminal_(terminal),
      log_interval_s_(log_interval_s),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

bool Progress::StderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

std::string Progress::Line(int64_t done, double loss, double accuracy) const {
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
          .count();
  double rate = elapsed > 0 ? done / elapsed : 0;
  double eta = rate > 0 ? (total_ - done) / rate : 0;
  return fmt::format(
      "{} {}/{} ({:.0f}%)  {:.1f} steps/s  loss {:.4f}  acc {:.3f}  ETA "
      "{:.0f}s",
      what_, done, total_, total_ > 0 ? 100.0 * done / total_ : 0.0, rate, loss,
      accuracy, eta);
}

void Progress::Update(int64_t done, double loss, double accuracy) {
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_print_).count();
  if (terminal_) {
    if (since < 0.25 && done < total_) return;
    std::string line = Line(done, loss, accuracy);
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    live_line_open_ = true;
  } else {
    if (since < log_interval_s_) return;
    LogInfo("{}", Line(done, loss, accuracy));
  }
  last_print_ = now;
}

void Progress::Finish() {
  if (live_line_open_) {
    std::fputc('\n', stderr);
    live_line_open_ = false;
  }
}

}  // namespace strata
