// The four per-group sections of the report. Each one builds a chart (plots.h) and a
// table (markup.h) from the same points, so the picture and the numbers cannot disagree.
#include "reports/report/report_sections.h"
#include "reports/results/stats.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace sweep::reports::report {
namespace {

constexpr double kSmallActivationShare = 0.25;  // below this, checkpointing barely helps

// One colour per line of a chart (its place among the chart's pairs), so that no two series
// share one; dashed with square points where checkpointing is on.
Series pair_series(const Point& p, std::size_t index) {
  bool block = p.checkpointing != Checkpointing::kNone;
  return {.title = pair_title(p), .color = palette(index), .dash = block ? 2 : 1,
          .point_type = block ? 5 : 7};
}

// "<model, shape>: <what> vs batch size", ticked at the batches measured; log2 when they
// span a factor of four or more (they usually double).
LineChart batch_chart(const Group& g, const Selection& sel, const std::string& suffix,
                      const std::string& what, const std::string& ylabel) {
  LineChart c{.stem = g.stem + suffix,
              .title = g.title() + ": " + what + " vs batch size (" + g.measured_by() + ")",
              .xlabel = "batch size (samples per micro-batch)",
              .ylabel = ylabel};
  std::set<int> batches;
  for (const Point& p : sel.points) batches.insert(p.batch);
  for (int b : batches) c.xtics.push_back(b);
  c.log2_x = !batches.empty() && *batches.rbegin() >= 4 * *batches.begin();
  return c;
}

Series red_crosses(std::string title) {
  return {
      .title = std::move(title), .color = kRed, .point_type = 2, .point_size = 2.2, .lines = false};
}

// An outlier (a value over three times the median of the chart's values, a noisy burst) would
// squash every other line against the axis: the y range stops above the rest, and the
// returned sentence names what is off the scale ("" when nothing is).
std::string clip_outliers(LineChart& chart) {
  std::vector<double> ys;
  for (const Series& s : chart.series)
    for (const auto& [x, y] : s.points) ys.push_back(y);
  if (ys.size() < 3) return "";
  const double m = median(ys);
  double rest = 0;
  std::string named;
  for (const Series& s : chart.series)
    for (const auto& [x, y] : s.points) {
      if (y > 3 * m) {
        if (!s.title.empty())
          named += (named.empty() ? "" : ", ") + s.title + " at batch " +
                   std::to_string(static_cast<int64_t>(x)) + " (" + fixed(y, 0) + ")";
      } else {
        rest = std::max(rest, y);
      }
    }
  if (named.empty() || rest <= 0) return "";
  chart.ymax = rest * 1.15;
  chart.note = "off the scale: " + named;
  return " Off the scale, so that it does not flatten the other lines (over three times the "
         "median; likely noise, see its step CV below): " + named + ".";
}

std::string tokens(std::optional<double> v) { return v ? fixed(*v, *v >= 100 ? 0 : 1) : ""; }
// A point's tokens/s for a table; a prediction's says so ("not measured" where the card's
// peaks are unknown, so none was predicted).
std::string tokens_of(const Point& p) {
  if (!p.predicted) return tokens(p.tokens_per_s);
  return p.tokens_per_s ? tokens(p.tokens_per_s) + " (predicted)" : "not measured";
}

}  // namespace

void memory_section(Document& doc, Plotter& plotter, const Group& g) {
  Selection sel = select_lines(g);
  doc.heading(3, "Peak memory vs batch size");
  // Peak reserved: what the caching allocator held, the number the one rule for "fits" reads
  // (recommend.h); allocated is in the table beside it.
  LineChart chart =
      batch_chart(g, sel, "-memory", "peak reserved memory", g.unit.header("peak reserved memory"));
  Series oom = red_crosses("out of memory");
  Series skipped{.title = "skipped: smaller batch already out of memory",
                 .color = "#ff7f0e",
                 .point_type = 6,
                 .point_size = 2,
                 .lines = false};
  // Failures are drawn at the cap they ran into, or above it: an out-of-memory point did not
  // fit, so its cross never sits under the line that says what fits.
  const double limit = g.unit.of(g.rule ? static_cast<double>(g.rule->cap_bytes())
                                        : g.budget_bytes);
  for (std::size_t i = 0; i < sel.pairs.size(); ++i) {
    const std::string& pair = sel.pairs[i];
    Series line;
    for (const Point& p : sel.points) {
      if (p.pair() != pair) continue;
      if (line.title.empty()) line = pair_series(p, i);
      if (p.ok() && p.peak_reserved) line.points.emplace_back(p.batch, g.unit.of(*p.peak_reserved));
      // An OOM is drawn at the peak it reached before failing when that is above the cap.
      if (p.status == Status::kOom) {
        std::optional<double> reached = p.peak_reserved ? p.peak_reserved : p.peak_allocated;
        oom.points.emplace_back(p.batch,
                                std::max(limit, reached ? g.unit.of(*reached) : 0.0));
      }
      if (p.status == Status::kSkipped && p.out_of_memory())
        skipped.points.emplace_back(p.batch, limit);
    }
    chart.series.push_back(line);
  }
  chart.series.push_back(oom);
  chart.series.push_back(skipped);
  if (g.rule) {
    chart.hlines.push_back({g.unit.of(static_cast<double>(g.rule->cap_bytes())),
                            "fits: cap " + format_bytes(static_cast<double>(g.rule->cap_bytes())),
                            1});
    chart.hlines.push_back(
        {g.unit.of(static_cast<double>(g.rule->ceiling_bytes())),
         "recommended ceiling " + format_bytes(static_cast<double>(g.rule->ceiling_bytes())), 2});
  }
  add_plot(doc, plotter.draw(chart), chart.stem, chart.title);
  std::string caption =
      "One line per precision / checkpointing (dashed: checkpointing). Held fixed: " + sel.held +
      ".";
  if (g.rule)
    caption += " A point fits where it is on or under the solid grey line (the cap) and is "
               "recommended under the dashed one (the recommended ceiling), by the rule of the "
               "summary above.";
  if (!oom.points.empty())
    caption +=
        " A red cross marks an out-of-memory point, at the cap it ran into (or at the peak it "
        "reached, when that is higher).";
  if (!skipped.points.empty())
    caption +=
        " An open circle marks a point skipped because a smaller batch of the same configuration "
        "ran out of memory.";
  doc.paragraph(caption);

  std::map<std::string, double> batch1;
  for (const Point& p : sel.points)
    if (p.batch == 1 && p.ok() && p.peak_allocated && *p.peak_allocated > 0)
      batch1[p.pair()] = *p.peak_allocated;
  auto fields = technique_fields();
  fields.push_back(right<Point>(
      g.unit.header("peak allocated"), [&g](const Point& p) { return g.unit.text(p.peak_allocated); }, true));
  fields.push_back(right<Point>(g.unit.header("peak reserved"),
                                [&g](const Point& p) { return g.unit.text(p.peak_reserved); }));
  fields.push_back(right<Point>("vs batch 1", [&batch1](const Point& p) {
    auto it = batch1.find(p.pair());
    if (!p.ok() || !p.peak_allocated || it == batch1.end()) return std::string();
    return fixed(*p.peak_allocated / it->second, 2) + "×";
  }));
  if (g.rule)
    fields.push_back({.header = "fits", .cell = [&g](const Point& p) {
                        return !p.ok() ? std::string() : g.fits(p) ? "yes" : "no";
                      }});
  doc.table(make_table(fields, sel.points));
}

namespace {

// One batch's techniques against the baseline (fp32, no checkpointing, accumulation 1, the
// lines' optimizer, no other technique): a chart when `charted`, else a folded table.
void technique_batch(Document& doc, Plotter& plotter, const Group& g, int batch,
                     const std::vector<Point>& pts, bool charted,
                     std::optional<OptimizerKind> base_optimizer) {
  const std::string base_name = to_string(Precision::kFp32) + " / " +
                                to_string(Checkpointing::kNone) + " / acc 1 / " +
                                to_string(base_optimizer);
  const Point* base = nullptr;
  for (const Point& p : pts)
    if (p.ok() && p.precision == Precision::kFp32 && p.checkpointing == Checkpointing::kNone &&
        p.optimizer == base_optimizer &&
        plain_but(p.cell(), {"precision", "checkpointing", "optimizer", "alloc_conf"}) &&
        p.peak_allocated && (p.tokens_per_s || p.predicted))
      base = &p;
  auto saving = [&](const Point& p) -> std::optional<double> {
    if (!base || !p.ok() || !p.peak_allocated) return std::nullopt;
    return 1 - *p.peak_allocated / *base->peak_allocated;
  };
  auto speed = [&](const Point& p) -> std::optional<double> {
    if (!base || !p.ok() || !p.tokens_per_s || !base->tokens_per_s) return std::nullopt;
    return *p.tokens_per_s / *base->tokens_per_s - 1;
  };

  BarChart chart{.stem = g.stem + "-techniques-b" + std::to_string(batch),
                 .title = g.title() + ", batch " + std::to_string(batch) +
                          ": memory and throughput by technique (" + g.measured_by() + ")"};
  Panel memory{.xlabel = g.unit.header("peak allocated memory")};
  Panel speed_panel{.xlabel = "throughput (tokens/s)"};
  Segment mem{.title = "peak allocated", .color = palette(0)};
  Segment tps{.title = "tokens/s", .color = palette(2)};
  for (const Point& p : pts) {
    chart.labels.push_back(p.technique());
    bool has_mem = p.ok() && p.peak_allocated;
    mem.values.push_back(has_mem ? g.unit.of(*p.peak_allocated) : kMissing);
    tps.values.push_back(p.ok() && p.tokens_per_s ? *p.tokens_per_s : kMissing);
    std::string failed = p.ok() ? "" : p.out_of_memory() ? "out of memory" : to_string(p.status);
    auto s = saving(p);
    auto v = speed(p);
    memory.notes.push_back(!failed.empty() ? failed
                           : &p == base    ? "baseline"
                           : s             ? signed_percent(-*s)
                                           : "");
    speed_panel.notes.push_back(!failed.empty()    ? failed
                                : &p == base || !v ? ""
                                                   : signed_percent(*v));
  }
  memory.segments.push_back(mem);
  speed_panel.segments.push_back(tps);
  chart.panels = {memory, speed_panel};
  if (charted) {
    doc.heading(4, "Batch " + std::to_string(batch));
    add_plot(doc, plotter.draw(chart), chart.stem, chart.title);
  } else {
    doc.begin_details("Batch " + std::to_string(batch) + ": " +
                      std::to_string(pts.size()) + " techniques");
  }
  doc.paragraph(base ? "Labels: change against the baseline " + base_name +
                           " (memory: negative is a saving; throughput: negative is the cost)."
                     : "The baseline " + base_name + " has no successful measurement at batch " +
                           std::to_string(batch) + ", so no savings are computed.");

  auto fields = technique_fields();
  fields.erase(fields.begin());  // the batch is in the heading
  fields.push_back(right<Point>(
      g.unit.header("peak allocated"), [&g](const Point& p) { return g.unit.text(p.peak_allocated); }, true));
  // The chart's sign convention: a change against the baseline, negative memory is a saving.
  fields.push_back(right<Point>(
      "memory change",
      [&](const Point& p) {
        auto s = saving(p);
        return &p == base ? "baseline" : s ? signed_percent(-*s) : "";
      },
      base != nullptr));
  fields.push_back(right<Point>("tokens/s", tokens_of, true));
  fields.push_back(right<Point>("throughput change", [&](const Point& p) {
    auto v = speed(p);
    return &p == base ? "baseline" : v ? signed_percent(*v) : "";
  }));
  doc.table(make_table(fields, pts));
  if (!charted) doc.end();
}

}  // namespace

void technique_section(Document& doc, Plotter& plotter, const Group& g) {
  doc.heading(3, "Techniques compared at the same batch size");
  std::map<int, std::map<decltype(technique_key(g.points.front())), Point>> by_batch;
  for (const Point& p : g.points) by_batch[p.batch][technique_key(p)] = p;  // last row wins
  // One chart, at the batch that compares the most techniques (the smallest of equals); the
  // other batches' tables open folded (a fit's report drew a chart for each of 13 batches).
  int chart_batch = 0;
  std::size_t most = 1;
  for (const auto& [batch, techniques] : by_batch)
    if (techniques.size() > most) {
      most = techniques.size();
      chart_batch = batch;
    }
  const std::optional<OptimizerKind> base_optimizer = select_lines(g).optimizer;
  int shown = 0;
  for (const auto& [batch, techniques] : by_batch) {
    if (techniques.size() < 2) continue;
    ++shown;
    std::vector<Point> pts;
    for (const auto& [key, p] : techniques) pts.push_back(p);
    technique_batch(doc, plotter, g, batch, pts, batch == chart_batch, base_optimizer);
  }
  if (shown == 0)
    doc.paragraph(
        "Each batch size was measured with one technique combination only; nothing to compare.");
}

namespace {

// A point's peak split into what the breakdown columns name.
double other_allocated(const Point& p) {
  double parts = p.weights.value_or(0) + p.grads.value_or(0) + p.optimizer_state.value_or(0) +
                 p.activations.value_or(0);
  return std::max(0.0, *p.peak_allocated - parts);
}
double allocator_overhead(const Point& p) {
  return p.peak_reserved ? std::max(0.0, *p.peak_reserved - *p.peak_allocated) : 0.0;
}
double activation_share(const Point& p) { return p.activations.value_or(0) / *p.peak_allocated; }

// One bar per technique, at its largest batch that ran (a max-batch search measures a dozen
// batches of each: a bar for every one made 61 bars under repeated labels); the table below
// keeps every point.
void breakdown_chart(Document& doc, Plotter& plotter, const Group& g, const std::vector<Point>& pts,
                     bool any_other) {
  std::vector<Point> bars;
  for (const Point& p : pts) {
    auto same = [&](const Point& b) { return b.technique() == p.technique(); };
    auto it = std::find_if(bars.begin(), bars.end(), same);
    if (it == bars.end())
      bars.push_back(p);
    else if (p.batch > it->batch)
      *it = p;
  }
  auto part = [&g](std::optional<double> v) { return v ? g.unit.of(std::max(0.0, *v)) : 0.0; };
  BarChart chart{.stem = g.stem + "-breakdown",
                 .title = g.title() + ": where the memory goes (" + g.measured_by() + ")"};
  for (const Point& p : bars) chart.labels.push_back(technique_title(p) + ", batch " + std::to_string(p.batch));
  Panel panel{.xlabel = g.unit.header("memory at the peak")};
  Segment w{"weights", "#0072b2", {}}, gr{"gradients", "#56b4e9", {}},
      o{"optimizer state", "#e69f00", {}}, a{"activations", "#009e73", {}},
      ot{"other allocated", "#cc79a7", {}}, ov{"allocator overhead", "#bbbbbb", {}};
  for (const Point& p : bars) {
    w.values.push_back(part(p.weights));
    gr.values.push_back(part(p.grads));
    o.values.push_back(part(p.optimizer_state));
    a.values.push_back(part(p.activations));
    ot.values.push_back(g.unit.of(other_allocated(p)));
    ov.values.push_back(g.unit.of(allocator_overhead(p)));
    panel.notes.push_back("activations " + percent(activation_share(p)));
  }
  panel.segments = {w, gr, o, a};
  if (any_other) panel.segments.push_back(ot);
  panel.segments.push_back(ov);
  chart.panels = {panel};
  add_plot(doc, plotter.draw(chart), chart.stem, chart.title);
}

// Where activations are a small share, name what does shrink the peak: what shrinks the
// persistent part, largest first, and nothing the points already use.
void small_activation_advice(Document& doc, const std::vector<Point>& pts) {
  std::vector<const Point*> small;
  for (const Point& p : pts)
    if (activation_share(p) < kSmallActivationShare) small.push_back(&p);
  if (small.empty()) return;
  double wsum = 0, gsum = 0, osum = 0, peak = 0;
  const Point* example = small.front();
  for (const Point* p : small) {
    wsum += p->weights.value_or(0);
    gsum += p->grads.value_or(0);
    osum += p->optimizer_state.value_or(0);
    peak += *p->peak_allocated;
    if (activation_share(*p) < activation_share(*example)) example = p;
  }
  auto all = [&](auto pred) { return std::all_of(small.begin(), small.end(), pred); };
  struct Remedy {
    double bytes;
    const char* advice;
  };
  std::vector<Remedy> remedies;
  if (!all([](const Point* p) {
        return p->optimizer == OptimizerKind::kSgd || p->optimizer == OptimizerKind::kAdafactor;
      }))
    remedies.push_back({osum, "a lighter optimizer state (adafactor or sgd)"});
  if (!all([](const Point* p) { return p->precision == Precision::kBf16; }))
    remedies.push_back({wsum, "lower-precision weights (pure bf16)"});
  remedies.push_back({gsum, "fewer trainable parameters (freeze layers or train adapters)"});
  std::stable_sort(remedies.begin(), remedies.end(),
                   [](const Remedy& x, const Remedy& y) { return x.bytes > y.bytes; });
  std::string advice;
  for (std::size_t i = 0; i < remedies.size(); ++i)
    advice += std::string(i == 0                     ? ""
                          : i + 1 == remedies.size() ? " or "
                                                     : ", ") +
              remedies[i].advice;
  double largest = std::max({osum, wsum, gsum});
  const char* largest_name = largest == osum   ? "optimizer state"
                             : largest == wsum ? "the weights"
                                               : "the gradients";
  doc.paragraph("Activations are under 25% of peak memory at " + std::to_string(small.size()) +
                " of " + std::to_string(pts.size()) + " points (e.g. batch " +
                std::to_string(example->batch) + ", " + example->technique() + ": " +
                percent(activation_share(*example)) + "), where " + largest_name +
                " is the largest part (" + percent(largest / peak) +
                "), so gradient checkpointing and smaller batches will not help much there; " +
                advice + " will.");
}

// Every point's breakdown, one row each.
void breakdown_table(Document& doc, const Group& g, const std::vector<Point>& pts, bool any_other) {
  auto fields = technique_fields();
  fields.pop_back();  // all ok
  const MemoryUnit& u = g.unit;
  fields.push_back(right<Point>(u.header("weights"), [&u](const Point& p) { return u.text(p.weights); }));
  fields.push_back(right<Point>(u.header("gradients"), [&u](const Point& p) { return u.text(p.grads); }));
  fields.push_back(right<Point>(u.header("optimizer state"),
                                [&u](const Point& p) { return u.text(p.optimizer_state); }));
  fields.push_back(right<Point>(
      u.header("activations"), [&u](const Point& p) { return u.text(p.activations); }, true));
  if (any_other)
    fields.push_back(right<Point>(u.header("other"), [&](const Point& p) { return u.text(other_allocated(p)); }));
  fields.push_back(
      right<Point>(u.header("overhead"), [&](const Point& p) { return u.text(allocator_overhead(p)); }));
  fields.push_back(right<Point>(
      u.header("peak allocated"), [&u](const Point& p) { return u.text(p.peak_allocated); }, true));
  // Optimizer offload keeps AdamW's state in host memory, outside the device's peak.
  if (std::any_of(pts.begin(), pts.end(), [](const Point& p) { return p.host_peak_bytes.value_or(0) > 0; }))
    fields.push_back(right<Point>(u.header("host memory (offload)"),
                                  [&u](const Point& p) { return u.text(p.host_peak_bytes); }));
  // Paged optimizers keep their large states in CUDA unified memory, outside the peaks too.
  if (std::any_of(pts.begin(), pts.end(), [](const Point& p) { return p.paged_bytes.value_or(0) > 0; }))
    fields.push_back(right<Point>(u.header("paged optimizer state"),
                                  [&u](const Point& p) { return u.text(p.paged_bytes); }));
  fields.push_back(right<Point>(
      "activations share", [&](const Point& p) { return percent(activation_share(p)); }, true));
  doc.table(make_table(fields, pts));
}

}  // namespace

void breakdown_section(Document& doc, Plotter& plotter, const Group& g) {
  doc.heading(3, "Where the memory goes");
  std::vector<Point> pts;
  for (const Point& p : g.points)
    if (p.ok() && p.peak_allocated && *p.peak_allocated > 0 && (p.weights || p.activations))
      pts.push_back(p);
  if (pts.empty()) {
    doc.paragraph("No successful point has a memory breakdown.");
    return;
  }
  std::sort(pts.begin(), pts.end(), by_technique);
  const bool any_other = std::any_of(pts.begin(), pts.end(), [](const Point& p) {
    return other_allocated(p) > 0.01 * *p.peak_allocated;
  });
  breakdown_chart(doc, plotter, g, pts, any_other);
  small_activation_advice(doc, pts);
  doc.paragraph(
      "Allocator overhead is peak reserved minus peak allocated: memory the caching "
      "allocator holds that no tensor uses.");
  breakdown_table(doc, g, pts, any_other);
}

namespace {

// What a "token" is differs by family; the input shape names the family.
std::string tokens_counted(const std::string& shape) {
  if (shape.rfind("audio", 0) == 0)
    return shape.find("labels") != std::string::npos
               ? " For Whisper a token is an encoder position or a label token: the conv stem "
                 "makes 50 positions per second of audio (1500 for 30 s), plus the labels per "
                 "sample."
               : " For Whisper a token is an encoder position: the conv stem makes 50 per second "
                 "of audio (1500 for 30 s), so tokens/s is samples/s x 50 x seconds.";
  if (shape.find("target") != std::string::npos)
    return " For T5 a token is an encoder or a decoder token: seq + target per sample.";
  return "";
}

void noisy_step_warning(Document& doc, const std::vector<Point>& points) {
  int noisy = 0;
  double worst = 0;
  for (const Point& p : points)
    if (p.ok() && p.step_ms_cv && *p.step_ms_cv > kNoisyStepCv) {
      ++noisy;
      worst = std::max(worst, *p.step_ms_cv);
    }
  if (noisy > 0)
    doc.paragraph("Warning: step times vary by more than 10% between repetitions at " +
                  std::to_string(noisy) + (noisy == 1 ? " point" : " points") + " (up to " +
                  percent(worst) + "); raise warmup_steps or repetitions and measure them again.");
}

// The successful points' speed: tokens and samples per second, the step's median and spread.
void throughput_table(Document& doc, const std::vector<Point>& points) {
  std::vector<Point> ok;
  for (const Point& p : points)
    if (p.ok()) ok.push_back(p);
  auto fields = technique_fields();
  fields.pop_back();
  fields.push_back(right<Point>(
      "tokens/s", [](const Point& p) { return tokens(p.tokens_per_s); }, true));
  fields.push_back(
      right<Point>("samples/s", [](const Point& p) { return tokens(p.samples_per_s); }));
  fields.push_back(right<Point>(
      "step (ms, median)", [](const Point& p) { return p.step_ms ? fixed(*p.step_ms, 1) : ""; }));
  fields.push_back(right<Point>("step CV", [](const Point& p) {
    return p.step_ms_cv ? fixed(100 * *p.step_ms_cv, 1) + "%" : "";
  }));
  doc.table(make_table(fields, ok));
}

}  // namespace

void throughput_section(Document& doc, Plotter& plotter, const Group& g) {
  Selection sel = select_lines(g);
  doc.heading(3, "Throughput vs batch size");
  // A card whose peaks are unknown has no predicted throughput: no chart of nothing.
  if (std::none_of(g.points.begin(), g.points.end(),
                   [](const Point& p) { return p.tokens_per_s.has_value(); }) &&
      !g.predicted.empty()) {
    doc.paragraph("Throughput: not measured (" + g.predicted +
                  "; no step time is predicted for a card whose peaks are not published).");
    return;
  }
  if (!g.predicted.empty())
    doc.paragraph("Throughput predicted from each step's kernels and the card's datasheet "
                  "(docs/fidelity.md, \"Step time\": the error measured on H100 rows), " + g.predicted + ".");
  LineChart chart = batch_chart(g, sel, "-throughput", "throughput", "throughput (tokens/s)");
  Series frontier = red_crosses("first batch that runs out of memory");
  std::vector<std::string> frontier_text;
  for (std::size_t i = 0; i < sel.pairs.size(); ++i) {
    const std::string& pair = sel.pairs[i];
    Series line;
    std::optional<int64_t> first_oom;
    int64_t largest_ok = 0;
    std::string failed;  // crashes and timeouts: not a frontier, but a reader must know
    for (const Point& p : sel.points) {
      if (p.pair() != pair) continue;
      if (line.title.empty()) line = pair_series(p, i);
      if (p.ok()) largest_ok = std::max(largest_ok, p.batch);
      if (p.out_of_memory() && !first_oom) first_oom = p.batch;
      if (p.failed()) failed += "; batch " + std::to_string(p.batch) + ": " + to_string(p.status);
      if (p.ok() && p.tokens_per_s && (!first_oom || p.batch < *first_oom))
        line.points.emplace_back(p.batch, *p.tokens_per_s);
    }
    chart.series.push_back(line);
    // Without an OOM above it, the largest batch that ran is only the largest measured.
    frontier_text.push_back(
        line.title + ": " +
        (!largest_ok ? std::string("no batch fit")
         : first_oom ? "fits up to batch " + std::to_string(largest_ok)
                     : "largest measured batch " + std::to_string(largest_ok)) +
        (first_oom ? ", out of memory from batch " + std::to_string(*first_oom)
                   : ", no out-of-memory seen (the limit was not reached)") +
        failed);
    if (!first_oom) continue;
    // The cross stands at the last throughput reached, joined to it by a dotted line.
    double y = line.points.empty() ? 0 : line.points.back().second;
    frontier.points.emplace_back(*first_oom, y);
    if (!line.points.empty()) {
      Series link = line;
      link.title.clear();
      link.dash = 3;
      link.point_size = 0;
      link.points = {line.points.back(), {*first_oom, y}};
      chart.series.push_back(link);
    }
  }
  chart.series.push_back(frontier);
  const std::string off_scale = clip_outliers(chart);
  add_plot(doc, plotter.draw(chart), chart.stem, chart.title);
  doc.paragraph("Tokens per second over all micro-batches." + tokens_counted(g.shape) +
                " Held fixed: " + sel.held + "." +
                (frontier.points.empty()
                     ? ""
                     : " A red cross marks the first batch that ran out of "
                       "memory, at the throughput of the last batch that fit.") +
                off_scale);
  doc.list(frontier_text);
  noisy_step_warning(doc, sel.points);
  throughput_table(doc, sel.points);
}

std::vector<SearchAnswer> search_answers(const std::vector<Point>& points) {
  std::vector<SearchAnswer> answers;     // in file order
  std::map<std::string, std::size_t> index;  // combination -> position in answers
  for (const Point& p : points) {
    if (p.search != "max_batch") continue;
    const std::string key = p.model + "|" + p.shape + "|" + to_string(p.mode) + "|" +
                            p.technique() + "|" +
                            p.alloc_conf + "|" + fixed(p.budget_bytes, 0);
    auto [at, fresh] = index.emplace(key, answers.size());
    if (fresh) answers.emplace_back();
    SearchAnswer& a = answers[at->second];
    if (!a.first) a.first = &p;
    ++a.probes;
    if (p.ok() && (!a.largest || p.batch > a.largest->batch)) a.largest = &p;
    if (p.out_of_memory() && (!a.first_oom || p.batch < *a.first_oom)) a.first_oom = p.batch;
    if (p.failed())
      a.failed += (a.failed.empty() ? "" : "; ") +
                  ("batch " + std::to_string(p.batch) + ": " + to_string(p.status));
  }
  return answers;
}

}  // namespace sweep::reports::report
