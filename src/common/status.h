#pragma once

#include <fmt/format.h>

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace strata {

// Errors are values. A Status is either OK or carries a code and a message
// that says what went wrong and where (file, key, node...). Cheap to copy.
// Thread-compatible (no shared state).
class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,
    kNotFound,
    kDataLoss,  // corrupt or truncated input
    kIoError,
    kDeadlineExceeded,
    kUnavailable,  // a peer is gone
    kFailedPrecondition,
    kCancelled,
    kInternal,
    kUnimplemented,
  };

  Status() = default;
  Status(Code code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  template <typename... A>
  static Status InvalidArgument(fmt::format_string<A...> f, A&&... a) {
    return Status(Code::kInvalidArgument,
                  fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  static Status NotFound(fmt::format_string<A...> f, A&&... a) {
    return Status(Code::kNotFound, fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  static Status DataLoss(fmt::format_string<A...> f, A&&... a) {
    return Status(Code::kDataLoss, fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  static Status IoError(fmt::format_string<A...> f, A&&... a) {
    return Status(Code::kIoError, fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  static Status DeadlineExceeded(fmt::format_string<A...> f, A&&... a) {
    return Status(Code::kDeadlineExceeded,
                  fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  static Status Unavailable(fmt::format_string<A...> f, A&&... a) {
    return Status(Code::kUnavailable, fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  static Status FailedPrecondition(fmt::format_string<A...> f, A&&... a) {
    return Status(Code::kFailedPrecondition,
                  fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  static Status Cancelled(fmt::format_string<A...> f, A&&... a) {
    return Status(Code::kCancelled, fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  static Status Internal(fmt::format_string<A...> f, A&&... a) {
    return Status(Code::kInternal, fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  static Status Unimplemented(fmt::format_string<A...> f, A&&... a) {
    return Status(Code::kUnimplemented, fmt::format(f, std::forward<A>(a)...));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(const std::string& context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

const char* CodeName(Status::Code code);

// Either a value or a non-OK Status.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "Result built from an OK status has no value");
    if (status_.ok()) status_ = Status::Internal("Result from OK status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace strata

#define STRATA_CONCAT_INNER(a, b) a##b
#define STRATA_CONCAT(a, b) STRATA_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)      \
  do {                             \
    ::strata::Status _st = (expr); \
    if (!_st.ok()) return _st;     \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(STRATA_CONCAT(_res_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(res, lhs, expr) \
  auto res = (expr);                          \
  if (!res.ok()) return res.status();         \
  lhs = std::move(res).value()

// For broken invariants only (programming errors), never for run-time input.
#define STRATA_CHECK(cond)                                                   \
  do {                                                                       \
    if (!(cond)) ::strata::internal::CheckFailed(#cond, __FILE__, __LINE__); \
  } while (0)

namespace strata::internal {
[[noreturn]] void CheckFailed(const char* cond, const char* file, int line);
}  // namespace strata::internal
