// Subcommand registration for the `sweep` binary: run, models, worker (hidden), and the
// reports' commands. Each callback sets exit_code; user errors print file:line + hint, 2.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>

#include "sweeps/config.h"

namespace sweep {

// Runs `fn`, turning user errors into "file:line: key: message" + hint and exit code 2.
template <class F>
int guarded(F&& fn) {
  try {
    return fn();
  } catch (const UserError& e) {
    std::cerr << "error: " << e.located() << "\n";
    if (!e.hint().empty()) std::cerr << "hint: " << e.hint() << "\n";
    return 2;
  } catch (const std::exception& e) {  // e.g. a GPU probe that failed: no user error, no trace
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

void register_commands(CLI::App& app, int& exit_code);

}  // namespace sweep
