// Which card a recommendation or report is for, and its usable memory by the one rule for "fits".
#include "reports/recommend/recommend.h"

#include "reports/recommend/recommend_rows.h"
#include "reports/results/stats.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

namespace sweep::reports {

namespace recommend_internal {
namespace {

// The one budget every row with a budget ran under, when each of them emulated it (a larger
// GPU capped to a smaller card's memory less its context); nullopt otherwise.
std::optional<int64_t> one_emulated_budget(const std::vector<Measured>& rows) {
  std::optional<int64_t> budget;
  for (const auto& m : rows) {
    if (m.budget <= 0 && !m.ok && !m.oom()) continue;
    if (!m.emulated || m.budget <= 0 || (budget && *budget != m.budget)) return std::nullopt;
    budget = m.budget;
  }
  return budget;
}

Target resolve_target(const std::vector<Measured>& rows, const RecommendOptions& o,
                      OnTarget& on_target) {
  Target t;
  t.margin = o.margin;
  const bool any_cuda = std::any_of(rows.begin(), rows.end(), [](auto& m) { return m.cuda; });
  if (!o.gpu.empty()) {
    const GpuSpec* g = find_gpu(o.gpu);
    if (!g) {
      const std::string near = nearest_card_key(o.gpu);
      throw UserError("--gpu", 0, "", unknown_card_message(o.gpu),
                      (near.empty() ? "" : "did you mean " + near + "? ") +
                          "known GPUs: " + card_keys() + "; for another card give --memory-gib N");
    }
    t.name = g->name;
    t.gpu = g;
    t.memory_bytes = memory_bytes(*g);
    on_target = [g](const Measured& m) { return find_gpu(m.choice.measured_on) == g; };
  } else if (o.memory_gib) {
    if (!(*o.memory_gib > 0 && *o.memory_gib <= kMaxMemoryGib))
      throw UserError("--memory-gib", 0, "", "'" + std::to_string(*o.memory_gib) + "' is not a card's memory",
                      "give the card's memory in GiB, e.g. --memory-gib 24");
    std::ostringstream s;
    s << *o.memory_gib << " GiB";
    t.name = s.str();
    t.memory_bytes = std::llround(*o.memory_gib * kGiB);
    t.cuda = any_cuda || rows.empty();
    // The same card when the memory matches within what drivers and ECC reserve.
    on_target = [mem = static_cast<double>(t.memory_bytes), cuda = t.cuda](const Measured& m) {
      return m.cuda == cuda && m.device_memory && std::abs(*m.device_memory - mem) <= 0.02 * mem;
    };
  } else if (const auto budget = o.budget_bytes ? o.budget_bytes : one_emulated_budget(rows)) {
    // The rows answer for the card their budget emulated: the budget is its cap (set below).
    t.from_budget = true;
    t.memory_bytes = *budget;
    t.name = "the emulated budget";
    t.cuda = any_cuda;
    on_target = [](const Measured&) { return true; };
  } else {
    std::map<std::string, double> devices;
    for (const auto& m : rows)  // a row that never ran (skipped) names no device
      if (m.device_memory && !m.choice.measured_on.empty()) devices[m.choice.measured_on] = *m.device_memory;
    if (devices.empty())
      throw UserError("", 0, "", "the results do not record the device's memory",
                           "say which card to recommend for: --gpu NAME or --memory-gib N");
    std::set<double> sizes;
    for (const auto& [name, mem] : devices) sizes.insert(mem);
    if (sizes.size() > 1) {
      std::string list;
      for (const auto& [name, mem] : devices)
        list += (list.empty() ? "" : ", ") + name + " (" + format_bytes(mem) + ")";
      throw UserError("", 0, "", "the results were measured on several devices: " + list,
                           "say which card to recommend for: --gpu NAME or --memory-gib N");
    }
    t.name = devices.begin()->first;
    t.gpu = find_gpu(t.name);
    t.memory_bytes = std::llround(devices.begin()->second);
    t.cuda = any_cuda;
    on_target = [](const Measured&) { return true; };
  }
  if (o.context_gib) {
    t.context_bytes = std::llround(*o.context_gib * kGiB);
    t.context_source = "given with --context-gib";
  } else if (t.cuda) {
    std::vector<double> ctx;
    for (const auto& m : rows)
      if (m.context) ctx.push_back(*m.context);
    std::vector<double> predicted;  // what emulated rows' cards allowed
    for (const auto& m : rows)
      if (m.card_context) predicted.push_back(*m.card_context);
    if (ctx.empty() && !predicted.empty()) {
      t.context_bytes = std::llround(median(predicted));
      t.context_source = "the predicted card's allowance, as its emulated rows used it";
    } else if (ctx.empty()) {
      t.context_bytes = kDefaultCudaContextBytes;
      t.context_source = "default for CUDA (" + std::string(kDefaultContextSource) +
                         "); no row measured it";
    } else {
      const std::size_t n = ctx.size();
      t.context_bytes = std::llround(median(ctx));
      t.context_source =
          "measured: median of device_used - peak_reserved over " + std::to_string(n) + " ok rows";
    }
  } else {
    t.context_source = "none on the CPU";
  }
  if (t.from_budget) {
    // memory - context = the budget: the card whose reported memory that is, when the table
    // has one within 1% ("RTX 3060": 11.00 GiB + 0.75 GiB measured = 11.75 GiB).
    t.memory_bytes += t.context_bytes;
    const auto mem = static_cast<double>(t.memory_bytes);
    for (const auto& spec : gpus())
      if (t.cuda && std::abs(static_cast<double>(memory_bytes(spec)) - mem) <= 0.01 * mem) t.gpu = &spec;
    if (t.gpu) {  // the card's own memory; its context is then what the budget left out
      const int64_t budget = t.memory_bytes - t.context_bytes;
      t.memory_bytes = memory_bytes(*t.gpu);
      t.context_bytes = t.memory_bytes - budget;
      t.context_source = "the card's memory less the emulated budget of " +
                         format_bytes(static_cast<double>(budget)) + " the rows ran under";
    } else {
      t.context_source += "; the rows ran under an emulated budget of " +
                          format_bytes(static_cast<double>(t.memory_bytes - t.context_bytes)) +
                          ", taken as the cap";
    }
    t.name = t.gpu ? std::string(t.gpu->name)
                   : "the emulated budget of " + format_bytes(static_cast<double>(t.cap_bytes()));
  }
  return t;
}

}  // namespace

Target target_of(const std::vector<Measured>& rows, const RecommendOptions& options,
                 OnTarget& on_target) {
  Target t = resolve_target(rows, options, on_target);
  // Rows that ran under this card's own cap, emulated (the budget a config gave as the card's
  // memory less its context): that budget is the cap, so that an OOM under it bounds the
  // largest batch, rather than a context measured a MiB apart.
  if (const auto budget = one_emulated_budget(rows);
      budget && !t.from_budget && t.cuda && !options.context_gib &&
      std::abs(static_cast<double>(t.cap_bytes() - *budget)) <= 0.01 * static_cast<double>(t.memory_bytes)) {
    t.context_source = "the rows' emulated budget " + format_bytes(static_cast<double>(*budget)) +
                       " taken as the cap (" + t.context_source + ": " +
                       format_bytes(static_cast<double>(t.context_bytes)) + ")";
    t.context_bytes = t.memory_bytes - *budget;
  }
  if (t.ceiling_bytes() <= 0) {
    // Named by the flags the user gave, and only those.
    const bool margin = options.margin != kDefaultMargin;
    std::string hint = options.memory_gib ? "give a larger --memory-gib"
                       : !options.gpu.empty() ? "choose a card with more memory (--gpu)"
                                              : "measure on a card with more memory";
    if (margin) hint += ", or a smaller --margin";
    if (options.context_gib) hint += ", or a smaller --context-gib";
    throw UserError("", 0, margin ? "--margin" : options.context_gib ? "--context-gib"
                                   : options.memory_gib             ? "--memory-gib"
                                   : !options.gpu.empty()           ? "--gpu"
                                                                    : "",
                    "no usable memory: " + format_bytes(static_cast<double>(t.memory_bytes)) +
                        " x (1 - margin " + number_text(t.margin) + ") - context " +
                        format_bytes(static_cast<double>(t.context_bytes)) + " <= 0",
                    hint);
  }
  return t;
}

}  // namespace recommend_internal

Target card_target(const std::vector<Results>& results, const RecommendOptions& options) {
  recommend_internal::OnTarget on_target;
  return recommend_internal::target_of(recommend_internal::measure_all(results), options,
                                       on_target);
}

}  // namespace sweep::reports
