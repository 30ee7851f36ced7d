// Status and StatusOr: the error type at the edges of dsinfer (file loading, config parsing,
// request validation, the HTTP server). Inside the engine, invariants use DS_CHECK (check.h).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ds {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad user input (config field, request field, CLI flag)
  kNotFound,         // missing file, tensor or model
  kOutOfRange,       // an offset or length outside its bounds
  kDataLoss,         // a corrupt or truncated file
  kUnimplemented,    // a valid option this build does not support
  kResourceExhausted,
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: config.json: field 'n_group' ..." ; "OK" when ok.
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& v) : v_(v) {}               // NOLINT(implicit)
  StatusOr(T&& v) : v_(std::move(v)) {}         // NOLINT(implicit)
  StatusOr(Status s) : v_(std::move(s)) {}      // NOLINT(implicit); must not be OK
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ds

#define DS_CONCAT_INNER(a, b) a##b
#define DS_CONCAT(a, b) DS_CONCAT_INNER(a, b)

// Return the Status if it is not OK.
#define DS_RETURN_IF_ERROR(expr)          \
  do {                                    \
    ::ds::Status _ds_st = (expr);         \
    if (!_ds_st.ok()) return _ds_st;      \
  } while (0)

// DS_ASSIGN_OR_RETURN(auto x, FunctionReturningStatusOr());
#define DS_ASSIGN_OR_RETURN(lhs, expr)                          \
  auto DS_CONCAT(_ds_sor_, __LINE__) = (expr);                  \
  if (!DS_CONCAT(_ds_sor_, __LINE__).ok())                      \
    return DS_CONCAT(_ds_sor_, __LINE__).status();              \
  lhs = std::move(DS_CONCAT(_ds_sor_, __LINE__)).value()
