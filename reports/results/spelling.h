// "Did you mean": the one helper every refusal of a name uses (models, cards, axis values,
// config keys), so a typo gets the same kind of suggestion wherever it is typed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace sweep {

// A name as the suggestions compare it: lower case, without spaces, '-' and '_'.
std::string folded(const std::string& s);

// Edits from a to b: insertions, deletions, substitutions and swaps of neighbours, 1 each.
std::size_t edit_distance(const std::string& a, const std::string& b);

// The entries of `known` that `typed` most likely meant, compared with case, spaces, '-' and
// '_' ignored: the one it equals so ("gpt-2" for gpt2) alone; else those it shortens ("3060"
// for rtx3060, "a100" for both A100s), else the nearest within a typo or two ("gpt2-meduim"),
// else those it spells out ("bfloat16" for bf16), in `known`'s order, then the variants of
// each ("bf16" brings "bf16-amp"). Empty when nothing is close.
std::vector<std::string> nearest(const std::string& typed, const std::vector<std::string>& known);

// "did you mean bf16 or bf16-amp? " (the start of a hint), or "" when nothing is close.
std::string did_you_mean(const std::string& typed, const std::vector<std::string>& known);
// The same for suggestions found otherwise (each mapped to its canonical name): "" for none.
std::string did_you_mean(const std::vector<std::string>& suggestions);
// "a", "a or b", "a, b or c".
std::string either(const std::vector<std::string>& names);

}  // namespace sweep
