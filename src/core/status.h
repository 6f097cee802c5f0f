// Status and Result<T>: expected failures (bad files, bad flags, bad requests) travel as
// values with a message that names what is wrong and where. Invariant violations are
// FATHOM_CHECK (check.h) instead.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace fathom {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) {
    Status s;
    s.error_ = std::move(message);
    return s;
  }
  bool ok() const { return !error_.has_value(); }
  const std::string& message() const {
    static const std::string kOk = "ok";
    return error_ ? *error_ : kOk;
  }
  // Prefixes context ("loading model.safetensors: ...") to an error; no-op on Ok.
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Error(context + ": " + *error_);
  }

 private:
  std::optional<std::string> error_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status::Error("internal: Result built from an Ok status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace fathom

#define FATHOM_CONCAT_INNER(a, b) a##b
#define FATHOM_CONCAT(a, b) FATHOM_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function if it is an error.
#define FATHOM_RETURN_IF_ERROR(expr)                     \
  do {                                                   \
    ::fathom::Status fathom_status_ = (expr);            \
    if (!fathom_status_.ok()) return fathom_status_;     \
  } while (0)

// `lhs = value of expr` or return its error. lhs may be a declaration: `auto x`.
#define FATHOM_ASSIGN_OR_RETURN(lhs, expr) \
  FATHOM_ASSIGN_OR_RETURN_IMPL(FATHOM_CONCAT(fathom_result_, __LINE__), lhs, expr)
#define FATHOM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
