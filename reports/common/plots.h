// Charts as plain data, drawn by gnuplot: every chart is written as <stem>.dat (the
// numbers, tab-separated, readable without gnuplot) and <stem>.gp (one script that draws
// <stem>.svg and <stem>.png from it), then gnuplot runs as a subprocess in the output
// directory. Nothing here knows about results; reports/report*.cc decide what to draw.
// Without gnuplot the data and scripts are still written and draw() returns false.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sweep::reports {

inline constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

// A line (or markers only) through (x, y) points; an empty title keeps it out of the key.
struct Series {
  std::string title;
  std::vector<std::pair<double, double>> points;
  std::string color;  // "#rrggbb"
  int dash = 1;       // gnuplot dashtype: 1 solid, 2 dashed, 3 dotted
  int point_type = 7;
  double point_size = 1.0;
  bool lines = true;
};

// A horizontal reference line across a LineChart (the cap, the recommended ceiling).
struct HLine {
  double y = 0;
  std::string title;
  int dash = 2;  // gnuplot dashtype
};

struct LineChart {
  std::string stem, title, xlabel, ylabel;
  std::vector<Series> series;
  std::vector<HLine> hlines;  // e.g. the cap and the recommended ceiling
  std::optional<double> ymax;  // the top of the y range; empty: the data's (and lines') top
  std::string note;            // written in a corner, e.g. what is off the scale
  bool log2_x = false;
  std::vector<double> xtics;  // empty: gnuplot's choice
};

// Horizontal bars, one row per label, drawn in side-by-side panels that share the rows
// (e.g. memory on the left, throughput on the right). A panel with several segments
// stacks them. kMissing draws no bar; the note is written at the bar's end.
struct Segment {
  std::string title;
  std::string color;
  std::vector<double> values;  // one per row
};

struct Panel {
  std::string xlabel;
  std::vector<Segment> segments;
  std::vector<std::string> notes;  // one per row, may be empty
  std::optional<double> vline;     // e.g. the memory budget
  std::string vline_title;
};

struct BarChart {
  std::string stem, title;
  std::vector<std::string> labels;
  std::vector<Panel> panels;
};

// The x tics a chart labels: sorted `tics` less those closer than 1/24 of the axis to the
// last one kept (labels that would overlap: batches 21 and 22 on a log axis up to 97); the
// first and the largest are always kept.
std::vector<double> thin_tics(const std::vector<double>& tics, bool log2);

// Okabe-Ito colours (distinguishable with colour blindness), cycled.
std::string palette(std::size_t i);
inline constexpr const char* kRed = "#d62728";

class Plotter {
 public:
  // Finds gnuplot: $SWEEP_GNUPLOT when set (a path; one that does not exist means
  // "none"), else `gnuplot` on PATH.
  explicit Plotter(std::string out_dir);

  bool available() const { return !gnuplot_.empty(); }
  // Writes the data and script; true when gnuplot drew both the SVG and the PNG.
  bool draw(const LineChart& chart);
  bool draw(const BarChart& chart);
  // One line per chart gnuplot failed on.
  const std::vector<std::string>& errors() const { return errors_; }
  // Charts drawn (each an .svg and a .png).
  int drawn() const { return drawn_; }

 private:
  bool run(const std::string& stem);
  std::string out_dir_;
  std::string gnuplot_;
  std::vector<std::string> errors_;
  int drawn_ = 0;
};

}  // namespace sweep::reports
