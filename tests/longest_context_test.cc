// The longest context (issue 53 item 3): `sweep fit MODEL --gpu CARD --seq max` and a config's
// `search: max_seq`, the max-batch search turned to the tokens per sample; and `fit --trainer`,
// Trainer and TRL's SFTTrainer side by side. Each answer is checked against the rows it came
// from: the longest seq ran, the next step ran out of memory.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

#include "reports/results/rows.h"
#include "reports/results/schema.h"
#include "sweeps/runner/search.h"
#include "test_util.h"

namespace sweep {
namespace {

using schema::column;

const std::string kQwen = SWEEP_SOURCE_DIR "/tests/fixtures/configs/qwen2.5-0.5b-2layers/config.json";

nlohmann::json fit_json(const std::string& args, const std::filesystem::path& out) {
  const auto r = testing::run_sweep_cli("fit " + args + " --json --quiet --out " + out.string() + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto at = r.output.find('{');
  if (at == std::string::npos) return nlohmann::json::object();
  return nlohmann::json::parse(r.output.substr(at));
}

// The status of the max_seq probe of `trainer` at `seq` in OUT's rows ("" when none ran).
std::string probe_status(const reports::Results& results, const std::string& trainer, int64_t seq) {
  for (const auto& r : results.rows)
    if (r.at(column("search")) == "max_seq" && r.at(column("trainer")) == trainer &&
        r.number(column("seq")) == static_cast<double>(seq))
      return r.at(column("status"));
  return "";
}

// The search itself: steps of 64 tokens, stopped once the first length out of memory is within
// 1% of the longest that fits (one step where 1% is less than a step).
TEST(LongestContext, TheSearchStopsWithinOnePercentOrOneStep) {
  const SearchedAxis seq = searched_axis("max_seq");
  EXPECT_EQ(seq.column, "seq");
  EXPECT_EQ(seq.step, kSeqStep);
  for (const int64_t fits_up_to : {100, 1000, 20000, 123456}) {
    const auto r = search_max_batch(
        1, (int64_t{1} << 20) / kSeqStep, 1e9,
        [&](int64_t steps) {
          const int64_t tokens = steps * kSeqStep;
          return ProbeOutcome{tokens <= fits_up_to ? Status::kOk : Status::kOom, 1e3 * static_cast<double>(tokens)};
        },
        std::nullopt, seq);
    ASSERT_TRUE(r.largest_fit && r.first_oom) << fits_up_to;
    const int64_t longest = *r.largest_fit * kSeqStep, oom = *r.first_oom * kSeqStep;
    EXPECT_LE(longest, fits_up_to);
    EXPECT_GT(oom, fits_up_to);
    EXPECT_LE(oom - longest, std::max<int64_t>(kSeqStep, longest / 100)) << fits_up_to;
    EXPECT_LT(r.probed.size(), 24u) << fits_up_to;
  }
  const auto crash = search_max_batch(1, 100, 0, [](int64_t) { return ProbeOutcome{Status::kCrash, 0}; },
                                      std::nullopt, seq);
  EXPECT_EQ(crash.stopped, "seq 64: crash");
}

// `fit --seq max` on an emulated RTX 3060: each trainer's longest seq at batch 1, both found
// in the rows (the longest ok, the next step out of memory, or the model's
// max_position_embeddings reached), SFTTrainer's longer (no fp32 logits), and the answer in
// SFTConfig's words with max_length.
TEST(LongestContext, FitSeqMaxAnswersEachTrainersLongestFromItsRows) {
  const auto dir = testing::temp_dir("longest-context");
  const auto j = fit_json(kQwen + " --gpu rtx3060 --seq max --adapter lora --precision bf16-amp "
                          "--checkpointing block --optimizer adamw --offload none",
                          dir / "out");
  ASSERT_EQ(j.value("search", ""), "max_seq") << j.dump(2);
  EXPECT_EQ(j["batch"], 1);
  EXPECT_EQ(j["seq_limit"], 32768);  // the config's max_position_embeddings
  EXPECT_TRUE(j["predicted"].get<bool>());
  EXPECT_FALSE(j.contains("techniques"));
  ASSERT_EQ(j["longest_context"].size(), 2u) << j.dump(2);
  const auto results = reports::read_results((dir / "out").string());
  std::map<std::string, int64_t> longest;
  for (const auto& t : j["longest_context"]) {
    const std::string trainer = t["trainer"];
    ASSERT_FALSE(t["longest_seq"].is_null()) << t.dump();
    const int64_t seq = t["longest_seq"];
    longest[trainer] = seq;
    EXPECT_EQ(seq % kSeqStep, 0) << t.dump();
    EXPECT_LE(seq, 32768);
    EXPECT_EQ(t["use_cache"], trainer == "hf");  // SFTTrainer runs without the cache
    EXPECT_EQ(probe_status(results, trainer, seq), "ok") << trainer << " " << seq;
    if (t["first_oom_seq"].is_null()) {
      EXPECT_EQ(seq, 32768) << "no length out of memory below the model's longest: " << t.dump();
    } else {
      const int64_t oom = t["first_oom_seq"];
      EXPECT_EQ(probe_status(results, trainer, oom), "oom") << trainer << " " << oom;
      EXPECT_GT(oom, seq);
      EXPECT_LE(oom - seq, std::max<int64_t>(kSeqStep, seq / 100)) << t.dump();
      EXPECT_LE(t["peak_reserved_bytes"].get<double>(), j["card"]["cap_bytes"].get<double>());
    }
  }
  EXPECT_GT(longest["sft"], longest["hf"]);
  const auto& rec = j["recommendation"];
  ASSERT_TRUE(rec.is_object()) << j.dump(2);
  EXPECT_EQ(rec["trainer"], "sft");
  EXPECT_EQ(rec["longest_seq"], longest["sft"]);
  EXPECT_EQ(rec["batch"], 1);
  const std::string text = rec["trainer_args"]["text"];
  EXPECT_NE(text.find("args = SFTConfig("), std::string::npos) << text;
  EXPECT_NE(text.find("max_length=" + std::to_string(longest["sft"]) + ","), std::string::npos) << text;
  EXPECT_NE(text.find("per_device_train_batch_size=1,"), std::string::npos) << text;
  EXPECT_NE(text.find("peft_config=LoraConfig("), std::string::npos) << text;

  // Asked again, every probe is on record: the same answer, nothing run.
  const auto again = fit_json(kQwen + " --gpu rtx3060 --seq max --adapter lora --precision bf16-amp "
                              "--checkpointing block --optimizer adamw --offload none",
                              dir / "out");
  EXPECT_EQ(again["longest_context"], j["longest_context"]);
  EXPECT_EQ(reports::read_results((dir / "out").string()).rows.size(), results.rows.size());
}

// At --batch 2 the longest seq is shorter, searched at that batch.
TEST(LongestContext, AtABatchTheSearchRunsAtThatBatch) {
  const auto dir = testing::temp_dir("longest-context-batch");
  const auto one = fit_json(kQwen + " --gpu rtx3060 --seq max --trainer hf --adapter lora --precision "
                            "bf16-amp --checkpointing block --optimizer adamw --offload none",
                            dir / "one");
  const auto two = fit_json(kQwen + " --gpu rtx3060 --seq max --batch 2 --trainer hf --adapter lora "
                            "--precision bf16-amp --checkpointing block --optimizer adamw --offload none",
                            dir / "two");
  ASSERT_EQ(two["longest_context"].size(), 1u) << two.dump(2);
  EXPECT_EQ(two["batch"], 2);
  EXPECT_EQ(two["longest_context"][0]["batch"], 2);
  EXPECT_LT(two["longest_context"][0]["longest_seq"].get<int64_t>(),
            one["longest_context"][0]["longest_seq"].get<int64_t>());
  for (const auto& r : reports::read_results((dir / "two").string()).rows)
    EXPECT_EQ(r.at(column("batch")), "2");
}

// fit asks both trainers of a config.json decoder by default, Trainer alone of the zoo's GPT-2;
// SFTTrainer's combinations are use_cache=False, with and without checkpointing.
TEST(LongestContext, FitAsksBothTrainersOfAConfigJsonDecoder) {
  const auto dir = testing::temp_dir("fit-trainers");
  const auto j = fit_json(kQwen + " --gpu rtx3060 --seq 512 --precision bf16-amp --optimizer adamw "
                          "--offload none --max-batch 4",
                          dir / "qwen");
  std::map<std::string, int> by;
  for (const auto& t : j["techniques"]) {
    by[t["trainer"].get<std::string>() + "/" + t["checkpointing"].get<std::string>() + "/" +
       (t["use_cache"].get<bool>() ? "cache" : "no-cache")]++;
    ASSERT_FALSE(t["largest_batch"].is_null()) << t.dump();
  }
  const std::map<std::string, int> expected = {{"hf/none/cache", 1},     {"hf/none/no-cache", 1},
                                               {"hf/block/cache", 1},    {"sft/none/no-cache", 1},
                                               {"sft/block/no-cache", 1}};
  EXPECT_EQ(by, expected) << j.dump(2);
  const auto gpt2 = fit_json("gpt2-test --gpu rtx3060 --seq 64 --precision fp32 --checkpointing none "
                             "--optimizer adamw --offload none --max-batch 2",
                             dir / "gpt2");
  for (const auto& t : gpt2["techniques"]) EXPECT_EQ(t["trainer"], "hf");
  const auto asked = fit_json("gpt2-test --gpu rtx3060 --seq 64 --precision fp32 --checkpointing none "
                              "--optimizer adamw --offload none --max-batch 2 --trainer sft",
                              dir / "gpt2-sft");
  ASSERT_EQ(asked["techniques"].size(), 1u);
  EXPECT_EQ(asked["techniques"][0]["trainer"], "sft");
}

// Full fine-tuning: bf16 weights reach further than bf16 autocast over fp32 weights, but the
// pick keeps the user's numerics and says why; asked alone, bf16 is the answer.
TEST(LongestContext, TheLongestPickKeepsFp32MasterWeightsUnlessBf16IsAskedAlone) {
  const auto dir = testing::temp_dir("longest-context-bf16");
  const std::string rest = " --gpu rtx3060 --seq max --trainer hf --checkpointing block --optimizer adamw --offload none";
  const auto both = fit_json(kQwen + rest + " --precision bf16-amp,bf16", dir / "both");
  int64_t amp = 0, bf16 = 0;
  for (const auto& t : both["longest_context"])
    (t["precision"] == "bf16" ? bf16 : amp) = t["longest_seq"].get<int64_t>();
  ASSERT_GT(bf16, amp) << both.dump(2);
  EXPECT_EQ(both["recommendation"]["precision"], "bf16-amp");
  EXPECT_NE(both["recommendation"]["reason"].get<std::string>().find(
                "in bf16 weights (bf16, block checkpointing, adamw) reaches " + std::to_string(bf16)),
            std::string::npos)
      << both["recommendation"]["reason"];
  const auto alone = fit_json(kQwen + rest + " --precision bf16", dir / "alone");
  EXPECT_EQ(alone["recommendation"]["precision"], "bf16");
  EXPECT_EQ(alone["recommendation"]["longest_seq"], bf16);
}

// Questions that have no longest seq, or no SFTTrainer, exit 2 naming the flag (or the
// config's line) before anything runs.
TEST(LongestContext, QuestionsWithoutAnAnswerExitTwoNamingTheFlag) {
  const auto dir = testing::temp_dir("longest-context-bad");
  struct Case {
    std::string args, flag;
  } cases[] = {
      {"whisper-test --gpu rtx3060 --seq max", "--seq"},
      {"gpt2-test --gpu rtx3060 --batch 2", "--batch"},
      {"gpt2-test --gpu rtx3060 --seq max --effective-batch 8", "--effective-batch"},
      {"t5-test --gpu rtx3060 --trainer sft", "--trainer"},
      {"gpt2-test --gpu rtx3060 --trainer dpo", "--trainer"},
  };
  for (const auto& c : cases) {
    const auto r = testing::run_sweep_cli("fit " + c.args + " --out " + (dir / "out").string());
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.flag), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "out" / "results.csv"));
  const auto path = testing::write_file(dir / "c.yaml",
                                        "device: emulated\ngpu: rtx3060\nmodels: [whisper-test]\n"
                                        "search: max_seq\nout: " + (dir / "run").string() + "\n");
  const auto r = testing::run_sweep_cli("run " + path + " --quiet");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(path + ":4: search"), std::string::npos) << r.output;
}

// A config's `search: max_seq` runs the same search as fit: per combination, from the grid's seq.
TEST(LongestContext, AConfigSearchesTheLongestSeqPerCombination) {
  const auto dir = testing::temp_dir("longest-context-run");
  const auto path = testing::write_file(
      dir / "c.yaml", "device: emulated\ngpu: rtx3060\nmodels: [" + kQwen + "]\nsearch: max_seq\n"
                      "search_max_seq: 4096\nout: " + (dir / "out").string() + "\n"
                      "grid: {batch: 1, seq: 1024, precision: bf16-amp, checkpointing: block, trainer: [hf, sft]}\n");
  const auto r = testing::run_sweep_cli("run " + path + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto results = reports::read_results((dir / "out").string());
  std::map<std::string, double> longest;
  for (const auto& row : results.rows) {
    EXPECT_EQ(row.at(column("search")), "max_seq");
    const double seq = *row.number(column("seq"));
    EXPECT_GE(seq, 1024);
    EXPECT_LE(seq, 4096);
    if (row.at(column("status")) == "ok")
      longest[row.at(column("trainer"))] = std::max(longest[row.at(column("trainer"))], seq);
  }
  ASSERT_EQ(longest.size(), 2u);
  // SFTTrainer reaches search_max_seq; Trainer's fp32 logits stop it a step short of its first
  // length out of memory.
  EXPECT_EQ(longest["sft"], 4096);
  EXPECT_LT(longest["hf"], 4096);
  bool next_oom = false;
  for (const auto& row : results.rows)
    next_oom |= row.at(column("trainer")) == "hf" && row.at(column("status")) == "oom" &&
                *row.number(column("seq")) == longest["hf"] + kSeqStep;
  EXPECT_TRUE(next_oom) << longest["hf"];
}

}  // namespace
}  // namespace sweep
