// The `sweep` command: a thin CLI11 front over the libraries; it only dispatches.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <iostream>

#include "sweep_version.h"
#include "sweeps/cli/cli.h"
#include "sweeps/cli/command_line.h"
#include "sweeps/cli/env_check.h"
#include "reports/results/error.h"
#include "sweeps/runner/isolate.h"

// Before LibTorch's static initializers read the allocator settings (env_check.h).
__attribute__((section(".preinit_array"), used)) static void (*check_environment_first)(
    int, char**, char**) = &sweep::check_environment;

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f), write(2) then fails with EFBIG and the results store
  // says so and keeps the file whole, instead of the process dying of SIGXFSZ mid-row.
  std::signal(SIGXFSZ, SIG_IGN);
  // This binary's path, read before anything could replace the file (see exec_path).
  (void)sweep::self_exe();
  CLI::App app{"sweep: measured answers to \"what fits on my GPU, and which configuration is fastest?\""};
  app.set_version_flag("--version", std::string("sweep ") + SWEEP_VERSION + " (" + SWEEP_GIT_COMMIT + ")");
  app.require_subcommand(1);
  int exit_code = 0;
  sweep::register_commands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return sweep::print_user_error(sweep::command_line_error(app, e));
  }
  return exit_code;
}
