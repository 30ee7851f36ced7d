// `dsinfer bench one-batch`: placeholder until the runner lands (see below).
#include <cstdio>

#include "tools/bench_commands.h"

namespace ds::tools {
int RunBenchOneBatch(int, char**) {
  std::fprintf(stderr, "dsinfer bench one-batch: not built yet\n");
  return 1;
}
}  // namespace ds::tools
