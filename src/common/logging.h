// Minimal leveled logging to stderr: DS_LOG(INFO) << "...". Level from --log-level or
// SetLogLevel(); thread-safe (one line is written atomically).
#pragma once

#include <sstream>
#include <string>

namespace ds {

enum class LogLevel { DEBUG = 0, INFO = 1, WARNING = 2, ERROR = 3, OFF = 4 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "debug|info|warning|error|off"; returns false on an unknown name.
bool ParseLogLevel(const std::string& name, LogLevel* out);

namespace detail {
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream os_;
};
}  // namespace detail
}  // namespace ds

#define DS_LOG(level)                                                   \
  if (::ds::LogLevel::level < ::ds::GetLogLevel()) {                    \
  } else                                                                \
    ::ds::detail::LogLine(::ds::LogLevel::level, __FILE__, __LINE__)
