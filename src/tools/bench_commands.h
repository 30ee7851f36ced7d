// The `dsinfer bench <mode>` family: bench.cpp dispatches to these (argv[0] = "dsinfer bench <mode>").
#pragma once

namespace ds::tools {
int RunBenchServe(int argc, char** argv);     // bench_serve.cpp
int RunBenchOneBatch(int argc, char** argv);  // bench_one_batch.cpp
int RunBenchRoofline(int argc, char** argv);  // bench_one_batch.cpp
}  // namespace ds::tools
