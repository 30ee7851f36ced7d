// Test helper: runs a shell command and captures its output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

namespace ds::test {

// Returns (exit code, stdout [+ stderr when merge_stderr]); exit code -1 if it did not exit.
inline std::pair<int, std::string> RunCmd(const std::string& cmd, bool merge_stderr = true) {
  std::string out;
  FILE* f = popen((cmd + (merge_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!f) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int st = pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace ds::test
