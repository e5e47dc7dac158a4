// `sweep report RESULTS_DIR [--out DIR]`: one report per results directory, as
// report.md (GitHub; plots linked as SVG), report.html (self-contained, PNGs embedded),
// the plots (.svg and .png), the data gnuplot read (.dat) and its scripts (.gp).
// Per model: peak memory vs batch size, techniques compared at one batch size, where the
// memory goes, throughput vs batch size; a header says what measured it and what failed.
#pragma once

#include <string>

#include "reports/recommend/recommend.h"

namespace CLI {
class App;
}

namespace sweep::reports {

// Reads results_dir/results.csv (or results_dir itself if it is the file) and writes the
// report into out_dir (empty: results_dir, or the file's directory). Every row is parsed
// before anything is written, so bad input throws UserError and leaves out_dir alone.
// Without gnuplot the tables and plot data are still written and a note says how to get
// it. Returns 0; 2 (the error printed) when gnuplot ran but a plot failed: the report is
// then written without it, and no empty or partial image is left.
// With a card (options.gpu or options.memory_gib), the memory charts draw its usable memory
// by the one rule of recommend.h and the tables say which points fit it.
struct ReportOptions {
  RecommendOptions card;
};
int write_report(const std::string& results_dir, const std::string& out_dir = "",
                 const ReportOptions& options = {});

// Adds `report RESULTS_DIR [--out DIR] [--gpu NAME | --memory-gib N] [--margin F]
// [--context-gib X]`. On bad input it prints `file:line: message` and a
// `hint:` line to stderr and sets exit_code to 2; otherwise exit_code = 0.
void register_report_command(CLI::App& app, int& exit_code);

}  // namespace sweep::reports
