// Suggestions for misspelt names; see spelling.h.
#include "reports/results/spelling.h"

#include <algorithm>
#include <cctype>
#include <functional>

namespace sweep {

std::string folded(const std::string& s) {
  std::string out;
  for (const char c : s)
    if (c != ' ' && c != '-' && c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

namespace {

// Whether `shorter` occurs in `longer` in order, and is not so short that it would be found
// in nearly anything (at least 3 characters, and half of the longer one).
bool inside(const std::string& shorter, const std::string& longer) {
  if (shorter.size() < 3 || 2 * shorter.size() < longer.size() || shorter.size() > longer.size())
    return false;
  std::size_t i = 0;
  for (const char c : longer)
    if (i < shorter.size() && c == shorter[i]) ++i;
  return i == shorter.size();
}

}  // namespace

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // The optimal string alignment distance: Levenshtein's, and two neighbours swapped cost 1
  // ("meduim", "rtx3600"), the commonest typo.
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::vector<std::string> nearest(const std::string& typed, const std::vector<std::string>& known) {
  const std::string t = folded(typed);
  if (t.empty()) return {};
  // The first of three tiers that finds any: a shortened name ("3060", "a100"); a typo or two
  // (within 2 edits, or a third of a long name); a spelled-out one ("bfloat16").
  const std::size_t typos = std::max<std::size_t>(2, t.size() / 3);
  std::size_t best = typos + 1;
  for (const auto& k : known) best = std::min(best, edit_distance(t, folded(k)));
  const std::vector<std::function<bool(const std::string&)>> tiers = {
      [&](const std::string& k) { return k != t && inside(t, k); },
      [&](const std::string& k) { return best <= typos && edit_distance(t, k) == best; },
      [&](const std::string& k) { return k != t && inside(k, t); },
  };
  // The same name but for case, spaces, '-' or '_' ("gpt-2" for gpt2): that one alone.
  std::vector<std::string> out;
  for (const auto& k : known)
    if (folded(k) == t) out.push_back(k);
  if (!out.empty()) return out;
  for (const auto& match : tiers) {
    for (const auto& k : known)
      if (match(folded(k)) && std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
    if (!out.empty()) break;
  }
  // Then the variants of each suggestion: "bf16" brings "bf16-amp".
  const std::size_t found = out.size();
  for (std::size_t i = 0; i < found; ++i)
    for (const auto& k : known)
      if (k.starts_with(out[i] + "-") && std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  return out;
}

std::string either(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

std::string did_you_mean(const std::vector<std::string>& suggestions) {
  return suggestions.empty() ? "" : "did you mean " + either(suggestions) + "? ";
}

std::string did_you_mean(const std::string& typed, const std::vector<std::string>& known) {
  return did_you_mean(nearest(typed, known));
}

}  // namespace sweep
