// The `compare` command (compare.h): its flags, the run-to-run thresholds of --noise,
// --record-missing, which makes a runner's first run its baseline, and --advance-baseline,
// which makes a run that passed the next one (the previous kept beside it).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <tuple>

#include "reports/compare/compare.h"

namespace sweep::reports {
namespace {

struct Args {
  std::string base, next, memory = "1%", throughput = "5%", format = "md", export_dir, noise;
  bool gate_reserved = false, allow_predicted = false, allow_empty = false, record_missing = false,
       advance_baseline = false;
};

// The file a baseline argument names: the CSV itself, or DIR/results.csv.
std::filesystem::path baseline_file(const std::string& arg) {
  const std::filesystem::path p(arg);
  return p.extension() == ".csv" ? p : p / "results.csv";
}

// Where --advance-baseline keeps the baseline it replaces: results.csv -> results.previous.csv.
std::filesystem::path previous_baseline(const std::filesystem::path& target) {
  return target.parent_path() / (target.stem().string() + ".previous.csv");
}

// Why `base` cannot be NEW's baseline (it does not exist, or its schema version does not
// compare with NEW's), or nullopt when it can. A file that exists but does not read throws, as
// in any comparison: a damaged baseline is not silently replaced.
std::optional<std::string> unusable_baseline(const std::string& base, const Results& next) {
  if (!std::filesystem::exists(baseline_file(base)) && !std::filesystem::is_directory(base))
    return "there is none at " + baseline_file(base).string();
  const Results b = read_results(base);
  if (b.rows.empty() || next.rows.empty()) return std::nullopt;
  const std::string bv = b.rows.front().at(schema::column("schema_version"));
  const std::string nv = next.rows.front().at(schema::column("schema_version"));
  if (bv != nv && std::min(std::stoi(bv), std::stoi(nv)) < schema::kSameMeasurementsSince)
    return b.path + " has schema_version " + bv + ", which does not compare with this run's " + nv;
  return std::nullopt;
}

// A baseline is recorded only from a run whose every point is a result: ok, or out of memory
// (and the larger batches skipped as implied by it), at least one ok. A point that crashed or
// timed out is a broken build or machine, and every later run would be compared against it
// (issue 57: an all-crash first run became the baseline). Throws UserError (exit 2) naming the
// points; nothing is written.
void check_recordable(const Results& next, const std::string& what) {
  std::size_t failed = 0, ok = 0;
  std::string first;
  const auto latest = latest_per_point(next);
  for (const Row* r : latest.rows) {
    if (r->status == Status::kOk) ++ok;
    if (r->status != Status::kCrash && r->status != Status::kTimeout) continue;
    if (failed++ == 0)
      first = r->where() + " (" + std::string(to_string(r->status)) +
              (r->at(schema::column("message")).empty() ? "" : ": " + r->at(schema::column("message"))) + ")";
  }
  if (failed == 0 && ok > 0) return;
  const std::string why =
      failed > 0 ? std::to_string(failed) + " of " + std::to_string(latest.rows.size()) +
                       " point(s) crashed or timed out, the first " + first
                 : "none of its " + std::to_string(latest.rows.size()) + " point(s) ran ok";
  throw UserError(next.path, 0, "status",
                  "not " + what + ": " + why +
                      "; a baseline is recorded only from a run whose every point is ok (or out of "
                      "memory)",
                  "fix what failed (each row's message, and the run's logs/ folder), then run "
                  "again; the baseline was left as it was");
}

// NEW's file, byte for byte, becomes the baseline at `target` (written beside it and renamed
// into place, so a reader never sees half a file); a baseline already there is kept beside it
// as <name>.previous.csv.
void install_baseline(const std::filesystem::path& target, const Results& next) {
  namespace fs = std::filesystem;
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  const std::string tail = ".tmp-" + std::to_string(::getpid());
  if (fs::exists(target)) {
    const fs::path previous = previous_baseline(target);
    fs::copy_file(target, previous.string() + tail, fs::copy_options::overwrite_existing);
    fs::rename(previous.string() + tail, previous);
  }
  const fs::path temp = target.string() + tail;
  fs::copy_file(next.path, temp, fs::copy_options::overwrite_existing);
  fs::rename(temp, target);
}

// --record-missing: NEW becomes the baseline. Returns the report.
std::string record_baseline(const std::string& base, const Results& next, const std::string& why) {
  check_recordable(next, "recorded as the baseline");
  const std::filesystem::path target = baseline_file(base);
  install_baseline(target, next);
  const std::string device =
      next.rows.empty() ? std::string("no rows") : next.rows.front().at(schema::column("device_name"));
  return "## sweep compare: baseline recorded\n\nNo usable baseline for this runner: " + why +
         ". This run's " + std::to_string(latest_per_point(next).rows.size()) + " point(s) (" +
         device + ") are now the baseline at `" + target.string() +
         "`: nothing was compared, so nothing regressed. Later runs on this runner compare "
         "against it (docs/regression-tracking.md).\n";
}

// "5%" or "5" -> 0.05.
std::optional<double> parse_percent(std::string s) {
  while (!s.empty() && (s.back() == '%' || s.back() == ' ')) s.pop_back();
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !(v >= 0 && v < 1000))
    return std::nullopt;
  return v / 100;
}

int run_compare(const Args& a) {
  CompareOptions o{.gate_reserved = a.gate_reserved,
                   .allow_predicted = a.allow_predicted,
                   .allow_empty = a.allow_empty};
  for (auto [flag, text, out] :
       {std::tuple{"--memory-threshold", &a.memory, &o.memory_threshold},
        {"--throughput-threshold", &a.throughput, &o.throughput_threshold}}) {
    auto v = parse_percent(*text);
    if (!v)
      throw UserError(flag, 0, "", "'" + *text + "' is not a percentage",
                      "write it like 1% or 0.5%");
    *out = *v;
  }
  const Results next = read_results(a.next);
  if (a.record_missing && !next.rows.empty())  // an empty run records nothing
    if (const auto why = unusable_baseline(a.base, next)) {
      std::cout << record_baseline(a.base, next, *why);
      std::cerr << "sweep compare: recorded " << next.path << " as the baseline ("
                << *why << ")\n";
      return 0;
    }
  const Results base = read_results(a.base);
  if (!a.noise.empty()) {
    o.step_thresholds = run_to_run_thresholds(base, read_results(a.noise), o.throughput_threshold);
    o.step_thresholds_from = a.noise;
  }
  const CompareResult r = compare_results(base, next, o);
  std::cout << compare_text(r, a.format);
  if (!a.export_dir.empty() && !write_compare_exports(r, next, a.export_dir)) return 2;
  std::cerr << "sweep compare: " << compare_summary(r) << "\n";
  if (r.compared_points() == 0 && !o.allow_empty)
    throw UserError(next.path, 0, "",
                    "no point was compared with the baseline (" + std::to_string(r.next.points) +
                        " point(s) here, " + std::to_string(r.base.points) +
                        " in the baseline, none comparable): a gate that compares nothing "
                        "passes nothing",
                    "check that NEW measured the baseline's configurations (the same models, "
                    "axes and budget); pass --allow-empty to accept a comparison with nothing in "
                    "common");
  if (r.regressed()) return 1;
  if (a.advance_baseline) {
    // Passed: this run is the baseline from now on, the one it replaces kept beside it.
    check_recordable(next, "advanced to this run");
    const std::filesystem::path target = baseline_file(a.base);
    install_baseline(target, next);
    const std::string note = "The baseline advanced to this run: `" + target.string() +
                             "`; the one it replaces is `" + previous_baseline(target).string() + "`.";
    if (a.format == "md") std::cout << "\n" << note << "\n";
    std::cerr << "sweep compare: " << note << "\n";
  }
  return 0;
}

}  // namespace

void register_compare_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "compare", "Regressions of NEW against BASELINE (exit 1 if any, 2 for bad input)");
  cmd->add_option("baseline", a->base, "Baseline results.csv (or a directory holding one)")
      ->required();
  cmd->add_option("new", a->next, "New results.csv (or a directory holding one)")->required();
  cmd->add_option("--memory-threshold", a->memory,
                  "Peak allocated growth that fails, on top of 2 MiB allocator rounding")
      ->capture_default_str();
  cmd->add_option("--throughput-threshold", a->throughput,
                  "Median step-time slowdown that fails when also significant (p < 0.01)")
      ->capture_default_str();
  cmd->add_option("--noise", a->noise,
                  "The baseline run again back to back on the same runner: each point's step-time "
                  "threshold becomes twice the change between the two runs (at least "
                  "--throughput-threshold)");
  cmd->add_flag("--record-missing", a->record_missing,
                "Without a usable BASELINE (none, or of a schema version that does not compare), "
                "write NEW there and exit 0, saying so; refused (exit 2) when a point of NEW "
                "crashed or timed out");
  cmd->add_flag("--advance-baseline", a->advance_baseline,
                "When nothing regressed, NEW becomes the baseline and the one it replaces is kept "
                "beside it as <name>.previous.csv (CI on a push to main)");
  cmd->add_flag("--gate-reserved", a->gate_reserved,
                "Fail on peak reserved memory growth too (default: warn)");
  cmd->add_flag("--allow-empty", a->allow_empty,
                "Exit 0 even when no point of NEW could be compared with the baseline (default: "
                "refused, exit 2)");
  cmd->add_flag(
      "--allow-predicted", a->allow_predicted,
      "Compare rows predicted by emulation (device emulated) with measured ones (default: refused, "
      "exit 2)");
  auto* format = cmd->add_option("--format", a->format, "Output on stdout")
                     ->check(CLI::IsMember({"md", "json", "csv"}))
                     ->capture_default_str();
  cmd->add_flag_callback("--json", [a] { a->format = "json"; }, "The same as --format json")
      ->excludes(format);
  cmd->add_option("--export", a->export_dir,
                  "Also write compare.{md,json,csv} and dashboard JSON (github-action-benchmark "
                  "custom*IsBetter, Bencher BMF) here");
  cmd->callback([a, &exit_code] { exit_code = run_guarded([&] { return run_compare(*a); }); });
}

}  // namespace sweep::reports
