// Device emulated on the runner and CLI side: the config's `gpu:` in its three forms, the
// errors a user gets for an unknown card or a missing one, the budget (the card's memory less
// its context), point identity (the card in an emulated point's id, measured points' ids
// untouched), the dry run and `sweep gpus`, `fit`'s choice of device and its ranking by memory.
// The tests named *EndToEnd* need the emulated worker (sweeps/worker/emulate): until it lands
// the worker measures an emulated point on the CPU, and they skip.
#include <gtest/gtest.h>

#include <regex>

#include <nlohmann/json.hpp>

#include "reports/results/cards.h"
#include "reports/results/rows.h"
#include "sweeps/cli/fit_analysis.h"
#include "sweeps/measure/env.h"
#include "sweeps/runner/budget.h"
#include "sweeps/runner/config.h"
#include "sweeps/runner/grid.h"
#include "sweeps/runner/results_store.h"
#include "sweeps/worker/point.h"
#include "test_util.h"

namespace sweep {
namespace {

using reports::kGiB;
using schema::column;

Config config_of(const std::string& name, const std::string& yaml) {
  return load_config(
      testing::write_file(testing::temp_dir(name) / "c.yaml", "models: [gpt2-test]\n" + yaml));
}

UserError error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e;
  }
  ADD_FAILURE() << "no UserError";
  return UserError("", 0, "", "");
}

TEST(EmulatedConfig, ACardOfTheTableByKeyOrByName) {
  for (const std::string gpu : {"gpu: rtx3060", "gpu: \"RTX 3060\"", "gpu: {name: RTX 3060}"}) {
    const Config c = config_of("by_key", "device: emulated\n" + gpu + "\n");
    ASSERT_TRUE(c.gpu) << gpu;
    EXPECT_EQ(c.gpu->name, "RTX 3060") << gpu;
    EXPECT_EQ(c.gpu->key, "rtx3060") << gpu;
    EXPECT_EQ(c.gpu->memory_gib, 11.75) << gpu;
    EXPECT_EQ(c.gpu->cc_major * 10 + c.gpu->cc_minor, 86) << gpu;
    EXPECT_EQ(c.gpu->sms, 28) << gpu;
    const EmulatedCard card = emulated_card_of(c);
    EXPECT_EQ(card.memory_bytes, 12616466432);
    EXPECT_EQ(card.context_bytes, kDefaultCudaContextBytes);  // not measured on a 3060
  }
  // The H100's allowance is the one measured on it.
  EXPECT_EQ(emulated_card_of(config_of("h100", "gpu: h100-80gb\n")).context_bytes, 804061184);
}

TEST(EmulatedConfig, TodaysNameAndMemoryFormStillEmulatesABudget) {
  const Config c = config_of("today", "gpu: {name: \"RTX 3060\", memory_gib: 11.75}\n");
  ASSERT_TRUE(c.gpu);
  EXPECT_FALSE(c.gpu->context_gib);
  const Budget b = resolve_budget(c, Device::kCpu, {});
  EXPECT_EQ(b.bytes, static_cast<int64_t>(11.75 * kGiB));
  EXPECT_TRUE(b.emulated);
  // A card of the table keeps its compute capability and SMs: it can be predicted too.
  EXPECT_EQ(emulated_card_of(c).sms, 28);
}

TEST(EmulatedConfig, ACardWrittenOut) {
  const Config c = config_of("written",
                             "device: emulated\ngpu: {name: \"Lab card\", memory_gib: 20, "
                             "context_gib: 0.25, compute_capability: 8.9, sms: 60}\n");
  const EmulatedCard card = emulated_card_of(c);
  EXPECT_EQ(card.name, "Lab card");
  EXPECT_EQ(card.memory_bytes, 20 * int64_t{1} << 30);
  EXPECT_EQ(card.context_bytes, int64_t{1} << 28);
  EXPECT_EQ(card.cc_major, 8);
  EXPECT_EQ(card.cc_minor, 9);
  EXPECT_EQ(card.sms, 60);
  // Without compute capability or SMs a card can be a budget, not a prediction.
  const Config budget_only =
      config_of("budget_only", "device: emulated\ngpu: {name: \"Lab card\", memory_gib: 20}\n");
  const auto e = error_of([&] { emulated_card_of(budget_only); });
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.key(), "gpu.compute_capability");
  EXPECT_NE(e.hint().find("compute_capability: 8.6, sms: 28"), std::string::npos) << e.hint();
}

TEST(EmulatedConfig, AnUnknownCardNamesTheKnownOnesAndTheNearest) {
  auto path = testing::write_file(testing::temp_dir("unknown_card") / "c.yaml",
                                  "models: [gpt2-test]\ngpu: rtx3600\n");
  const auto e = error_of([&] { load_config(path); });
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.key(), "gpu");
  EXPECT_NE(std::string(e.what()).find("unknown card 'rtx3600'"), std::string::npos) << e.what();
  EXPECT_NE(e.hint().find("did you mean rtx3060?"), std::string::npos) << e.hint();
  EXPECT_NE(e.hint().find("known cards: rtx3060, t4,"), std::string::npos) << e.hint();
  auto by_name = testing::write_file(testing::temp_dir("unknown_name") / "c.yaml",
                                     "models: [gpt2-test]\ngpu:\n  name: RTX 4080\n");
  EXPECT_EQ(error_of([&] { load_config(by_name); }).key(), "gpu.name");
  auto bad_cc = testing::write_file(
      testing::temp_dir("bad_cc") / "c.yaml",
      "models: [gpt2-test]\ngpu: {name: x, memory_gib: 8, compute_capability: eight}\n");
  EXPECT_EQ(error_of([&] { load_config(bad_cc); }).key(), "gpu.compute_capability");
}

// A compute capability no torch 2.11 build runs (3.0), and a card of another memory under a
// table card's name ("RTX 3060" with 48 GiB, read back as the RTX 3060): refused at their line.
TEST(EmulatedConfig, ACardTorchCannotRunOrNamedLikeATableCardOfAnotherMemoryIsRefused) {
  const auto dir = testing::temp_dir("odd_cards");
  auto old_cc = testing::write_file(
      dir / "old.yaml", "models: [gpt2-test]\ngpu: {name: x, memory_gib: 8, compute_capability: 3.0, sms: 8}\n");
  const auto e = error_of([&] { load_config(old_cc); });
  EXPECT_EQ(e.key(), "gpu.compute_capability");
  EXPECT_EQ(e.line(), 2);
  EXPECT_NE(std::string(e.what()).find("sm_30 is older than any card torch 2.11 runs on"), std::string::npos)
      << e.what();
  auto oldest = testing::write_file(
      dir / "oldest.yaml", "models: [gpt2-test]\ngpu: {name: x, memory_gib: 8, compute_capability: 5.0, sms: 8}\n");
  EXPECT_EQ(load_config(oldest).gpu->cc_major, 5);

  auto named = testing::write_file(dir / "named.yaml",
                                   "models: [gpt2-test]\ngpu: {name: \"RTX 3060\", memory_gib: 48}\n");
  const auto n = error_of([&] { load_config(named); });
  EXPECT_EQ(n.key(), "gpu.memory_gib");
  EXPECT_NE(std::string(n.what()).find("'RTX 3060' is the table's RTX 3060, a card of 12 GiB, not 48"),
            std::string::npos)
      << n.what();
  EXPECT_NE(n.hint().find("a name of its own"), std::string::npos) << n.hint();
}

TEST(EmulatedConfig, DeviceEmulatedWithoutACardSaysWhatToAdd) {
  const Config c = config_of("no_card", "device: emulated\n");
  const auto e = error_of([&] { resolve_budget(c, Device::kEmulated, {}); });
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.key(), "device");
  EXPECT_NE(std::string(e.what()).find("names none"), std::string::npos) << e.what();
  EXPECT_NE(e.hint().find("gpu: rtx3060"), std::string::npos) << e.hint();
}

// The card's memory less its context is the emulated allocator's; a budget may not exceed it,
// as a budget may not exceed a real GPU.
TEST(EmulatedBudget, TheCardLessItsContextAndNoMore) {
  const Budget b = resolve_budget(config_of("budget", "gpu: rtx3060\n"), Device::kEmulated, {});
  EXPECT_EQ(b.bytes, 0);  // the whole card: the worker caps at memory - context
  EXPECT_FALSE(b.emulated);
  EXPECT_EQ(b.context_bytes, kDefaultCudaContextBytes);
  EXPECT_NE(b.note.find(predicted_by("RTX 3060")), std::string::npos) << b.note;
  EXPECT_EQ(resolve_budget(config_of("budget_ok", "gpu: rtx3060\nbudget_gib: 11\n"),
                           Device::kEmulated, {})
                .bytes,
            11 * int64_t{1} << 30);
  const auto e = error_of([&] {
    resolve_budget(config_of("budget_over", "gpu: rtx3060\nbudget_gib: 11.5\n"), Device::kEmulated,
                   {});
  });
  EXPECT_EQ(e.key(), "budget_gib");
  EXPECT_EQ(e.line(), 3);
}

Point emulated_point(const std::string& card_key) {
  Point p = tiny_point("gpt2-test", Device::kEmulated, Precision::kFp32, OptimizerKind::kAdamW);
  p.card = facts_of(*find_card(card_key));
  return p;
}

TEST(EmulatedIdentity, TwoCardsAreTwoPointsAndMeasuredIdsStay) {
  const Point a = emulated_point("rtx3090"), b = emulated_point("rtx4090");
  EXPECT_NE(a.id(), b.id());
  Point cpu = tiny_point("gpt2-test", Device::kCpu, Precision::kFp32, OptimizerKind::kAdamW);
  const std::string cpu_id = cpu.id();
  cpu.card = a.card;  // a card on a measured point is no axis of it
  EXPECT_EQ(cpu.id(), cpu_id);
  EXPECT_FALSE(axis_cells(cpu).contains("card"));
  EXPECT_NE(a.id(), cpu_id);
  // The same card with another context allowance is another prediction.
  Point c = a;
  c.card.context_bytes += 1;
  EXPECT_NE(c.id(), a.id());
}

TEST(EmulatedIdentity, AnEmulatedRowReadsBackToTheSamePoint) {
  const Point p = emulated_point("l4");
  nlohmann::json row = axis_cells(p);
  EXPECT_EQ(row.at("card"), card_cell(facts_of(*find_card("l4"))));
  row["schema_version"] = schema::kSchemaVersion;
  row["point_id"] = p.id();
  row["status"] = "ok";
  row["peak_allocated_bytes"] = 1 << 20;  // an ok row has its peaks (rows.h)
  row["peak_reserved_bytes"] = 2 << 20;
  const auto dir = testing::temp_dir("emulated_row");
  {
    ResultsStore store(dir.string());
    store.append(row);
  }
  const Point q = point_of(reports::read_results(dir.string()).rows.front());
  EXPECT_EQ(nlohmann::json(q), nlohmann::json(p));  // the card object the worker reads, too
  EXPECT_EQ(q.id(), p.id());
}

TEST(EmulatedGrid, EveryPointCarriesTheCard) {
  const Config c = config_of("grid", "device: emulated\ngpu: t4\ngrid: {batch: [1, 2]}\n");
  RunSettings run;
  run.device = Device::kEmulated;
  run.card = emulated_card_of(c);
  for (const Point& p : expand_grid(c, run)) EXPECT_EQ(p.card.name, "T4");
  run.device = Device::kCpu;
  for (const Point& p : expand_grid(c, run)) EXPECT_TRUE(p.card.name.empty());
}

std::string emulated_config(const std::string& name, const std::string& extra = "") {
  return testing::write_file(
      testing::temp_dir(name) / "e.yaml",
      "device: emulated\ngpu: rtx3060\nsteps: 1\nwarmup_steps: 1\nrepetitions: 1\n"
      "models: [gpt2-test]\ngrid: {seq: 32, batch: [1, 2]}\n" +
          extra);
}

TEST(EmulatedCli, TheDryRunSaysEveryRowWillBePredicted) {
  const auto cfg = emulated_config("dry");
  auto r = testing::run_sweep_cli_split("run " + cfg + " --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2 points, device emulated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("every row will be predicted by emulation of RTX 3060, not measured"),
            std::string::npos)
      << r.out;
  // Another card, another set of points.
  auto other = testing::run_sweep_cli_split("run " + cfg + " --dry-run gpu=rtx4090");
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(other.out.find(r.out.substr(0, 16)), std::string::npos) << "same id for two cards";
  auto j = testing::run_sweep_cli_split("run " + cfg + " --dry-run --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto json = nlohmann::json::parse(j.out);
  EXPECT_EQ(json.at("device"), "emulated");
  EXPECT_EQ(json.at("predicted"), predicted_by("RTX 3060"));
  EXPECT_EQ(json.at("points").at(0).at("configuration").at("card").at("sms"), 28);
}

TEST(EmulatedCli, DeviceEmulatedWithoutACardExitsTwo) {
  const auto cfg =
      testing::write_file(testing::temp_dir("no_card_cli") / "c.yaml", "models: [gpt2-test]\n");
  const auto r = testing::run_sweep_cli("run " + cfg + " --dry-run --device emulated");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("device emulated predicts a card, and the config names none"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("hint: add `gpu: rtx3060`"), std::string::npos) << r.output;
  const auto bad = testing::write_file(testing::temp_dir("bad_card_cli") / "c.yaml",
                                       "models: [gpt2-test]\ngpu: rtx3600\n");
  const auto u = testing::run_sweep_cli("run " + bad + " --dry-run --device emulated");
  EXPECT_EQ(u.exit_code, 2) << u.output;
  EXPECT_NE(u.output.find(bad + ":2: gpu: unknown card 'rtx3600'"), std::string::npos) << u.output;
  EXPECT_NE(u.output.find("did you mean rtx3060?"), std::string::npos) << u.output;
}

TEST(EmulatedCli, GpusListsTheCardTable) {
  const auto r = testing::run_sweep_cli_split("gpus");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rtx3060"), std::string::npos);
  EXPECT_NE(r.out.find("sm_89"), std::string::npos);
  const auto j = testing::run_sweep_cli_split("gpus --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(nlohmann::json::parse(j.out).at("gpus").size(), cards().size());
}

TEST(EmulatedCli, FitRefusesEmulationWithoutANamedCard) {
  auto r = testing::run_sweep_cli("fit gpt2-test --memory-gib 1 --device emulated");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--memory-gib names none"), std::string::npos) << r.output;
  r = testing::run_sweep_cli("fit gpt2-test --gpu rtx3600 --device emulated");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("did you mean rtx3060?"), std::string::npos) << r.output;
}

// The ranking fit uses on an emulated card: nothing is timed, so the fewest changes from
// plain training that fit, at their largest micro-batch reaching the effective batch.
TEST(EmulatedFit, ThePickIsRankedByMemory) {
  const auto dir = testing::temp_dir("pick_by_memory");
  // The question: gpt2-test predicted on an RTX 3060 under 100 MiB, two techniques.
  Point question = emulated_point("rtx3060");
  question.budget_bytes = 100 << 20;
  Point bf16 = question;
  bf16.precision = Precision::kBf16Amp;
  bf16.checkpointing = Checkpointing::kBlock;
  {
    ResultsStore store(dir.string());
    auto probe = [&](Point p, int batch, const char* status, double peak) {
      p.batch = batch;
      nlohmann::json row = axis_cells(p);
      row["schema_version"] = schema::kSchemaVersion;
      row["point_id"] = p.id();
      row["search"] = "max_batch";
      row["status"] = status;
      row["device_name"] = "RTX 3060 (emulated)";
      if (std::string(status) == "ok") row["peak_reserved_bytes"] = row["peak_allocated_bytes"] = peak;
      store.append(row);
    };
    for (int b : {1, 2, 4}) probe(question, b, "ok", b * 20e6);
    probe(question, 8, "oom", 0);
    for (int b : {1, 2, 4, 8, 16}) probe(bf16, b, "ok", b * 5e6);
    probe(bf16, 32, "oom", 0);
  }
  const auto results = reports::read_results(dir.string());
  std::vector<FitTechnique> wanted = {
      {Precision::kFp32, Checkpointing::kNone, OptimizerKind::kAdamW},
      {Precision::kBf16Amp, Checkpointing::kBlock, OptimizerKind::kAdamW}};
  const Analysis a = analyse(results, {question, bf16}, wanted);
  // A ceiling above every probe: every fitting probe is under it.
  const reports::FitRule rule{1LL << 40, 0, 0.1, true, ""};
  auto p = pick(a, PickQuestion{.rule = rule, .predicted = true});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->technique->precision, Precision::kFp32);  // fewer changes, though a smaller batch
  EXPECT_EQ(p->batch, 4);
  EXPECT_EQ(p->peak_reserved, 80e6);
  p = pick(a, PickQuestion{.rule = rule, .effective = 16, .predicted = true});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->batch, 4);
  EXPECT_EQ(p->accumulation, 4);
  // Refused at its accumulation (out of memory once gradients accumulate): the next.
  p = pick(a, PickQuestion{.rule = rule, .effective = 16, .predicted = true, .refused = {pick_id(*p)}});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->technique->precision, Precision::kFp32);
  EXPECT_EQ(p->batch, 2);
  EXPECT_EQ(technique_count(wanted[1]), 2);
}

// Without a GPU, `fit --gpu` predicts the card (the emulated worker, sweeps/worker/emulate), says
// so before it starts, and answers by memory alone. On a GPU host fit measures instead.
TEST(EmulatedFit, FitWithoutAGpuPredictsTheCardEndToEnd) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: fit measures on it";
  const auto out = testing::temp_dir("fit_emulated") / "out";
  const auto r = testing::run_sweep_cli_split(
      "fit gpt2-test --gpu rtx3060 --seq 32 --precision fp32 --checkpointing none --optimizer "
      "adamw --offload none "
      "--max-batch 2 --out " +
      out.string());
  // Before anything runs (the first line of stderr).
  EXPECT_EQ(r.err.rfind("fit gpt2-test (seq 32) on RTX 3060: " + predicted_by("RTX 3060"), 0), 0u) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = reports::read_results(out.string()).rows;
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.front().at(column("device")), "emulated");
  EXPECT_EQ(rows.front().at(column("card")), card_cell(facts_of(*find_card("rtx3060"))));
  EXPECT_EQ(rows.front().at(column("device_name")), emulated_device_name("RTX 3060"));
  // Predicted step time (issue 35): every ok row carries a predicted speed, never measured.
  for (const auto& row : rows)
    if (row.status == reports::Status::kOk)
      EXPECT_GT(row.number(column("tokens_per_s")).value_or(0), 0) << row.where();
  EXPECT_NE(r.out.find("Predicted by emulation of RTX 3060, not measured"), std::string::npos)
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\| \d+ predicted \|)"))) << r.out;
  EXPECT_NE(r.out.find("Recommended (" + predicted_by("RTX 3060") + ")"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("ranked by memory"), std::string::npos) << r.out;
}


// An out-of-memory failure that the code catches and recovers from (cuDNN's plan search tries
// workspaces that may not fit) fires the allocator's observer, which writes PREFIX.oom.pickle;
// a point that then finishes ok keeps only its snapshot, not that one. A failure that ends the
// point keeps it, with its gap. On an emulated card, whose allocator writes the same files.
TEST(OomSnapshot, ARecoveredOomLeavesNoOomSnapshot) {
  const auto dir = testing::temp_dir("oom_snapshot");
  nlohmann::json p = {{"model", "gpt2-test"}, {"family", "gpt2"}, {"batch", 2}, {"seq", 32},
                      {"device", "emulated"}, {"warmup_steps", 1}, {"steps", 1}, {"repetitions", 1},
                      {"card", {{"name", "RTX 3060"}, {"memory_bytes", 12616466432LL},
                                {"context_bytes", 0}, {"cc_major", 8}, {"cc_minor", 6},
                                {"sms", 28}, {"cpu", false}}}};
  for (const auto& [fault, ends] : {std::pair{"recovered-oom:forward", false}, std::pair{"oom:forward", true}}) {
    const auto prefix = (dir / (std::string(fault).substr(0, 4))).string();
    const auto run = testing::run_sweep_cli_split(
        "worker --point '" + p.dump() + "' --result-fd 1",
        "SWEEP_SNAPSHOT=" + prefix + " SWEEP_TEST_FAULT=" + fault);
    ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
    const auto m = nlohmann::json::parse(run.out.substr(run.out.rfind('{')));
    EXPECT_EQ(m.at("status"), ends ? "oom" : "ok") << fault << ": " << m.dump();
    EXPECT_TRUE(std::filesystem::exists(prefix + ".pickle")) << fault;
    EXPECT_EQ(std::filesystem::exists(prefix + ".oom.pickle"), ends) << fault;
    EXPECT_EQ(m.contains("oom_gap_bytes"), ends) << fault << ": " << m.dump();
  }
}

}  // namespace
}  // namespace sweep
