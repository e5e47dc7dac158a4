// Subcommand registration for the `sweep` binary: run, models, worker (hidden), and the
// reports' commands. Each callback sets exit_code; user errors print file:line + hint, 2.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>

#include "sweeps/runner/config.h"

namespace sweep {

void register_commands(CLI::App& app, int& exit_code);

}  // namespace sweep
