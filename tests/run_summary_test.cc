// The end of `sweep run` and its dry run: the estimate from measured rows (exact arithmetic
// on written rows), the closing summary and its noisy-machine warning, and `--json` of both
// end to end on the tiny GPT-2.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "reports/results/rows.h"
#include "sweeps/runner/estimate.h"
#include "sweeps/runner/results_store.h"
#include "sweeps/cli/run_summary.h"
#include "test_util.h"

namespace sweep {
namespace {

using nlohmann::json;

// A row as `sweep run` writes it, with the columns these tests read.
json row(const std::string& id, const std::string& model, int64_t batch, const std::string& status) {
  json r = {{"schema_version", 1}, {"point_id", id},    {"model", model}, {"mode", "train"},
            {"batch", batch},      {"seq", 64},         {"precision", "fp32"}, {"checkpointing", "none"},
            {"accumulation", 1},   {"optimizer", "adamw"}, {"steps", 2}, {"warmup_steps", 1},
            {"repetitions", 3},    {"status", status}};
  if (status == "ok") r["peak_allocated_bytes"] = r["peak_reserved_bytes"] = batch << 20;  // rows.h
  return r;
}

json timed(json r, double step_ms, double wall_s) {
  r["step_ms"] = step_ms;
  r["wall_s"] = wall_s;
  return r;
}

reports::Results write_rows(const std::string& name, const std::vector<json>& rows) {
  const auto dir = testing::temp_dir(name);
  {
    ResultsStore store(dir.string());
    for (const auto& r : rows) store.append(r);
  }
  return reports::read_results(dir.string());
}

Point point(const std::string& model, int64_t batch, int64_t seq, Precision precision) {
  Point p;
  p.model = model;
  p.family = model.substr(0, model.find('-'));
  p.batch = batch;
  p.seq = seq;
  p.precision = precision;
  p.steps = 5;
  p.warmup_steps = 2;
  p.repetitions = 3;
  return p;
}

TEST(Estimate, WorkerStartPlusStepsAtTheMostSimilarRowsStepTime) {
  // 2 + 3 x 2 = 7 steps each. Batch 1: 0.7 s of steps in 2.0 s, a start of 1.3 s; batch 2:
  // 1.4 s in 3.0 s, 1.6 s. At seq 32, bf16, accumulation 2, one step: 0.15 s a micro-batch,
  // a start of 3.8 s. Rows that did not run ok, or have no wall time, are not used.
  auto c = row("c", "gpt2-test", 1, "ok");
  c["seq"] = 32;
  c["precision"] = "bf16";
  c["accumulation"] = 2;
  c["steps"] = 1;
  c["warmup_steps"] = 0;
  c["repetitions"] = 1;
  const auto results = write_rows(
      "estimate", {timed(row("a", "gpt2-test", 1, "ok"), 100, 2.0), timed(row("b", "gpt2-test", 2, "ok"), 200, 3.0),
                   timed(c, 300, 4.1), timed(row("d", "gpt2-test", 2, "oom"), 900, 9.0),
                   row("e", "gpt2-test", 2, "ok")});
  WallHistory h;
  h.add(results);
  ASSERT_EQ(h.rows(), 3);
  ASSERT_EQ(h.sources(), std::vector<std::string>{results.path});
  EXPECT_NEAR(*h.start_s(), 1.6, 1e-9);

  // Batch 2 of the same shape and precision: row b alone. 1.6 + 0.2 x (2 + 5 x 3).
  auto e = h.estimate(point("gpt2-test", 2, 64, Precision::kFp32));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->basis, "same model, shape, precision and batch");
  EXPECT_EQ(e->rows, 1);
  EXPECT_NEAR(e->seconds, 1.6 + 0.2 * 17, 1e-9);
  // Batch 4: rows a and b, per sample (medians 1.45 s and 0.1 s), at accumulation 2, one step.
  Point p = point("gpt2-test", 4, 64, Precision::kFp32);
  p.accumulation = 2;
  p.steps = 1;
  p.warmup_steps = 0;
  p.repetitions = 1;
  e = h.estimate(p);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->basis, "same model, shape and precision");
  EXPECT_NEAR(e->start_s, 1.45, 1e-9);
  EXPECT_NEAR(e->step_s, 0.1 * 4 * 2, 1e-9);
  EXPECT_NEAR(e->seconds, 1.45 + 0.8, 1e-9);
  // Another shape: every row of the model (1.6 s; per sample 0.1, 0.1 and 0.15 s).
  e = h.estimate(point("gpt2-test", 1, 128, Precision::kFp32));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->basis, "same model");
  EXPECT_EQ(e->rows, 3);
  EXPECT_NEAR(e->seconds, 1.6 + 0.1 * 17, 1e-9);
  EXPECT_FALSE(h.estimate(point("t5-test", 1, 64, Precision::kFp32)));

  // A plan: recorded points cost nothing, unknown ones are counted apart.
  const std::vector<std::vector<Point>> combos = {
      {point("gpt2-test", 2, 64, Precision::kFp32)}, {point("gpt2-test", 1, 128, Precision::kFp32)},
      {point("t5-test", 1, 64, Precision::kFp32)}, {point("gpt2-test", 1, 64, Precision::kFp32)}};
  Recorded recorded;
  recorded.points[combos[3][0].id()] = Status::kOk;
  const auto plan = estimate_plan(combos, "", h, recorded);
  EXPECT_EQ(plan.estimated, 2);
  EXPECT_EQ(plan.recorded, 1);
  EXPECT_EQ(plan.unknown, 1);
  EXPECT_NEAR(plan.total_s, 5.0 + 3.3, 1e-9);
  const std::string text = plan.summary("point");
  EXPECT_NE(text.find("about 9 s for 2 points, from 3 rows measured in " + results.path), std::string::npos) << text;
  EXPECT_NE(text.find("a worker start takes 1.6 s"), std::string::npos) << text;
  EXPECT_NE(text.find("1 point already measured"), std::string::npos) << text;
  EXPECT_NE(text.find("1 point with no estimate (never measured here)"), std::string::npos) << text;
  // A search: one unit per combination, kProbesPerSearch probes each, nothing recorded.
  const auto search = estimate_plan(combos, "max_batch", h, recorded);
  EXPECT_EQ(search.recorded, 0);
  EXPECT_EQ(search.units[0].runs, kProbesPerSearch);
  EXPECT_NE(search.summary("search").find("about 1 min 08 s for 3 searches (about 18 probes left)"), std::string::npos)
      << search.summary("search");
  EXPECT_NEAR(search.total_s, kProbesPerSearch * (5.0 + 3.3 + (1.3 + 0.1 * 17)), 1e-9);
  EXPECT_EQ(duration_text(59.2), "1 min 00 s");
  EXPECT_EQ(duration_text(3725), "1 h 02 min");
}

// Issue 25: a second fit printed "3 min 57 s" for a run that reused every probe (0.9 s). A
// search whose answer is on record (a fitting batch next to one out of memory, the range's
// end, or a probe that stopped it) costs nothing; one begun costs what it has left.
TEST(Estimate, SearchesOnRecordCostNothingAndBegunOnesWhatIsLeft) {
  WallHistory h;
  h.add(write_rows("estimate_reuse", {timed(row("a", "gpt2-test", 1, "ok"), 100, 2.0)}));
  auto combo = [](int64_t seq) { return std::vector<Point>{point("gpt2-test", 1, seq, Precision::kFp32)}; };
  const std::vector<std::vector<Point>> combos = {combo(64), combo(65), combo(66), combo(67), combo(68)};
  Recorded recorded;
  auto on_record = [&](int i, int64_t batch, Status status) {
    recorded.searches[combination_key(combos[i][0])][batch] = status;
  };
  on_record(0, 8, Status::kOk);  // answered: 8 fits, 9 does not
  on_record(0, 9, Status::kOom);
  on_record(1, 1, Status::kOom);  // answered: not even the first batch
  on_record(2, 16, Status::kOk);  // answered: the end of the range fits
  on_record(3, 4, Status::kOk);   // begun: 2 probes done, 4 left
  on_record(3, 8, Status::kOom);
  const auto plan = estimate_plan(combos, "max_batch", h, recorded, 16, 6);
  ASSERT_EQ(plan.units.size(), 5u);
  EXPECT_EQ(plan.units[0].runs, 0);
  EXPECT_EQ(plan.units[1].runs, 0);
  EXPECT_EQ(plan.units[2].runs, 0);
  EXPECT_EQ(plan.units[3].runs, 4);
  EXPECT_EQ(plan.units[4].runs, 6);
  EXPECT_EQ(plan.recorded, 3);
  EXPECT_EQ(plan.estimated, 2);
  // Fully reused: nothing to estimate (what printed minutes before).
  on_record(3, 5, Status::kOk);
  on_record(3, 6, Status::kOom);
  on_record(4, 16, Status::kOk);
  const auto reused = estimate_plan(combos, "max_batch", h, recorded, 16, 6);
  EXPECT_EQ(reused.recorded, 5);
  EXPECT_EQ(reused.total_s, 0);
}

TEST(RunSummary, CountsTheLastRowOfEachPointAndWarnsOfANoisyMachine) {
  auto ok = [](const std::string& id, int64_t batch, double tokens, double cv) {
    auto r = row(id, "gpt2-test", batch, "ok");
    r["tokens_per_s"] = tokens;
    r["step_ms_cv"] = cv;
    r["peak_reserved_bytes"] = 1 << 20;
    return r;
  };
  auto eval = ok("ev", 8, 99999, 0);  // faster, but not a train row
  eval["mode"] = "eval";
  auto rerun_oom = row("p3", "gpt2-test", 3, "oom");  // p3's first row; its rerun is ok
  const auto results = write_rows(
      "summary", {ok("p1", 1, 100, 0.05), rerun_oom, ok("p2", 2, 300, 0.2), ok("p3", 3, 250, 0.3),
                  ok("p4", 4, 200, 0.15), row("p5", "gpt2-test", 5, "oom"), row("p6", "gpt2-test", 6, "skipped"), eval});
  const RunSummary s = summarize_run(results, "OUT");
  const json j = s.json();
  EXPECT_EQ(j["run_json_version"], 1);
  EXPECT_EQ(j["dry_run"], false);
  EXPECT_EQ(j["counts"], (json{{"ok", 5}, {"oom", 1}, {"crash", 0}, {"timeout", 0}, {"skipped", 1}}));
  EXPECT_EQ(j["count"], 7);
  EXPECT_EQ(j["fastest"]["point_id"], "p2");
  EXPECT_EQ(j["fastest"]["where"], results.path + ":4");
  EXPECT_EQ(j["fastest"]["tokens_per_s"], 300);
  EXPECT_EQ(j["fastest"]["configuration"]["batch"], 2);
  EXPECT_EQ(j["fastest"]["configuration"]["precision"], "fp32");
  EXPECT_EQ(j["noisy"]["points"], 3);
  EXPECT_EQ(j["noisy"]["ok_train_points"], 4);
  EXPECT_EQ(j["noisy"]["warning"], true);
  EXPECT_EQ(j["noisy"]["worst"]["point_id"], "p3");
  EXPECT_EQ(j["noisy"]["threshold_cv"], 0.1);
  EXPECT_FALSE(j["noisy"]["advice"].is_null());
  EXPECT_EQ(j["results"], results.path);
  EXPECT_EQ(j["report"]["markdown"], "OUT/report.md");
  EXPECT_EQ(j["next"], "sweep recommend OUT --gpu NAME");
  const std::string text = s.text();
  EXPECT_NE(text.find("summary: 5 ok, 1 oom, 1 skipped\n"), std::string::npos) << text;
  EXPECT_NE(text.find("fastest train row: gpt2-test batch 2, fp32, checkpointing none, adamw: 300 tokens/s"),
            std::string::npos) << text;
  EXPECT_NE(text.find("warning: noisy machine: the step time varied more than 10% between repetitions "
                      "at 3 of 4 ok train points (worst 30%"), std::string::npos) << text;
  EXPECT_NE(text.find("\nhint: "), std::string::npos) << text;

  // Two noisy points among many is no machine problem; one of one is.
  std::vector<json> rows;
  for (int i = 0; i < 10; ++i) rows.push_back(ok("q" + std::to_string(i), i + 1, 100, i < 2 ? 0.5 : 0.01));
  const RunSummary quiet = summarize_run(write_rows("summary_quiet", rows), "OUT");
  EXPECT_FALSE(quiet.warn_noisy());
  EXPECT_EQ(quiet.json()["noisy"]["points"], 2);
  EXPECT_TRUE(quiet.json()["noisy"]["advice"].is_null());
  EXPECT_EQ(quiet.text().find("warning"), std::string::npos);
  EXPECT_TRUE(summarize_run(write_rows("summary_one", {ok("r", 1, 100, 0.4)}), "OUT").warn_noisy());
  // The fastest row is named with every technique it used: a LoRA row is not full fine-tuning.
  auto lora = ok("l", 4, 500, 0.01);
  lora["adapter"] = "lora";
  lora["lora_r"] = 8;
  lora["use_cache"] = 0;
  EXPECT_NE(summarize_run(write_rows("summary_lora", {ok("f", 4, 100, 0.01), lora}), "OUT")
                .text()
                .find("fastest train row: gpt2-test batch 4, fp32, checkpointing none, adamw, lora r8, "
                      "use_cache=False: 500 tokens/s"),
            std::string::npos);
  // Nothing ran ok: no fastest row.
  EXPECT_TRUE(summarize_run(write_rows("summary_none", {row("z", "gpt2-test", 1, "oom")}), "OUT").json()["fastest"].is_null());
}

std::string tiny_config(const std::filesystem::path& dir) {
  return testing::write_file(dir / "tiny.yaml",
                             "device: cpu\nsteps: 1\nwarmup_steps: 1\nrepetitions: 2\ntimeout_s: 60\n"
                             "models: [gpt2-test]\ngrid: {seq: 32, batch: [1, 2]}\n");
}

TEST(RunJson, TheSummaryAndTheDryRunOnStdout) {
  const auto dir = testing::temp_dir("run_json");
  const auto cfg = tiny_config(dir);
  const std::string out = (dir / "out").string();
  auto r = testing::run_sweep_cli_split("run " + cfg + " --out " + out + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json j = json::parse(r.out);  // all of stdout; progress went to stderr
  EXPECT_NE(r.err.find("[2/2] ok"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("summary:"), std::string::npos) << r.err;
  EXPECT_EQ(j["run_json_version"], 1);
  EXPECT_EQ(j["counts"]["ok"], 2);
  EXPECT_EQ(j["results"], out + "/results.csv");
  EXPECT_EQ(j["fastest"]["configuration"]["model"], "gpt2-test");
  EXPECT_EQ(j["fastest"]["where"].get<std::string>().rfind(out + "/results.csv:", 0), 0u) << j.dump(2);
  EXPECT_GT(j["fastest"]["tokens_per_s"].get<double>(), 0);
  EXPECT_TRUE(std::filesystem::exists(j["report"]["markdown"].get<std::string>()));
  // The same values as the file: the fastest row is the file's highest tokens/s.
  double best = 0;
  for (const auto& row : reports::read_results(out).rows)
    best = std::max(best, row.number(schema::column("tokens_per_s")).value_or(0));
  EXPECT_DOUBLE_EQ(j["fastest"]["tokens_per_s"].get<double>(), best);

  // The dry run of a larger grid: two points measured, batch 4 estimated from them, t5-test never.
  const std::string more = " grid.batch=[1,2,4] 'models=[gpt2-test, t5-test]'";
  r = testing::run_sweep_cli_split("run " + cfg + " --out " + out + " --dry-run --json" + more);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json d = json::parse(r.out);
  EXPECT_EQ(d["dry_run"], true);
  EXPECT_EQ(d["count"], 6);
  std::map<std::string, json> by_label;
  for (const auto& p : d["points"]) by_label[p["label"].get<std::string>()] = p;
  ASSERT_EQ(by_label.size(), 6u);
  int measured = 0, unknown = 0;
  for (const auto& [label, p] : by_label) {
    measured += p["already_measured"].get<bool>();
    if (label.rfind("t5-test", 0) == 0) {
      EXPECT_TRUE(p["estimate_s"].is_null()) << label;
      ++unknown;
    } else if (!p["already_measured"].get<bool>()) {
      EXPECT_EQ(p["estimate_basis"], "same model, shape and precision") << label;
      EXPECT_GT(p["estimate_s"].get<double>(), 0) << label;
      EXPECT_EQ(p["configuration"]["batch"], 4) << label;
    }
  }
  EXPECT_EQ(measured, 2);
  EXPECT_EQ(unknown, 3);
  EXPECT_EQ(d["estimate"]["estimated"], 1);
  EXPECT_EQ(d["estimate"]["already_measured"], 2);
  EXPECT_EQ(d["estimate"]["no_estimate"], 3);
  EXPECT_EQ(d["estimate"]["rows"], 2);
  EXPECT_GT(d["estimate"]["worker_start_s"].get<double>(), 0);
  // As text: the count, the estimate, and each point that is not estimated, named.
  auto t = testing::run_sweep_cli("run " + cfg + " --out " + out + " --dry-run" + more);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find("6 points, device cpu"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("estimate: about "), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("t5-test b=1 seq=32"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("(no estimate: never measured here)"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("(already measured)"), std::string::npos) << t.output;
  // --force runs the measured points again: they are estimated, not skipped.
  r = testing::run_sweep_cli_split("run " + cfg + " --out " + out + " --dry-run --json --force" + more);
  EXPECT_EQ(json::parse(r.out)["estimate"]["estimated"], 3) << r.out;
  // Another output directory knows nothing, unless told where rows were measured.
  const std::string other = (dir / "other").string();
  r = testing::run_sweep_cli_split("run " + cfg + " --out " + other + " --dry-run --json");
  EXPECT_EQ(json::parse(r.out)["estimate"]["no_estimate"], 2) << r.out;
  EXPECT_FALSE(std::filesystem::exists(other));  // a dry run writes nothing
  r = testing::run_sweep_cli_split("run " + cfg + " --out " + other + " --dry-run --json --estimate-from " + out);
  const json e = json::parse(r.out);
  EXPECT_EQ(e["estimate"]["estimated"], 2) << r.out;
  EXPECT_EQ(e["estimate"]["sources"], json::array({out + "/results.csv"}));
  EXPECT_EQ(e["points"][0]["estimate_basis"], "same model, shape, precision and batch");
}

}  // namespace
}  // namespace sweep

namespace sweep {
namespace {

TEST(RunJson, SlurmSubmissionRefusesJsonWithAHint) {
  const auto dir = testing::temp_dir("run_json_slurm");
  const auto r = testing::run_sweep_cli_split("run " + tiny_config(dir) + " --slurm --json --out " +
                                              (dir / "out").string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("error: --json: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\nhint: drop --json"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
}

// Predicted rows (device emulated) are never the fastest measured, and are said to be
// predictions whose tokens/s is the step-time model's (tests/data/predicted_rtx3060.csv).
TEST(RunSummary, PredictedRowsAreSaidSoAndNeverTheFastest) {
  const auto results = reports::read_results(std::string(SWEEP_TEST_DATA) + "/predicted_rtx3060.csv");
  const RunSummary s = summarize_run(results, "out");
  EXPECT_EQ(s.fastest, nullptr);
  EXPECT_EQ(s.predicted, 15);
  EXPECT_EQ(s.predicted_cards, std::vector<std::string>{"RTX 3060"});
  EXPECT_NE(s.text().find("predicted: 15 rows predicted by emulation of RTX 3060, not measured: "
                          "tokens/s, where a row has it, from the step-time model"),
            std::string::npos)
      << s.text();
  const auto j = s.json();
  EXPECT_TRUE(j.at("fastest").is_null());
  EXPECT_EQ(j.at("predicted").at("rows"), 15);
}

}  // namespace
}  // namespace sweep
