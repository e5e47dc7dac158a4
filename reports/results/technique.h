// A technique: how a point trains, as the values of its technique axes (schema::kAxes entries of
// Role::kTechnique), and the one way every reader names, keys, counts and reads one. The
// typed members are the axes `fit` searches (SWEEP_TECHNIQUE_AXES, checked against the table at
// compile time); the rest (accumulation, the allocator's settings, LoRA's settings) each reader
// holds beside it. Header-only but for technique.cc, and free of LibTorch, like the rest of
// the results contract.
#pragma once

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
// combinations nest and its JSON lists them: X(type, column, plain value). Each is an entry
// of schema::kAxes with `fit` set, in the table's order (technique.cc checks both).
#define SWEEP_TECHNIQUE_AXES(X)                                                             \
  X(Precision, precision, Precision::kFp32)                                                 \
  X(Checkpointing, checkpointing, Checkpointing::kNone)                                     \
  X(OptimizerKind, optimizer, OptimizerKind::kAdamW)                                        \
  X(bool, use_cache, true)                                                                  \
  X(Adapter, adapter, Adapter::kNone)                                                       \
  X(Offload, offload, Offload::kNone)                                                       \
  X(Weights, weights, Weights::kFull)

struct Technique {
#define SWEEP_TECHNIQUE_MEMBER(type, column, plain) type column = plain;
  SWEEP_TECHNIQUE_AXES(SWEEP_TECHNIQUE_MEMBER)
#undef SWEEP_TECHNIQUE_MEMBER

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
