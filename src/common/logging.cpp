#include "common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace ds {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::INFO)};
std::mutex g_mu;
const char* LevelChar(LogLevel l) {
  switch (l) {
    case LogLevel::DEBUG: return "D";
    case LogLevel::INFO: return "I";
    case LogLevel::WARNING: return "W";
    case LogLevel::ERROR: return "E";
    default: return "?";
  }
}
}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

bool ParseLogLevel(const std::string& name, LogLevel* out) {
  if (name == "debug") *out = LogLevel::DEBUG;
  else if (name == "info") *out = LogLevel::INFO;
  else if (name == "warning" || name == "warn") *out = LogLevel::WARNING;
  else if (name == "error") *out = LogLevel::ERROR;
  else if (name == "off") *out = LogLevel::OFF;
  else return false;
  return true;
}

namespace detail {
LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  char ms_buf[8];
  std::snprintf(ms_buf, sizeof(ms_buf), "%03d", static_cast<int>(ms));
  os_ << LevelChar(level) << " " << buf << "." << ms_buf << " " << base << ":" << line << "] ";
}
LogLine::~LogLine() {
  os_ << "\n";
  std::string s = os_.str();
  std::lock_guard<std::mutex> lock(g_mu);
  std::fwrite(s.data(), 1, s.size(), stderr);
  (void)level_;
}
}  // namespace detail
}  // namespace ds
