// DS_CHECK(cond) << "message": internal invariants. A failed check throws ds::CheckError
// (file:line, the condition and the message), which the edges turn into an error reply or a
// clean exit; it never aborts the process silently. Bad *user* input is reported with
// Status (status.h), not with checks.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ds {

class CheckError : public std::runtime_error {
 public:
  explicit CheckError(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
class CheckMessage {
 public:
  CheckMessage(const char* file, int line, const char* cond) {
    os_ << file << ":" << line << ": check failed: " << cond;
  }
  template <typename T>
  CheckMessage& operator<<(const T& v) {
    if (!has_msg_) { os_ << ": "; has_msg_ = true; }
    os_ << v;
    return *this;
  }
  [[noreturn]] void Throw() { throw CheckError(os_.str()); }

 private:
  std::ostringstream os_;
  bool has_msg_ = false;
};
// Lets `DS_CHECK(c) << a << b;` evaluate the stream, then throw at end of full expression.
struct CheckThrower {
  [[noreturn]] void operator&(CheckMessage& m) { m.Throw(); }
  [[noreturn]] void operator&(CheckMessage&& m) { m.Throw(); }
};
}  // namespace detail
}  // namespace ds

#define DS_CHECK(cond)                                          \
  if (__builtin_expect(!!(cond), 1)) {                          \
  } else                                                        \
    ::ds::detail::CheckThrower() &                              \
        ::ds::detail::CheckMessage(__FILE__, __LINE__, #cond)

#define DS_CHECK_EQ(a, b) DS_CHECK((a) == (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define DS_CHECK_LT(a, b) DS_CHECK((a) < (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define DS_CHECK_LE(a, b) DS_CHECK((a) <= (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define DS_CHECK_GE(a, b) DS_CHECK((a) >= (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
