// Hints for refused command lines; see command_line.h.
#include "sweeps/cli/command_line.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "reports/results/spelling.h"

namespace sweep {
namespace {

// The subcommand the command line went deepest into: `sweep fit ...` -> fit.
const CLI::App& innermost(const CLI::App& app) {
  const auto parsed = app.get_subcommands();
  return parsed.empty() ? app : innermost(*parsed.front());
}

// "sweep fit": the program's name (not the path it was run by), then the subcommands.
std::string command_path(const CLI::App& app) {
  if (const CLI::App* parent = app.get_parent()) return command_path(*parent) + " " + app.get_name();
  const std::string name = std::filesystem::path(app.get_name()).filename().string();
  return name.empty() ? "sweep" : name;
}

// The flags a (sub)command lists in its --help, as typed: "--seq", "-g".
std::vector<std::string> flags_of(const CLI::App& app) {
  std::vector<std::string> flags;
  for (const CLI::Option* o : app.get_options([](const CLI::Option* o) { return !o->get_group().empty(); })) {
    for (const auto& l : o->get_lnames()) flags.push_back("--" + l);
    for (const auto& s : o->get_snames()) flags.push_back("-" + s);
  }
  return flags;
}

std::vector<std::string> subcommands_of(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); }))
    names.push_back(s->get_name());
  return names;
}

// The suggestions for what the command line left over: each unknown flag ("--seq-len",
// "--seq-len=512") against the command's flags; a word where a subcommand was required
// against the subcommands.
std::vector<std::string> suggestions(const CLI::App& command) {
  const auto flags = flags_of(command);
  const auto subcommands = subcommands_of(command);
  const bool wants_subcommand = command.get_subcommands().empty() && !subcommands.empty();
  std::vector<std::string> out;
  for (const auto& arg : command.remaining()) {
    const bool flag = arg.size() > 1 && arg[0] == '-';
    if (!flag && !wants_subcommand) continue;
    const auto near = flag ? nearest(arg.substr(0, arg.find('=')), flags) : nearest(arg, subcommands);
    for (const auto& n : near)
      if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    if (!flag) break;  // the first word is the subcommand; what follows is its arguments
  }
  return out;
}

}  // namespace

UserError command_line_error(const CLI::App& app, const CLI::ParseError& e) {
  const CLI::App& command = innermost(app);
  // CLI11 lists what it did not expect backwards ("512 --seq-len"); the flags, as typed, say more.
  std::vector<std::string> unknown;
  for (const auto& arg : command.remaining())
    if (arg.size() > 1 && arg[0] == '-') unknown.push_back(arg.substr(0, arg.find('=')));
  const std::string path = command_path(command);
  // A word where a command was required: "`sweep` has no command fti", not CLI11's "A
  // subcommand is required" (one was given; it is unknown).
  std::string word;
  if (command.get_subcommands().empty() && !subcommands_of(command).empty())
    for (const auto& arg : command.remaining())
      if (!arg.empty() && arg[0] != '-') {
        word = arg;
        break;
      }
  std::string message = !unknown.empty() ? "`" + path + "` has no flag"
                        : !word.empty()  ? "`" + path + "` has no command " + word
                                         : std::string(e.what());
  for (std::size_t i = 0; i < unknown.size(); ++i)
    message += (i == 0 ? (unknown.size() > 1 ? "s " : " ") : ", ") + unknown[i];
  return UserError("", 0, "", message, did_you_mean(suggestions(command)) + "run `" + path + " --help`");
}

}  // namespace sweep
