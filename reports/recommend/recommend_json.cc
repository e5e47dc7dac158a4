// `sweep recommend --json`: the Recommendation as one JSON object, every field of the
// analysis (recommend.h) under its own name. A Choice becomes JSON in one place, to_json()
// below, wherever it appears (fastest, max_batch, effective, eval, closest steps, cross-GPU
// cells). kRecommendJsonVersion is bumped when a key changes meaning or goes away.
#include <nlohmann/json.hpp>

#include "reports/recommend/recommend.h"

namespace sweep::reports {
namespace {

using nlohmann::json;

constexpr int kRecommendJsonVersion = 3;  // 2: cap_bytes and ceiling_bytes (the one rule) for usable_bytes; 3: memory_as_sold gone (every card is what CUDA reports)

json optional_choice(const std::optional<Choice>& c) { return c ? json(*c) : json(nullptr); }

json gpu_key(const GpuSpec* g) { return g ? json(std::string(g->key)) : json(nullptr); }

}  // namespace

void to_json(json& j, const Choice& c) {
  j = {{"label", c.label()},
       {"mode", to_string(c.mode)},
       {"precision", to_string(c.precision)},
       {"checkpointing", to_string(c.checkpointing)},
       {"optimizer", to_string(c.optimizer)},  // "" when the row did not say
       {"alloc_conf", c.alloc_conf},
       {"adapter", c.adapter},
       {"offload", c.offload == Offload::kNone ? std::string() : to_string(c.offload)},
       {"batch", c.batch},
       {"accumulation", c.accumulation},
       {"effective_batch", c.batch * c.accumulation},
       {"techniques", c.techniques()},
       {"tokens_per_s", c.predicted && c.tokens_per_s <= 0
                            ? json(nullptr)
                            : json(c.tokens_per_s)},  // null: not measured
       {"step_ms_cv", c.step_ms_cv},
       {"noisy", c.noisy()},
       {"peak_reserved_bytes", c.peak_reserved_bytes},
       {"status", to_string(c.status)},
       {"measured_on", c.measured_on},
       {"where", c.where},
       {"inferred", c.inferred},
       {"predicted", c.predicted},
       {"on_target", c.on_target},
       {"bounded", c.bounded},
       {"first_over", c.first_over ? json(*c.first_over) : json(nullptr)},
       {"predicted_batch", c.predicted_batch ? json(*c.predicted_batch) : json(nullptr)},
       {"precision_words", precision_words(c.precision)},
       // The same configuration in the words of a Hugging Face training script.
       {"trainer_args", trainer_args_json(c.trainer_args())}};
  j.update(c.json());  // the technique's flags, by column
}

json recommendations_json(const Recommendation& r) {
  const Target& t = r.target;
  json j;
  j["recommend_json_version"] = kRecommendJsonVersion;
  j["target"] = {{"name", t.name},
                 {"gpu", gpu_key(t.gpu)},
                 {"memory_bytes", t.memory_bytes},
                 {"margin", t.margin},
                 {"context_bytes", t.context_bytes},
                 {"context_source", t.context_source},
                 {"cap_bytes", t.cap_bytes()},
                 {"ceiling_bytes", t.ceiling_bytes()},
                 {"cuda", t.cuda}};
  j["effective_batch"] = r.effective_batch ? json(*r.effective_batch) : json(nullptr);
  j["measured_on"] = r.measured_on;
  j["other_card"] = r.other_card;
  // Device emulated: the cards predicted and the line that says so; null when every row was
  // measured.
  j["predicted_by"] = r.predicted_cards.empty() ? json(nullptr) : json(r.predicted_line());
  j["has_eval"] = r.has_eval;
  j["notes"] = r.notes;
  j["groups"] = json::array();
  for (const auto& g : r.groups) {
    json steps = json::array();
    for (const auto& s : g.steps) steps.push_back({{"change", s.change}, {"best", optional_choice(s.best)}});
    j["groups"].push_back({{"label", g.label()},
                           {"model", g.model},
                           {"seq", g.seq},
                           {"target_seq", g.target_seq},
                           {"audio_s", g.audio_s},
                           {"fastest", optional_choice(g.fastest)},
                           {"above_ceiling", g.above_ceiling},
                           {"headline_note", g.headline_note},
                           {"max_batch", g.max_batch},
                           {"effective", optional_choice(g.effective)},
                           {"eval_max_batch", optional_choice(g.eval_max_batch)},
                           {"eval_counterpart", optional_choice(g.eval_counterpart)},
                           {"eval_check", g.eval_check},
                           {"closest_steps", steps},
                           {"closest_step", g.closest_step},
                           {"train_rows", g.train_rows},
                           {"train_ok", g.train_ok},
                           {"train_failed", g.train_failed},
                           {"failure", g.failure},
                           {"limit_reached", g.limit_reached},
                           {"measure_command", g.measure_command}});
  }
  json columns = json::array();
  for (const auto& c : r.columns) {
    json gpus = json::array();
    for (const auto* g : c.gpus) gpus.push_back(gpu_key(g));
    columns.push_back({{"name", c.name},
                       {"gpus", gpus},
                       {"memory_bytes", c.rule.memory_bytes},
                       {"cap_bytes", c.rule.cap_bytes()},
                       {"ceiling_bytes", c.rule.ceiling_bytes()}});
  }
  json cells = json::array();
  for (const auto& row : r.cells) {
    json out = json::array();
    for (const auto& c : row) out.push_back(optional_choice(c));
    cells.push_back(out);
  }
  // covered[group][column]: false where every measured row fits that card ("not measured";
  // its cell is null then).
  j["cross_gpu"] = {{"context_bytes", r.column_context_bytes},
                    {"columns", columns},
                    {"cells", cells},
                    {"covered", r.covered}};
  return j;
}

}  // namespace sweep::reports
