// results.csv writer; reading goes through reports::read_results (the one CSV reader).
#include "sweeps/results_store.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "reports/results.h"
#include "sweeps/config.h"
#include "sweeps/schema.h"

namespace sweep {
namespace {

std::string cell(const nlohmann::json& v) {
  if (v.is_null()) return "";
  std::string s = v.is_string() ? v.get<std::string>() : v.is_boolean() ? (v.get<bool>() ? "1" : "0") : v.dump();
  // One line per row: newlines inside a message become spaces.
  for (auto& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  if (s.find_first_of(",\"") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

std::string ResultsStore::header() {
  std::string h;
  for (auto c : schema::kColumns) h += (h.empty() ? "" : ",") + std::string(c);
  return h;
}

std::string ResultsStore::format_row(const nlohmann::json& row) {
  std::string line;
  bool first = true;
  for (auto c : schema::kColumns) {
    if (!first) line += ',';
    first = false;
    auto it = row.find(std::string(c));
    if (it != row.end()) line += cell(*it);
  }
  return line;
}

ResultsStore::ResultsStore(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  path_ = (fs::path(dir) / "results.csv").string();
  const bool exists = fs::exists(path_) && fs::file_size(path_) > 0;
  if (exists) {
    std::ifstream in(path_);
    std::string first;
    std::getline(in, first);
    if (first != header())
      throw ConfigError(path_, 1, "header", "results file has another schema than this sweep",
                        "write to another --out directory, or move this results.csv away");
    try {
      for (const auto& r : reports::read_results(path_).rows)
        recorded_.insert(r.at(schema::column("point_id")));
    } catch (const reports::ResultsError& e) {
      throw ConfigError(e.file(), static_cast<int>(e.line()), "results", e.what(),
                        "the file is left as it is: repair or move it, then run again");
    }
    // A crash mid-write can leave a last line without its newline: end it so the next row
    // starts on a line of its own (the partial line then fails to parse, never silently).
    std::ifstream tail(path_, std::ios::binary);
    tail.seekg(-1, std::ios::end);
    char last = '\n';
    tail.get(last);
    f_ = std::fopen(path_.c_str(), "a");
    if (f_ && last != '\n') std::fputc('\n', f_);
  } else {
    f_ = std::fopen(path_.c_str(), "a");
    if (f_) std::fprintf(f_, "%s\n", header().c_str());
  }
  if (!f_) throw ConfigError(path_, 0, "out", "cannot open for writing", "check permissions");
  std::fflush(f_);
  fsync(fileno(f_));
}

ResultsStore::~ResultsStore() {
  if (f_) std::fclose(f_);
}

void ResultsStore::append(const nlohmann::json& row) {
  const std::string line = format_row(row) + "\n";
  // One fwrite of the whole line, then flush and fsync: the row is on disk before the
  // next point starts.
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
  fsync(fileno(f_));
  if (auto it = row.find("point_id"); it != row.end()) recorded_.insert(it->get<std::string>());
}

}  // namespace sweep
