#include "common/status.h"

#include <cstdio>
#include <cstdlib>

namespace strata {

const char* CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kInvalidArgument:
      return "InvalidArgument";
    case Status::Code::kNotFound:
      return "NotFound";
    case Status::Code::kDataLoss:
      return "DataLoss";
    case Status::Code::kIoError:
      return "IoError";
    case Status::Code::kDeadlineExceeded:
      return "DeadlineExceeded";
    case Status::Code::kUnavailable:
      return "Unavailable";
    case Status::Code::kFailedPrecondition:
      return "FailedPrecondition";
    case Status::Code::kCancelled:
      return "Cancelled";
    case Status::Code::kInternal:
      return "Internal";
    case Status::Code::kUnimplemented:
      return "Unimplemented";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

namespace internal {
void CheckFailed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "strata: invariant broken at %s:%d: %s\n", file, line,
               cond);
  std::abort();
}
}  // namespace internal

}  // namespace strata
