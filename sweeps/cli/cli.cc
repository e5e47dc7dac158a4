// The sweep binary's subcommands; see cli.h.
#include "sweeps/cli/cli.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "models/zoo.h"
#include "reports/compare/compare.h"
#include "reports/common/gpus.h"
#include "reports/recommend/recommend.h"
#include "reports/report/report.h"
#include "reports/results/rows.h"
#include "sweeps/runner/budget.h"
#include "sweeps/runner/config.h"
#include "sweeps/cli/fit.h"
#include "sweeps/cli/tables.h"
#include "sweeps/cli/run_summary.h"
#include "sweeps/runner/shards.h"
#include "sweeps/runner/slurm.h"
#include "sweeps/runner/sweep.h"
#include "sweeps/runner/zygote.h"
#include "sweeps/worker/worker.h"

namespace sweep {
namespace {

// What --device takes: auto (a GPU when one is visible) or a device of the vocabulary.
std::vector<std::string> device_choices() {
  std::vector<std::string> names = {"auto"};
  for (const Device d : all_of<Device>()) names.push_back(to_string(d));
  return names;
}

void print_models() {
  int width = 16;  // the longest name (the catalogue's run to 24 characters)
  for (const auto& s : models::zoo()) width = std::max(width, static_cast<int>(s.name.size()));
  std::printf("%-*s %-11s %15s %6s %6s %5s  %-22s %s\n", width, "model", "family", "parameters",
              "layers", "hidden", "heads", "axes", "hugging face");
  for (const auto& s : models::zoo()) {
    std::string axes;
    for (const auto& a : s.axes) axes += (axes.empty() ? "" : ",") + a;
    const std::string digits = std::to_string(s.parameters);
    std::string params;  // thousands separated: "124,439,808"
    for (std::size_t i = 0; i < digits.size(); ++i)
      params += std::string(i > 0 && (digits.size() - i) % 3 == 0 ? "," : "") + digits[i];
    std::printf("%-*s %-11s %15s %6lld %6lld %5lld  %-22s %s\n", width, s.name.c_str(), s.family.c_str(),
                params.c_str(), static_cast<long long>(s.layers), static_cast<long long>(s.hidden),
                static_cast<long long>(s.heads), axes.c_str(),
                s.test_only                  ? "(test model)"
                : s.family == "whisper-cls" ? "(WhisperForAudioClassification: the encoder, 2 labels)"
                                            : s.hf_id.c_str());
  }
}

// After a run or a merge: OUT/report.md from the results file (like any later `sweep
// report`), then a run's closing summary from the file: what it holds now, the fastest row,
// what to run next.
int finish(const RunOutcome& o, bool quiet, bool json) {
  if (!o.report) return o.exit_code;
  reports::write_report(o.out, o.out);
  if (!o.summary) {
    if (!quiet) std::fprintf(stderr, "report:  %s/report.md (and report.html)\n", o.out.c_str());
    return o.exit_code;
  }
  const auto results = reports::read_results(o.out);  // the summary points into it
  const RunSummary summary = summarize_run(results, o.out);
  if (json) std::cout << summary.json().dump(2) << "\n";
  else if (!quiet) std::fputs(summary.text().c_str(), stderr);
  return o.exit_code;
}

// --slurm and its options on `sweep run`.
void add_slurm_options(CLI::App* run, SlurmOptions& slurm) {
  auto* flag = run->add_flag("--slurm", slurm.submit,
                             "Submit the sweep as a Slurm job array (one task per share of the "
                             "combinations) and a merge job; returns at once");
  auto need = [&](CLI::Option* o) { o->needs(flag)->group("Slurm (with --slurm)"); };
  need(run->add_option("--partition", slurm.partition, "Slurm partition"));
  need(run->add_option("--gres", slurm.gres, "Generic resources per task, e.g. gpu:1"));
  need(run->add_option("--max-parallel", slurm.max_parallel, "Array tasks running at once (%N)")
           ->check(reports::whole_number(1, 1'000'000, "a number of tasks")));
  need(run->add_option("--time", slurm.time, "Time limit per task, HH:MM:SS"));
  need(run->add_option("--account", slurm.account, "Slurm account"));
  need(run->add_option("--sbatch-arg", slurm.sbatch_args,
                       "Any other sbatch option for both jobs, attached: --sbatch-arg=--qos=high")
           ->allow_extra_args(false));
  run->add_option("--slurm-task", slurm.task, "Run array task I of OUT/slurm/plan.json (internal)")
      ->group("");
}

// `sweep merge OUT` and `sweep status OUT`.
void register_slurm_commands(CLI::App& app, int& exit_code) {
  auto out = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  auto* merge = app.add_subcommand("merge", "Merge a Slurm sweep's shards into results.csv (each "
                                            "point once) and render the report");
  merge->add_option("out", *out, "Output directory of `sweep run --slurm`")->required();
  merge->add_flag("--quiet,-q", *quiet, "Only errors and missing points");
  merge->callback([out, quiet, &exit_code] { exit_code = run_guarded([&] { return finish(merge_shards(*out, *quiet), *quiet, false); }); });
  auto status_out = std::make_shared<std::string>();
  auto* status = app.add_subcommand("status", "Done/total per array task of a Slurm sweep, and "
                                              "the jobs' states where squeue answers");
  status->add_option("out", *status_out, "Output directory of `sweep run --slurm`")->required();
  status->callback([status_out, &exit_code] { exit_code = run_guarded([&] { return print_status(*status_out); }); });
}

// An example under each command's --help (CLI11's footer), every one a command that runs
// here as written (tests/cli_habits_test.cc runs `--help` of each).
void add_examples(CLI::App& app) {
  const std::vector<std::pair<std::string, std::string>> examples = {
      {"fit", "sweep fit gpt2-medium --gpu rtx3060            # predicted by emulation without a GPU\n"
              "  sweep fit gpt2 --gpu rtx3060 --seq 512 --effective-batch 32\n"
              "  sweep fit gpt2-test --memory-gib 0.05 --device cpu   # measured on the CPU"},
      {"run", "sweep run configs/quickstart.yaml\n"
              "  sweep run configs/quickstart.yaml grid.batch=[1,2,4] --out results/mine --dry-run"},
      {"report", "sweep report results/quickstart"},
      {"recommend", "sweep recommend results/quickstart --gpu rtx3060"},
      {"compare", "sweep compare results/before results/after"},
      {"gpus", "sweep gpus --json"},
      {"tables", "sweep tables --card t4               # docs/tables/t4.md, t4.json and index.html"},
      {"models", "sweep models"},
      {"merge", "sweep merge results/big-sweep"},
      {"status", "sweep status results/big-sweep"},
  };
  for (const auto& [name, text] : examples)
    for (auto* sub : app.get_subcommands([&](CLI::App* a) { return a->get_name() == name; }))
      sub->footer("\nExample:\n  " + text);
}

// A LoRA setting's flag, its help and its check (schema::kAxes).
template <class T>
void add_setting_flag(CLI::App& fit, std::string_view column, T& flag) {
  const schema::Axis& a = *schema::find_axis(column);
  CLI::Option* option = fit.add_option(flag_of(column), flag, std::string(a.flag.empty() ? a.help : a.flag));
  const std::string what(a.flag_value);
  switch (a.values) {
    case schema::Values::kCount:
      option->check(reports::whole_number(1, a.max, what));
      break;
    case schema::Values::kPositive:
      option->check(reports::positive_number(static_cast<double>(a.max), what));
      break;
    case schema::Values::kProbability:
      option->check(reports::finite_number(0, 1, what));
      break;
    case schema::Values::kNames:
      option->delimiter(',');
      break;
    default:
      SWEEP_CHECK(false, "fit has no flag for the values of " + std::string(column));
  }
}

// `sweep fit MODEL --gpu CARD`: the question the tool is for.
void register_fit_command(CLI::App& app, int& exit_code) {
  auto fo = std::make_shared<FitOptions>();
  auto* fit = app.add_subcommand(
      "fit", "What fits on a card and what is fastest: a max-batch search per technique, then the "
             "recommendation, measured");
  fit->add_option("model", fo->model, "Model (sweep models lists them)")->required();
  fit->add_option("--gpu", fo->gpu,
                  "The card, by name (e.g. rtx3060, a100-80gb; `sweep gpus` lists them)");
  fit->add_option("--memory-gib", fo->memory_gib, "The card's memory in GiB, as CUDA reports it")
      ->check(reports::kMemoryGib);
  // Whole numbers read exactly, and bounds printed as numbers (the config's axis ranges).
  fit->add_option_function<std::string>(
         "--seq",
         [fo](const std::string& v) {
           if (v == "max") fo->seq_max = true;
           else fo->seq = std::stoll(v);
         },
         "Tokens per sample (default: what people train the model at: GPT-2 and T5 512, a "
         "config.json decoder 1024), or max: the longest seq each technique fits, at --batch")
      ->check(CLI::Validator(
          [tokens = reports::whole_number(1, 1 << 20, "a number of tokens")](std::string& v) {
            if (v == "max") return std::string();
            const std::string e = tokens(v);
            return e.empty() ? e : e + ", or max (the longest that fits)";
          },
          "1..1048576|max", "seq"));
  fit->add_option("--batch", fo->batch, "With --seq max: the batch the longest seq is searched at (default 1)")
      ->check(reports::whole_number(1, 1 << 30, "a batch"));
  fit->add_option("--target-seq", fo->target_seq,
                  "T5 decoder tokens (default 128); Whisper's label tokens (default 448, the most it takes)")
      ->check(reports::whole_number(1, 1 << 20, "a number of tokens"));
  fit->add_option("--audio-s", fo->audio_s, "Seconds of audio (Whisper; default 30, its window)")
      ->check(reports::positive_number(30, "a number of seconds"));
  fit->add_option("--effective-batch", fo->effective_batch,
                  "Micro-batch x accumulation to reach; the pick is measured at its accumulation")
      ->check(reports::whole_number(1, int64_t{1} << 20, "a number of samples"));
  fit->add_option("--precision", fo->precisions, "Precisions to try (default fp32 bf16-amp bf16)")
      ->delimiter(',');
  fit->add_option("--checkpointing", fo->checkpointing, "Checkpointing to try (default none block)")
      ->delimiter(',');
  fit->add_option("--optimizer", fo->optimizers,
                  "Optimizers to try (default adamw,adafactor, and adamw8bit on a GPU)")
      ->delimiter(',');
  fit->add_option("--offload", fo->offloads,
                  "Offload to try: none, optimizer (AdamW's state on the host; default both on a GPU)")
      ->delimiter(',');
  fit->add_option("--adapter", fo->adapters,
                  "Adapters to try: none (full fine-tuning, the default), lora (PEFT's defaults)")
      ->delimiter(',');
  fo->lora.for_each([&](std::string_view column, auto& flag) { add_setting_flag(*fit, column, flag); });
  fit->add_option("--weights", fo->weights,
                  "Base weights to try: full (the default), int8 (bitsandbytes' 8-bit), nf4 or fp4 "
                  "(QLoRA: 4-bit with double quantisation); the quantised ones with lora only")
      ->delimiter(',');
  fit->add_option("--trainer", fo->trainers,
                  "Trainers to try: hf (transformers' Trainer), sft (TRL's SFTTrainer; causal LMs "
                  "only); default hf, and sft too for a config.json decoder")
      ->delimiter(',');
  fit->add_option("--device", fo->device,
                  "Where to measure (auto: a GPU, else --gpu's card predicted by emulation, else "
                  "the CPU; cpu: the tracking allocator enforces the card's memory; emulated: "
                  "predict --gpu's card)")
      ->check(CLI::IsMember(device_choices()));
  fit->add_option("--margin", fo->margin, "Fraction of the card kept free")
      ->capture_default_str()
      ->check(reports::kMargin);
  fit->add_option("--context-gib", fo->context_gib, "CUDA context allowance (default: measured)")
      ->check(reports::kMemoryGib);
  fit->add_option("--max-batch", fo->max_batch, "Largest batch a search tries")
      ->capture_default_str()
      ->check(reports::whole_number(1, 1 << 30, "a batch"));
  fit->add_option("--out", fo->out, "Results directory (default results/fit-MODEL-CARD)");
  fit->add_flag("--json", fo->json, "The answer as JSON on stdout (progress stays on stderr)");
  fit->add_flag("--quiet,-q", fo->quiet, "No progress output");
  fit->add_flag("!--no-zygote", fo->zygote, "Exec a fresh worker per probe (see `sweep run --help`)");
  fit->add_flag("!--no-prediction", fo->predict,
                "Search without first predicting each technique's largest batch by emulation (see "
                "`sweep run --help`)");
  fit->callback([fo, &exit_code] { exit_code = run_guarded([&] { return run_fit(*fo); }); });
}

// `sweep run CONFIG`: a sweep, here or submitted to Slurm.
void register_run_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<RunOptions>();
  auto* run = app.add_subcommand("run", "Run a sweep: every grid point in its own worker process");
  // A missing config is the loader's error: it lists configs/*.yaml.
  run->add_option("config", opts->config, "Sweep config (YAML)")->required();
  run->add_option("overrides", opts->overrides,
                  "key=value: set any config key or grid axis, e.g. grid.batch=[1,2] models=[gpt2]");
  run->add_option("--out", opts->out, "Output directory (default: the config's `out`)");
  run->add_option("--device", opts->device,
                  "Where to train (emulated: predict the config's gpu: card on this machine, not "
                  "measured)")
      ->check(CLI::IsMember(device_choices()))
      ->each([opts](const std::string&) { opts->device_given = true; });
  run->add_flag("--dry-run", opts->dry_run,
                "List the points, their count and an estimated time (from rows measured before), "
                "and exit");
  run->add_flag("--json", opts->json,
                "The closing summary (or the dry run) as one JSON object on stdout; progress "
                "stays on stderr");
  run->add_option("--estimate-from", opts->estimate_from,
                  "Results (directory or results.csv) whose rows the dry run's estimate also "
                  "reads (repeat the flag for several)")
      ->allow_extra_args(false)
      ->check(CLI::ExistingPath);
  run->add_flag("--force", opts->force, "Re-run points already in results.csv");
  run->add_flag("--quiet,-q", opts->quiet, "No progress output");
  run->add_option("--search", opts->search,
                  "max-batch: find the largest batch that fits for each combination of the other "
                  "axes (doubling, then bisecting); max-seq: the longest seq at the grid's batch "
                  "(in steps of 64 tokens, to within 1%); none: run the grid")
      ->transform(CLI::Validator(
          [](std::string& v) {
            const std::string c = spelled_as(v, {"max-batch", "max-seq", "none"});
            if (c.empty())
              return "'" + v + "' is not a search: max-batch (or max_batch), max-seq or none";
            v = c;
            return std::string();
          },
          "max-batch|max-seq|none", "search"));
  run->add_option("--max-points", opts->max_points,
                  "Refuse a grid of more points than this (counted before expanding)")
      ->capture_default_str()
      ->check(reports::whole_number(1, 1'000'000'000, "a number of points"));
  run->add_flag("--snapshot", opts->snapshot,
                "Write each point's CUDA memory snapshot (and one at an OOM) to OUT/snapshots/, "
                "for pytorch.org/memory_viz");
  run->add_flag("!--no-zygote", opts->zygote,
                "Exec a fresh `sweep worker` per point instead of forking it from a pre-loaded "
                "one (the same isolation, ~0.4 s more per point)");
  run->add_flag("!--no-prediction", opts->predict,
                "Search without first predicting each combination's largest batch by emulation "
                "(on a GPU or the CPU the prediction seeds the search: 2 probes when exact)");
  run->add_option("--gpus", opts->gpus,
                  "Local GPUs to run on concurrently, e.g. 0,1 (one worker per GPU)");
  add_slurm_options(run, opts->slurm);
  run->callback([opts, &exit_code] {
    exit_code = run_guarded([&] {
      if (opts->slurm.submit && opts->json)
        throw UserError("", 0, "--json", "--json summarises a run on this host; --slurm only submits it",
                        "drop --json; once the jobs are done, `sweep run CONFIG --out OUT --json` on "
                        "the merged results prints the summary (every point is already recorded)");
      const RunOutcome outcome = opts->slurm.submit ? submit_slurm(*opts) : run_sweep(*opts);
      const int rc = finish(outcome, opts->quiet, opts->json);
      if (rc != 0 || outcome.failed == 0) return rc;
      // Every row is written and reported; the status says the run is no clean measurement
      // (a CI gate fails on it, docs/running.md).
      std::fprintf(stderr,
                   "sweep run: %zu of %zu point(s) crashed or timed out (exit %d); their rows say "
                   "why, their logs are in %s/logs/\n",
                   outcome.failed, outcome.measured, kExitPointsFailed, outcome.out.c_str());
      return kExitPointsFailed;
    });
  });
}

void register_tables_command(CLI::App& app, int& exit_code) {
  auto to = std::make_shared<TablesOptions>();
  auto* tables = app.add_subcommand(
      "tables", "The per-card tables of docs/tables/ (<card>.md, <card>.json, index.html): an "
                "emulated `fit` of every zoo model at the lengths people train it, per card");
  tables->add_option("--card", to->cards, "Cards to (re)generate (default: every card of `sweep gpus`)");
  tables->add_option("--model", to->models, "Only these models (default: every model of the zoo)");
  tables->add_option("--out", to->out, "Where the tables go (default docs/tables)");
  tables->add_option("--results", to->results, "Where the fits' rows go (default results/tables)");
  tables->add_flag("--quiet,-q", to->quiet, "No progress output");
  tables->callback([to, &exit_code] { exit_code = run_guarded([&] { return run_tables(*to); }); });
}

// `sweep worker`: one point, run by the runner (hidden from --help).
void register_worker_command(CLI::App& app, int& exit_code) {
  auto point = std::make_shared<std::string>();
  auto fd = std::make_shared<int>(1);
  auto* worker = app.add_subcommand("worker", "Run one point (internal)");
  worker->group("");  // hidden from --help
  auto probe = std::make_shared<bool>(false);
  auto probe_context = std::make_shared<bool>(false);
  auto no_context = std::make_shared<bool>(false);
  worker->add_option("--point", *point);
  worker->add_option("--result-fd", *fd);
  worker->add_flag("--probe-device", *probe, "Report the GPU's memory and context size as JSON");
  worker->add_flag("--no-context", *no_context,
                   "With --probe-device: the GPU's name and memory only (context_gib is given)");
  worker->add_flag("--probe-context", *probe_context,
                   "Report the GPU's used bytes with a bare CUDA context of this process");
  worker->callback([point, fd, probe, probe_context, no_context, &exit_code] {
    exit_code = run_guarded([&] {
      return *probe           ? probe_device_main(!*no_context)
             : *probe_context ? probe_context_main()
                              : worker_main(*point, *fd);
    });
  });
}

// `sweep zygote`: the pre-loaded worker the runner forks points from (sweeps/runner/zygote.h).
void register_zygote_command(CLI::App& app, int& exit_code) {
  auto control_fd = std::make_shared<int>(-1);
  auto* zygote = app.add_subcommand("zygote", "Serve points to the runner (internal)");
  zygote->group("");
  zygote->add_option("--control-fd", *control_fd)->required();
  zygote->callback([control_fd, &exit_code] {
    // Internal, but a person may type it: a descriptor that is not the runner's socket is
    // said so, exit 2 (it once exited 1 without a word).
    struct stat st{};
    if (fstat(*control_fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
      exit_code = print_user_error(UserError(
          "", 0, "--control-fd", "fd " + std::to_string(*control_fd) + " is not an open socket",
          "`sweep zygote` is internal: `sweep run` and `sweep fit` start it with their end of a "
          "socket; run those instead"));
      return;
    }
    exit_code = serve_zygote(
        *control_fd,
        [](const std::string& point, int result_fd) {
          return run_guarded([&] { return worker_main(point, result_fd); });
        },
        // `sweep worker ...` (the GPU probe), parsed as main parses it. Nothing else: the
        // zygote serves the runner's own workers, not arbitrary subcommands.
        [](const std::vector<std::string>& args) {
          if (args.empty() || args.front() != "worker") return 2;
          CLI::App child{"sweep"};
          child.require_subcommand(1);
          int code = 0;
          register_commands(child, code);
          std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11's order
          try {
            child.parse(reversed);
          } catch (const CLI::ParseError& e) {
            return child.exit(e);
          }
          return code;
        });
  });
}

}  // namespace

void register_commands(CLI::App& app, int& exit_code) {
  register_fit_command(app, exit_code);  // first: it answers the question the tool is for
  register_run_command(app, exit_code);
  register_slurm_commands(app, exit_code);
  register_tables_command(app, exit_code);
  reports::register_report_command(app, exit_code);
  reports::register_recommend_command(app, exit_code);
  reports::register_compare_command(app, exit_code);
  reports::register_gpus_command(app, exit_code);
  app.add_subcommand("models", "List the model zoo")->callback([] { print_models(); });
  register_worker_command(app, exit_code);
  register_zygote_command(app, exit_code);
  add_examples(app);
}

}  // namespace sweep
