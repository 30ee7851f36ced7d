// Subcommand registry for the single `dsinfer` executable. Each src/tools/<name>.cpp defines
//   static int RunX(int argc, char** argv);  // argv[0] is "dsinfer <name>"
//   DS_REGISTER_COMMAND(x, "one-line help", RunX);
// and parses its own flags (CLI11). Exit codes: 0 ok, 1 runtime error, 2 usage error.
#pragma once

#include <functional>
#include <map>
#include <string>

namespace ds::tools {

using CommandFn = std::function<int(int argc, char** argv)>;

struct CommandInfo {
  std::string help;
  CommandFn fn;
};

std::map<std::string, CommandInfo>& CommandRegistry();

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* help, CommandFn fn) {
    CommandRegistry()[name] = CommandInfo{help, std::move(fn)};
  }
};

}  // namespace ds::tools

#define DS_REGISTER_COMMAND(name, help, fn) \
  static ::ds::tools::CommandRegistrar ds_command_registrar_##name(#name, help, fn)
// A two-word command ("bench kernels"): main dispatches `dsinfer <w1> <w2> ...` to it before
// looking up a one-word command <w1>, so a family such as `bench` can gain modes in separate files.
#define DS_REGISTER_COMMAND_NAMED(id, name, help, fn) \
  static ::ds::tools::CommandRegistrar ds_command_registrar_##id(name, help, fn)
