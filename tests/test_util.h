// Helpers shared by the sweep tests: temp dirs, writing configs, running the binary.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "temp_tree.h"

namespace sweep::testing {

// A fresh folder per test and process under the system temp dir: checkouts (worktrees, CI
// beside a developer) running the suite at once must not delete each other's files.
inline std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("sweep_test_" + name + "_" + std::to_string(::getpid()));
  remove_tree(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout + stderr
};

// Runs `sweep ARGS` (with an optional environment prefix) and captures its output.
inline CommandResult run_sweep_cli(const std::string& args, const std::string& env = "") {
  CommandResult r;
  const std::string cmd = env + " " + SWEEP_BINARY + std::string(" ") + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace sweep::testing
