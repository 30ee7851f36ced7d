// `dsinfer <subcommand> [flags]`: the one executable. Subcommands register themselves
// (command.h); this file only dispatches and turns escaped exceptions into clean errors.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "common/check.h"
#include "tools/command.h"

namespace ds::tools {
std::map<std::string, CommandInfo>& CommandRegistry() {
  static std::map<std::string, CommandInfo> registry;
  return registry;
}
}  // namespace ds::tools

namespace {
void PrintUsage(FILE* out) {
  std::fprintf(out, "dsinfer: inference engine for DeepSeek-V3/R1-family models\n\n");
  std::fprintf(out, "usage: dsinfer <command> [flags]   (dsinfer <command> --help for flags)\n\ncommands:\n");
  for (const auto& [name, info] : ds::tools::CommandRegistry())
    std::fprintf(out, "  %-16s %s\n", name.c_str(), info.help.c_str());
}
}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V"))) argv[1] = const_cast<char*>("version");
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  auto& reg = ds::tools::CommandRegistry();
  int words = 1;  // a two-word command ("bench kernels") wins over the one-word family
  auto it = argc >= 3 ? reg.find(std::string(argv[1]) + " " + argv[2]) : reg.end();
  if (it != reg.end()) words = 2;
  else it = reg.find(argv[1]);
  if (it == reg.end()) {
    // A family of two-word commands ("bench"): list its members.
    const std::string family = std::string(argv[1]) + " ";
    bool listed = false;
    const bool has_family = std::any_of(reg.begin(), reg.end(), [&](const auto& kv) { return kv.first.rfind(family, 0) == 0; });
    if (has_family && argc >= 3 && argv[2][0] != '-')
      std::fprintf(stderr, "dsinfer: unknown command '%s %s'\n\n", argv[1], argv[2]);
    for (const auto& [cmd, info] : reg) {
      if (cmd.rfind(family, 0) != 0) continue;
      if (!listed) std::fprintf(stderr, "usage: dsinfer %s<what> [flags]\n\n", family.c_str());
      std::fprintf(stderr, "  %-16s %s\n", cmd.c_str(), info.help.c_str());
      listed = true;
    }
    if (listed) {
      const bool asked = argc >= 3 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "-h"));
      return asked ? 0 : 2;
    }
    std::fprintf(stderr, "dsinfer: unknown command '%s'\n\n", argv[1]);
    PrintUsage(stderr);
    return 2;
  }
  std::string name = std::string("dsinfer ") + it->first;
  std::vector<char*> sub_argv;
  sub_argv.push_back(name.data());
  for (int i = 1 + words; i < argc; ++i) sub_argv.push_back(argv[i]);
  try {
    const int rc = it->second.fn(static_cast<int>(sub_argv.size()), sub_argv.data());
    // CLI11's parse errors exit with codes >= 100 (e.g. 106 for a missing required flag): a
    // usage error is 2 for every command.
    return rc >= 100 ? 2 : rc;
  } catch (const ds::CheckError& e) {
    std::fprintf(stderr, "dsinfer: internal error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsinfer: error: %s\n", e.what());
    return 1;
  }
}
