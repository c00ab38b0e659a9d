// Status and Result<T>: how tightpipe reports what the outside world can cause (files, flags,
// shards, peers, time-outs). A Status is a small canonical code plus a message that carries the
// path, flag or offset, expected vs actual, and a "hint:" where one exists. Callers add context
// with `with_context()`; nobody logs and returns. Broken invariants use TP_CHECK (check.h).
//
// Value types, freely copyable; not synchronized (treat like an int).
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "tightpipe/check.h"

namespace tightpipe {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // a flag, config value or input the user can fix
  kNotFound,            // a file, schedule name or key that does not exist
  kIOError,             // the operating system refused a read or write
  kCorruption,          // a file or message whose bytes do not parse
  kFailedPrecondition,  // the input is well-formed but cannot be used in this state (deadlock...)
  kDeadlineExceeded,    // a wait ran past its time-out
  kUnavailable,         // a peer died or closed
  kInternal,            // a bug surfaced as an error where aborting would lose more
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status invalid_argument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status io_error(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status failed_precondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status deadline_exceeded(std::string m) {
    return {StatusCode::kDeadlineExceeded, std::move(m)};
  }
  static Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>" or "OK".
  std::string to_string() const;
  // Same code, message prefixed with "<context>: ".
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }

// Result<T>: a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    TP_CHECK(!std::get<Status>(v_).ok(), "Result constructed from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // REQUIRES: ok().
  T& value() & {
    TP_CHECK(ok(), "value() of a failed Result: ", std::get<Status>(v_).to_string());
    return std::get<T>(v_);
  }
  const T& value() const& {
    TP_CHECK(ok(), "value() of a failed Result: ", std::get<Status>(v_).to_string());
    return std::get<T>(v_);
  }
  T&& value() && {
    TP_CHECK(ok(), "value() of a failed Result: ", std::get<Status>(v_).to_string());
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tightpipe

#define TP_CONCAT_INNER_(a, b) a##b
#define TP_CONCAT_(a, b) TP_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define TP_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::tightpipe::Status tp_status_ = (expr); \
    if (!tp_status_.ok()) return tp_status_; \
  } while (0)

// TP_ASSIGN_OR_RETURN(auto x, make_x()); returns the Status on failure.
#define TP_ASSIGN_OR_RETURN(lhs, expr) \
  TP_ASSIGN_OR_RETURN_IMPL_(TP_CONCAT_(tp_result_, __LINE__), lhs, expr)
#define TP_ASSIGN_OR_RETURN_IMPL_(res, lhs, expr) \
  auto res = (expr);                              \
  if (!res.ok()) return res.status();             \
  lhs = std::move(res).value()
