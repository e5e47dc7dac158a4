// A technique: how a point trains, as the values of its technique axes (schema::kAxes entries of
// Role::kTechnique), and the one way every reader names, keys, counts and reads one. The
// typed members are the axes `fit` searches (SWEEP_TECHNIQUE_AXES, checked against the table at
// compile time); the rest (accumulation, the allocator's settings) each reader holds beside
// it, LoRA's settings typed as LoraSettings (SWEEP_LORA_SETTINGS). Header-only but for
// technique.cc, and free of LibTorch, like the rest of the results contract.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/results/schema.h"
#include "reports/results/vocab.h"

namespace sweep {

namespace reports {
struct Row;
}

// The axes fit searches, as typed members with their plain values, in the order fit's
// combinations nest and its JSON lists them: X(type, column, plain value), FLAG(...) for a
// flag (Values::kBool). Each is an entry of schema::kAxes with `fit` set, in the table's order
// (technique.cc checks both).
#define SWEEP_TECHNIQUE_AXES_OF(X, FLAG)                                                    \
  X(Precision, precision, Precision::kFp32)                                                 \
  X(Checkpointing, checkpointing, Checkpointing::kNone)                                     \
  X(OptimizerKind, optimizer, OptimizerKind::kAdamW)                                        \
  FLAG(bool, use_cache, true)                                                               \
  X(Adapter, adapter, Adapter::kNone)                                                       \
  X(Offload, offload, Offload::kNone)                                                       \
  X(Weights, weights, Weights::kFull)                                                       \
  X(Trainer, trainer, Trainer::kHf)
#define SWEEP_TECHNIQUE_AXES(X) SWEEP_TECHNIQUE_AXES_OF(X, X)

// LoRA's settings (schema::kAxes of Role::kLora), as typed members with PEFT's LoraConfig
// defaults, in the table's order (technique.cc checks it): X(type, column, default).
#define SWEEP_LORA_SETTINGS(X)                                                              \
  X(int64_t, lora_r, 8)                                                                     \
  X(double, lora_alpha, 8)                                                                  \
  X(double, lora_dropout, 0)                                                                \
  X(std::vector<std::string>, lora_targets, {})

// A member of one of the lists above, declared with its plain value or default.
#define SWEEP_AXIS_MEMBER(type, column, plain) type column = plain;
#define SWEEP_AXIS_NOTHING(type, column, plain)

struct Technique {
  SWEEP_TECHNIQUE_AXES(SWEEP_AXIS_MEMBER)

  // An axis's cell as a results row writes it ("bf16-amp"; a flag "1" or "0"); "" for a
  // column that is no member.
  std::string cell(std::string_view column) const;
  // Sets a member from its cell or its config spelling ("0", "false"); false for a column
  // that is no member or a value that is none of its names.
  bool set(std::string_view column, std::string_view text);
  // Each member's cell, '|'-separated: a key for maps of techniques.
  std::string key() const;
  // The members as fit --json writes them: {"precision": "bf16", "use_cache": true, ...}.
  nlohmann::json json() const;
  // Changes from the plain configuration (fp32, no checkpointing, AdamW, ...): members whose
  // cell is not their axis's plain value.
  int changes() const;
  bool operator==(const Technique&) const = default;
};

// The technique's flags alone: what a reader that keeps the other axes its own way holds of
// it (recommend's Choice: the optimizer unknown where a row does not say, the adapter as its
// name).
struct TechniqueFlags {
  SWEEP_TECHNIQUE_AXES_OF(SWEEP_AXIS_NOTHING, SWEEP_AXIS_MEMBER)

  // A flag's cell, "1" or "0"; "" for a column that is no flag.
  std::string cell(std::string_view column) const;
  // The flags as fit --json writes them, JSON booleans by column.
  nlohmann::json json() const;
};
// Sets each flag from a row's cell (an older file's empty cell its fallback).
void read_flags(const reports::Row& row, TechniqueFlags& f);

// LoRA's settings, typed: what a reader of a LoRA row's settings holds (the Trainer's
// LoraConfig; a Point declares the same members).
struct LoraSettings {
  SWEEP_LORA_SETTINGS(SWEEP_AXIS_MEMBER)

  // f(column, value) for each setting, in the table's order.
  template <class F>
  void for_each(F&& f) const {
#define SWEEP_LORA_VISIT(type, column, plain) f(std::string_view(#column), column);
    SWEEP_LORA_SETTINGS(SWEEP_LORA_VISIT)
#undef SWEEP_LORA_VISIT
  }
};
// Sets each setting from a row's cell ("16", "0.05", "q;v"); an empty cell leaves its default.
void read_lora_settings(const reports::Row& row, LoraSettings& s);

// A cell as a config spells it: a flag's "1" and "0" are "true" and "false".
std::string config_text(std::string_view column, const std::string& cell);

// Sets each member from a row's cell (an older file's empty cell its fallback); a member whose
// cell is still empty keeps its value. False where one did.
bool read_technique(const reports::Row& row, Technique& t);
// The technique a row measured; nullopt where a member's cell is empty and has no fallback.
std::optional<Technique> technique_of(const reports::Row& row);

// A cell by its column, with the fallback of an empty one applied: how a name is spelled.
using CellOf = std::function<std::string(std::string_view column)>;
CellOf cells_of(const reports::Row& row);
CellOf cells_of(const Technique& t);
// Every technique axis's and LoRA setting's cell of a row, by column (an empty cell its
// fallback): what a reader keeps of a row's technique.
using TechniqueCells = std::map<std::string, std::string, std::less<>>;
TechniqueCells technique_cells(const reports::Row& row);
CellOf cells_of(const TechniqueCells& cells);

// The parts of a technique's name after its head, one per axis with a name_rank whose cell is
// not plain, in name_rank order: each axis's phrase ("use_cache=False", "lora r8", "offload
// optimizer", "int8 weights") or, with `key`, its key ("no-cache", "lora-r8", ...). A word of a
// phrase naming another axis's cell ("r{lora_r}") is left out where that cell is empty. Axes
// in `skip` are left out (a reader that says them elsewhere).
std::vector<std::string> name_parts(const CellOf& cell, bool key = false,
                                    std::initializer_list<std::string_view> skip = {});
// The same parts, each after `separator`: ", lora r8, use_cache=False".
std::string name_tail(const CellOf& cell, std::string_view separator, bool key = false,
                      std::initializer_list<std::string_view> skip = {});

// A technique axis's cell as a report's table column shows it (schema::Axis::shown): "lora r8",
// "False", "optimizer".
std::string shown(const CellOf& cell, std::string_view column);

// How many technique axes but those in `except` are not at their plain value.
int changes_but(const CellOf& cell, std::initializer_list<std::string_view> except);
// Whether every technique axis but those in `except` is at its plain value.
inline bool plain_but(const CellOf& cell, std::initializer_list<std::string_view> except) {
  return changes_but(cell, except) == 0;
}

// An order of techniques: the technique axes but those in `except`, in name_rank order, then
// LoRA's settings; each by its value's place in its vocabulary (plain first for a flag), or
// its number, or its text.
std::vector<std::pair<double, std::string>> order_of(const CellOf& cell,
                                                     std::initializer_list<std::string_view> except);

// Every technique axis's cell but those in `except`, '\x1f'-separated: rows of one
// configuration share it.
std::string configuration_key(const CellOf& cell, std::initializer_list<std::string_view> except = {});

}  // namespace sweep
