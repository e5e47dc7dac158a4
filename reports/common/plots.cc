// gnuplot scripts for LineChart and BarChart, and the subprocess that runs them.
// Each script loops over the two terminals so the SVG and the PNG come from one body;
// pngcairo is used where gnuplot has it (gnuplot-nox does), else the libgd `png`.
#include "reports/common/plots.h"

#include "reports/results/files.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace sweep::reports {
namespace {

namespace fs = std::filesystem;

constexpr int kWidth = 960;
constexpr const char* kGrey = "#555555";

// gnuplot single-quoted string: no escapes except '' for a quote.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A data cell: numbers in full precision (the shortest text that reads back as the same
// double), NaN for a missing value. "%.6g" printed batch 1000000 +- 0.5 as 1e+06 twice, an
// empty x range gnuplot refused.
std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

// Labels and notes go into tab-separated data; an empty field would read as missing.
std::string field(const std::string& s) {
  std::string out;
  for (char c : s) out += (c == '\t' || c == '\n') ? ' ' : c;
  return out.empty() ? "\"\"" : out;
}

// Through the one install_file (files.h): a link planted at a chart's .dat or .gp is
// replaced, never followed.
void write_file(const fs::path& path, const std::string& text) {
  install_file(path, text, "a chart's " + path.extension().string() + " file", "",
               "choose a directory you can write to with --out DIR");
}

// The script around a chart body: both terminals, no enhanced-text markup (so that
// "fp16_amp" keeps its underscore), white background.
std::string script(const std::string& stem, int height, const std::string& body) {
  std::ostringstream s;
  s << "# Draws " << stem << ".svg and " << stem << ".png from " << stem << ".dat. Run: gnuplot "
    << stem << ".gp\n"
    << "set datafile separator \"\\t\"\nset encoding utf8\n"
    << "do for [ext in \"svg png\"] {\n"
    << "  if (ext eq \"svg\") {\n"
    << "    set terminal svg size " << kWidth << "," << height
    << " font \"Sans,12\" background \"#ffffff\"\n"
    << "  } else {\n"
    << "    if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
    << "      set terminal pngcairo size " << kWidth << "," << height
    << " font \"Sans,11\" background \"#ffffff\"\n"
    << "    } else {\n"
    << "      set terminal png size " << kWidth << "," << height << " background \"#ffffff\"\n"
    << "    }\n  }\n"
    << "  set termoption noenhanced\n"
    << "  set output " << quote(stem + ".") << ".ext\n"
    << body << "  set output\n}\n";
  return s.str();
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

double max_of(const std::vector<double>& v, double floor) {
  double m = floor;
  for (double x : v)
    if (!std::isnan(x)) m = std::max(m, x);
  return m;
}

// Rows a horizontal key needs: gnuplot gives its columns the width of the longest entry,
// here ~8 px a character plus the line sample.
int key_rows(const std::vector<std::string>& entries, double room_px) {
  if (entries.empty()) return 0;
  std::size_t longest = 0;
  for (const auto& e : entries) longest = std::max(longest, e.size());
  int cols = std::max(1, static_cast<int>(room_px / (8.0 * static_cast<double>(longest) + 80)));
  return static_cast<int>((entries.size() + static_cast<std::size_t>(cols) - 1) /
                          static_cast<std::size_t>(cols));
}

// A tic step giving about four labelled tics up to `max`: 1, 2, 2.5 or 5 times a power of ten.
double nice_step(double max) {
  double raw = max > 0 ? max / 4 : 1;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 2.5 ? 2.5 : norm <= 5 ? 5 : 10) * mag;
}

// A chart's data file: row, label, then per panel its segments, the bar's end and the note.
// `first_col` gets each panel's column of its first segment, `ends` each panel's bar ends.
std::string bar_data(const BarChart& c, std::vector<int>& first_col, std::vector<std::vector<double>>& ends) {
  const std::size_t rows = c.labels.size();
  std::ostringstream data;
  data << "# " << c.title << "\n# row\tlabel";
  int col = 3;
  for (const Panel& p : c.panels) {
    first_col.push_back(col);
    for (const Segment& s : p.segments) data << "\t" << s.title;
    data << "\tbar end\tnote";
    col += static_cast<int>(p.segments.size()) + 2;
  }
  data << "\n";
  ends.assign(c.panels.size(), std::vector<double>(rows, 0));
  for (std::size_t r = 0; r < rows; ++r) {
    data << r << "\t" << field(c.labels[r]);
    for (std::size_t p = 0; p < c.panels.size(); ++p) {
      const Panel& panel = c.panels[p];
      double end = 0;
      for (const Segment& s : panel.segments) {
        data << "\t" << num(s.values[r]);
        if (!std::isnan(s.values[r])) end += s.values[r];
      }
      ends[p][r] = end;
      data << "\t" << num(end) << "\t" << field(r < panel.notes.size() ? panel.notes[r] : "");
    }
    data << "\n";
  }
  return data.str();
}

}  // namespace

std::vector<double> thin_tics(const std::vector<double>& tics, bool log2) {
  if (tics.size() < 3) return tics;
  auto at = [log2](double x) { return log2 ? std::log2(std::max(x, 1e-9)) : x; };
  const double span = at(tics.back()) - at(tics.front());
  // 960 px of plot: a label of up to four digits needs about 1/24 of it.
  const double gap = span / 24;
  std::vector<double> kept = {tics.front()};
  for (std::size_t i = 1; i < tics.size(); ++i) {
    const bool last = i + 1 == tics.size();
    if (at(tics[i]) - at(kept.back()) < gap) {
      if (!last) continue;
      if (kept.size() > 1) kept.pop_back();  // the largest batch is always labelled: it drops its neighbour
    }
    kept.push_back(tics[i]);
  }
  return kept;
}

std::string palette(std::size_t i) {
  static const char* kColors[] = {"#0072b2", "#e69f00", "#009e73", "#cc79a7",
                                  "#56b4e9", "#d55e00", "#000000", "#f0e442"};
  return kColors[i % (sizeof kColors / sizeof kColors[0])];
}

Plotter::Plotter(std::string out_dir) : out_dir_(std::move(out_dir)) {
  if (const char* env = std::getenv("SWEEP_GNUPLOT"); env && *env) {
    if (::access(env, X_OK) == 0) gnuplot_ = env;
  } else {
    gnuplot_ = find_on_path("gnuplot");
  }
}

bool Plotter::draw(const LineChart& c) {
  std::ostringstream data, body;
  data << "# " << c.title << "\n# " << c.xlabel << "\t" << c.ylabel << "\n";
  std::vector<std::string> plots, entries;
  std::vector<double> xs, ys;
  int index = 0;
  for (const Series& s : c.series) {
    if (s.points.empty()) continue;
    // Blocks are separated by two blank lines; gnuplot numbers them for `index`.
    data << (index > 0 ? "\n\n" : "") << "# " << (s.title.empty() ? "(unlabelled)" : s.title)
         << "\n";
    for (auto [x, y] : s.points) {
      data << num(x) << "\t" << num(y) << "\n";
      xs.push_back(x);
      ys.push_back(y);
    }
    std::ostringstream p;
    p << quote(c.stem + ".dat") << " index " << index++ << " using 1:2 with "
      << (s.lines ? "linespoints lw 2 dt " + std::to_string(s.dash) : std::string("points lw 2"))
      << " pt " << s.point_type << " ps " << s.point_size << " lc rgb " << quote(s.color)
      << (s.title.empty() ? " notitle" : " title " + quote(s.title));
    if (!s.title.empty()) entries.push_back(s.title);
    plots.push_back(p.str());
  }
  // A line far above the data (a whole 80 GiB device under 5 GiB of points) would flatten
  // them; then it is named in a corner instead.
  double data_max = max_of(ys, 0);
  double ymax = data_max;
  std::string above;
  for (const HLine& h : c.hlines) {
    if (data_max > 0 && h.y > 2 * data_max) {
      above += (above.empty() ? "" : "; ") + h.title;
      continue;
    }
    plots.push_back(num(h.y) + " with lines dt " + std::to_string(h.dash) + " lw 1.5 lc rgb " +
                    quote(kGrey) + " title " + quote(h.title));
    entries.push_back(h.title);
    ymax = std::max(ymax, h.y);
  }
  ymax = c.ymax ? *c.ymax : ymax * 1.08;
  if (!above.empty())
    body << "  set label 1 " << quote(above + ": above this range")
         << " at graph 0.02, graph 0.95 left tc rgb " << quote(kGrey) << "\n";
  else
    body << "  unset label 1\n";
  if (!c.note.empty())
    body << "  set label 2 " << quote(c.note) << " at graph 0.98, graph 0.95 right tc rgb "
         << quote(kRed) << "\n";
  else
    body << "  unset label 2\n";
  body << "  set title " << quote(c.title) << "\n  set xlabel " << quote(c.xlabel)
       << "\n  set ylabel " << quote(c.ylabel) << "\n"
       << "  set grid xtics ytics lc rgb '#dddddd'\n";
  if (!xs.empty()) {
    double lo = *std::min_element(xs.begin(), xs.end()),
           hi = *std::max_element(xs.begin(), xs.end());
    if (c.log2_x) {
      body << "  set logscale x 2\n  set xrange [" << num(lo / 1.25) << ":" << num(hi * 1.25)
           << "]\n";
    } else {
      double pad = std::max((hi - lo) * 0.05, 0.5);
      body << "  unset logscale x\n  set xrange [" << num(lo - pad) << ":" << num(hi + pad)
           << "]\n";
    }
  }
  if (!c.xtics.empty()) {
    const std::vector<double> tics = thin_tics(c.xtics, c.log2_x);
    body << "  set xtics (";
    for (std::size_t i = 0; i < tics.size(); ++i) body << (i ? ", " : "") << num(tics[i]);
    body << ")\n";
  }
  body << "  set yrange [0:" << num(ymax > 0 ? ymax : 1) << "]\n";
  // The key goes under the x label, with a bottom margin (in lines of text) to hold it;
  // gnuplot's own `key below` lets a one-row key touch the label.
  const int rows = key_rows(entries, kWidth - 40.0);
  body << "  set key at screen 0.5, screen 0.01 center bottom horizontal Left reverse\n"
       << "  set bmargin " << num(4 + 1.1 * rows) << "\n";
  body << "  plot ";
  for (std::size_t i = 0; i < plots.size(); ++i) body << (i ? ", \\\n       " : "") << plots[i];
  body << "\n";

  write_file(fs::path(out_dir_) / (c.stem + ".dat"), data.str());
  write_file(fs::path(out_dir_) / (c.stem + ".gp"),
             script(c.stem, 520 + 18 * rows, plots.empty() ? "" : body.str()));
  return !plots.empty() && run(c.stem);
}

bool Plotter::draw(const BarChart& c) {
  const std::size_t rows = c.labels.size();
  if (rows == 0 || c.panels.empty()) return false;
  std::vector<int> first_col;  // per panel, the column of its first segment
  std::vector<std::vector<double>> ends;  // per panel, each bar's end
  const std::string data = bar_data(c, first_col, ends);

  // Layout: the labels take the left, panels share the rest; rows ~26 px apart.
  std::size_t longest = 0;
  for (const auto& l : c.labels) longest = std::max(longest, l.size());
  // Each panel's key sits above it, under the title (a tall chart keeps it in view).
  int rows_of_key = 0;
  for (const Panel& p : c.panels) {
    std::vector<std::string> entries;
    if (p.segments.size() > 1)
      for (const Segment& s : p.segments) entries.push_back(s.title);
    if (p.vline) entries.push_back(p.vline_title);
    rows_of_key = std::max(
        rows_of_key, key_rows(entries, (kWidth - 40.0) / static_cast<double>(c.panels.size())));
  }
  const int top = 56 + 22 * rows_of_key, bottom = 60;
  const int height = top + bottom + 26 * static_cast<int>(std::max<std::size_t>(rows, 3));
  const double left = std::min(0.45, (7.5 * static_cast<double>(longest) + 30) / kWidth);
  const double gap = 0.04, right_edge = 0.98;
  const double width = (right_edge - left - gap * static_cast<double>(c.panels.size() - 1)) /
                       static_cast<double>(c.panels.size());

  std::ostringstream body;
  body << "  set multiplot title " << quote(c.title) << "\n"
       << "  set yrange [" << rows - 0.5 << ":-0.5]\n"
       << "  set grid xtics lc rgb '#dddddd'\n"
       << "  set tmargin at screen " << num(1 - static_cast<double>(top) / height)
       << "\n  set bmargin at screen " << num(static_cast<double>(bottom) / height) << "\n";
  for (std::size_t p = 0; p < c.panels.size(); ++p) {
    const Panel& panel = c.panels[p];
    double l = left + static_cast<double>(p) * (width + gap);
    bool notes = std::any_of(panel.notes.begin(), panel.notes.end(),
                             [](const std::string& n) { return !n.empty(); });
    double xmax = max_of(ends[p], panel.vline.value_or(0)) * (notes ? 1.3 : 1.05);
    body << "  set lmargin at screen " << num(l) << "\n  set rmargin at screen " << num(l + width)
         << "\n  set xlabel " << quote(panel.xlabel)
         << "\n  set xrange [0:" << num(xmax > 0 ? xmax : 1) << "]\n  set xtics 0, "
         << num(nice_step(xmax)) << "\n  unset arrow\n  set key at screen " << num(l + width / 2)
         << ", screen " << num(1 - 40.0 / height) << " center top horizontal Left reverse\n";
    // Only the first panel names the rows; the others line up with it.
    if (p == 0) {
      body << "  set ytics scale 0 (";
      for (std::size_t r = 0; r < rows; ++r)
        body << (r ? ", " : "") << quote(c.labels[r]) << " " << r;
      body << ")\n";
    } else {
      body << "  unset ytics\n";
    }
    if (panel.vline)
      body << "  set arrow from " << num(*panel.vline) << ", graph 0 to " << num(*panel.vline)
           << ", graph 1 nohead dt 2 lw 1.5 lc rgb " << quote(kGrey) << "\n";
    body << "  plot ";
    std::string start = "0";
    int k = first_col[p];
    for (const Segment& s : panel.segments) {
      std::string end = start == "0" ? "column(" + std::to_string(k) + ")"
                                     : start + "+column(" + std::to_string(k) + ")";
      body << quote(c.stem + ".dat") << " using (0):1:(" << start << "):(" << end
           << "):($1-0.36):($1+0.36) with boxxyerror fs solid 0.85 noborder lc rgb "
           << quote(s.color)
           << (panel.segments.size() > 1 ? " title " + quote(s.title) : std::string(" notitle"))
           << ", \\\n       ";
      start = end;
      ++k;
    }
    if (panel.vline)
      body << "NaN with lines dt 2 lw 1.5 lc rgb " << quote(kGrey) << " title "
           << quote(panel.vline_title) << ", \\\n       ";
    body << quote(c.stem + ".dat") << " using " << k << ":1:" << k + 1
         << " with labels left offset char 0.6,0 notitle\n";
  }
  body << "  unset multiplot\n";

  write_file(fs::path(out_dir_) / (c.stem + ".dat"), data);
  write_file(fs::path(out_dir_) / (c.stem + ".gp"), script(c.stem, height, body.str()));
  return run(c.stem);
}

// Runs gnuplot on <stem>.gp in the output directory (the script names its files
// relatively, so it can be re-run there by hand). Keeps the first line of stderr on failure.
bool Plotter::run(const std::string& stem) {
  // Images of an earlier run must not pass for this one's.
  for (const char* ext : {".svg", ".png"}) fs::remove(fs::path(out_dir_) / (stem + ext));
  if (gnuplot_.empty()) return false;
  int err[2];
  if (::pipe(err) != 0) {
    errors_.push_back(stem + ".gp: cannot create a pipe for gnuplot");
    return false;
  }
  std::string script_name = stem + ".gp";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(err[0]);
    ::dup2(err[1], STDERR_FILENO);
    ::dup2(err[1], STDOUT_FILENO);
    if (::chdir(out_dir_.c_str()) != 0) ::_exit(127);
    ::execl(gnuplot_.c_str(), gnuplot_.c_str(), script_name.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(err[1]);
  std::string output;
  char buf[4096];
  for (ssize_t n; (n = ::read(err[0], buf, sizeof buf)) > 0;)
    output.append(buf, static_cast<std::size_t>(n));
  ::close(err[0]);
  int status = 0;
  if (pid > 0) ::waitpid(pid, &status, 0);
  bool drawn = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  for (const char* ext : {".svg", ".png"}) {
    fs::path out = fs::path(out_dir_) / (stem + ext);
    drawn = drawn && fs::exists(out) && fs::file_size(out) > 0;
  }
  if (!drawn) {
    std::string first =
        output.substr(0, output.find_first_of('\n', output.find_first_not_of("\n ")));
    if (first.empty() && pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      first = "it exited 0 but wrote an empty or no " + stem + ".svg/.png";
    errors_.push_back(script_name + ": gnuplot failed" + (first.empty() ? "" : ": " + first));
    // No half-drawn image is left to pass for a plot.
    for (const char* ext : {".svg", ".png"}) fs::remove(fs::path(out_dir_) / (stem + ext));
  }
  drawn_ += drawn;
  return drawn;
}

}  // namespace sweep::reports
