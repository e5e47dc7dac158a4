// The run's closing summary and the dry run's listing; see run_summary.h.
#include "sweeps/cli/run_summary.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "reports/common/gpus.h"
#include "reports/results/stats.h"
#include "reports/results/schema.h"
#include "reports/results/technique.h"

namespace sweep {
namespace {

using nlohmann::json;
using schema::column;

// The numbers a row measured (its configuration: the axes, schema::kAxes).
constexpr std::array kMeasuredColumns = std::to_array<std::string_view>({
    "tokens_per_s", "samples_per_s", "step_ms", "step_ms_cv", "tflops",
    "peak_allocated_bytes", "peak_reserved_bytes", "wall_s", "device_name",
});

// The row's non-empty cells of `names`: numbers as JSON numbers (whole ones as integers),
// the rest as text, as results.csv has them.
template <std::size_t N>
json cells(const reports::Row& r, const std::array<std::string_view, N>& names) {
  json j = json::object();
  for (auto name : names) {
    const std::size_t col = schema::find_column(name);
    if (r.at(col).empty()) continue;
    if (!schema::is_number_column(name)) {
      j[std::string(name)] = r.at(col);
      continue;
    }
    const double v = r.number(col).value_or(0);
    if (v == std::floor(v) && std::fabs(v) < 9e15)
      j[std::string(name)] = static_cast<int64_t>(v);
    else
      j[std::string(name)] = v;
  }
  return j;
}

// "gpt2 batch 4, fp32, checkpointing none, adamw" (+ ", accumulation 4" and the technique's
// name parts where they apply, ", lora r8", ", offload optimizer": a LoRA row is not full
// fine-tuning; reports/results/technique.h)
std::string row_label(const reports::Row& r) {
  std::string s = r.at(column("model")) + " batch " + r.at(column("batch")) + ", " +
                  r.at(column("precision")) + ", checkpointing " + r.at(column("checkpointing")) +
                  ", " + r.at(column("optimizer"));
  if (const auto& a = r.at(column("accumulation")); !a.empty() && a != "1") s += ", accumulation " + a;
  return s + name_tail(cells_of(r), ", ");
}

double cv(const reports::Row* r) { return r->number(column("step_ms_cv")).value_or(0); }

std::string percent(double fraction) { return std::to_string(std::lround(fraction * 100)) + "%"; }

std::string noisy_advice() {
  return "throughput comparisons between these points are not reliable; quiet the machine (stop "
         "other jobs and builds) or raise `repetitions` (and `warmup_steps`), then measure again "
         "with --force";
}

std::string path_in(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace

RunSummary summarize_run(const reports::Results& results, const std::string& out) {
  RunSummary s;
  s.out = out;
  s.results_path = results.path;
  for (const Status st : all_of<Status>()) s.counts.emplace_back(st, 0);
  auto tokens = [](const reports::Row* r) { return r->number(column("tokens_per_s")).value_or(0); };
  for (const auto* r : reports::latest_per_point(results).rows) {
    for (auto& [status, n] : s.counts) n += status == r->status;
    if (r->value<Device>() == Device::kEmulated) {
      ++s.predicted;
      const std::string card = emulated_card_name(r->at(column("device_name"))).value_or("");
      if (!card.empty() && std::find(s.predicted_cards.begin(), s.predicted_cards.end(), card) ==
                               s.predicted_cards.end())
        s.predicted_cards.push_back(card);
    }
    if (r->status != Status::kOk || r->value<Mode>() != Mode::kTrain) continue;
    ++s.ok_train;
    // The fastest measured: a prediction's throughput (device emulated) is not a measurement.
    if (r->value<Device>() != Device::kEmulated && tokens(r) > 0 &&
        (!s.fastest || tokens(r) > tokens(s.fastest)))
      s.fastest = r;
    if (cv(r) > reports::kNoisyStepCv) {
      s.noisy.push_back(r);
      if (!s.noisiest || cv(r) > cv(s.noisiest)) s.noisiest = r;
    }
  }
  return s;
}

std::string RunSummary::predicted_line() const {
  std::string cards;
  for (const auto& c : predicted_cards) cards += (cards.empty() ? "" : ", ") + c;
  return std::to_string(predicted) + " rows " + predicted_by(cards.empty() ? "a card" : cards) +
         ": tokens/s, where a row has it, from the step-time model (docs/fidelity.md), never the fastest measured";
}

bool RunSummary::warn_noisy() const {
  const int n = static_cast<int>(noisy.size());
  return n > 0 && n >= std::min(kNoisyPointsToWarn, ok_train);
}

json RunSummary::json() const {
  nlohmann::json j;
  j["run_json_version"] = kRunJsonVersion;
  j["dry_run"] = false;
  j["out"] = out;
  j["results"] = results_path;
  j["report"] = {{"markdown", path_in(out, "report.md")}, {"html", path_in(out, "report.html")}};
  int points = 0;
  j["counts"] = nlohmann::json::object();
  for (const auto& [status, n] : counts) {
    j["counts"][to_string(status)] = n;
    points += n;
  }
  j["count"] = points;
  if (fastest) {
    j["fastest"] = cells(*fastest, kMeasuredColumns);
    if (const auto m = reports::mfu(*fastest)) j["fastest"]["mfu"] = *m;
    j["fastest"]["configuration"] = cells(*fastest, schema::axis_columns());
    j["fastest"]["point_id"] = fastest->at(column("point_id"));
    j["fastest"]["label"] = row_label(*fastest);
    j["fastest"]["where"] = fastest->where();
  } else {
    j["fastest"] = nullptr;
  }
  nlohmann::json noise = {{"threshold_cv", reports::kNoisyStepCv},
                          {"points", noisy.size()},
                          {"ok_train_points", ok_train},
                          {"warning", warn_noisy()}};
  noise["worst"] = noisiest ? nlohmann::json{{"step_ms_cv", cv(noisiest)},
                                             {"point_id", noisiest->at(column("point_id"))},
                                             {"label", row_label(*noisiest)},
                                             {"where", noisiest->where()}}
                            : nlohmann::json(nullptr);
  noise["advice"] = warn_noisy() ? nlohmann::json(noisy_advice()) : nlohmann::json(nullptr);
  j["noisy"] = noise;
  j["predicted"] = predicted ? nlohmann::json{{"rows", predicted},
                                              {"cards", predicted_cards},
                                              {"line", predicted_line()}}
                             : nlohmann::json(nullptr);
  j["next"] = "sweep recommend " + out + " --gpu NAME";
  return j;
}

std::string RunSummary::text() const {
  std::string line;
  for (const auto& [status, n] : counts)
    if (n) line += (line.empty() ? "" : ", ") + std::to_string(n) + " " + to_string(status);
  std::string s = "summary: " + line + "\n";
  if (predicted) s += "predicted: " + predicted_line() + "\n";
  if (fastest) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "fastest train row: %s: %.0f tokens/s, peak %s (%s)\n",
                  row_label(*fastest).c_str(), fastest->number(column("tokens_per_s")).value_or(0),
                  reports::format_bytes(fastest->number(column("peak_reserved_bytes")).value_or(0)).c_str(),
                  fastest->where().c_str());
    s += buf;
  }
  if (warn_noisy())
    s += "warning: noisy machine: the step time varied more than " + percent(reports::kNoisyStepCv) +
         " between repetitions at " + std::to_string(noisy.size()) + " of " + std::to_string(ok_train) +
         " ok train points (worst " + percent(cv(noisiest)) + ": " + row_label(*noisiest) + ", " +
         noisiest->where() + ")\nhint: " + noisy_advice() + "\n";
  s += "report:  " + path_in(out, "report.md") + " (and report.html)\n" +
       "next:    sweep recommend " + out + " --gpu NAME   (what fits a card, and is fastest)\n";
  return s;
}

}  // namespace sweep
