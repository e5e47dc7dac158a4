// Helpers shared by the sweep tests: temp dirs, writing configs, running the binary.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

// Runs `sweep ARGS` with stdout and stderr kept apart (for --json: the JSON is all of stdout).
struct SplitResult {
  int exit_code = -1;
  std::string out, err;
};
inline SplitResult run_sweep_cli_split(const std::string& args, const std::string& env = "") {
  const auto err_path = std::filesystem::temp_directory_path() /
                        ("sweep_test_stderr_" + std::to_string(::getpid()));
  SplitResult s;
  const std::string cmd = env + " " + SWEEP_BINARY + std::string(" ") + args + " 2>" + err_path.string();
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) s.out.append(buf, n);
  const int st = pclose(p);
  s.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(err_path);
  s.err.assign(std::istreambuf_iterator<char>(f), {});
  std::filesystem::remove(err_path);
  return s;
}

// One point through `sweep worker --point JSON` (a process of its own, as a run's): the row's
// JSON, which the test expects to say "ok"; empty where the worker failed (reported).
inline nlohmann::json run_worker_point(const nlohmann::json& point) {
  const auto run = run_sweep_cli_split("worker --point '" + point.dump() + "' --result-fd 1");
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  if (run.exit_code != 0) return {};
  auto m = nlohmann::json::parse(run.out.substr(run.out.rfind('{')));
  EXPECT_EQ(m.at("status"), "ok") << m.dump();
  return m;
}

}  // namespace sweep::testing
