// `dsinfer version`: prints the build's version and backends.
#include <cstdio>

#include "tools/command.h"

namespace {
int RunVersion(int, char**) {
#ifdef DS_WITH_CUDA
  std::printf("dsinfer 0.1.0 (backends: cpu, cuda sm_90a)\n");
#else
  std::printf("dsinfer 0.1.0 (backends: cpu)\n");
#endif
  return 0;
}
}  // namespace

DS_REGISTER_COMMAND(version, "print the version and the backends built in", RunVersion);
