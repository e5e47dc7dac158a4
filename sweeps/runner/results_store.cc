// results.csv writer; reading goes through reports::read_results (the one CSV reader).
#include "sweeps/runner/results_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "reports/results/files.h"
#include "reports/results/rows.h"
#include "reports/results/schema.h"
#include "sweeps/runner/config.h"

namespace sweep {
namespace {

// The peak a memory cap applies to: reserved on CUDA (the allocator's cap), allocated on the
// CPU (where the two are equal).
ProbeOutcome outcome_of(Status status, std::optional<double> allocated,
                        std::optional<double> reserved) {
  return {status, std::max(allocated.value_or(0), reserved.value_or(0))};
}

}  // namespace
namespace {

std::string cell(const nlohmann::json& v) {
  if (v.is_null()) return "";
  return reports::csv_field(v.is_string()    ? v.get<std::string>()
                            : v.is_boolean() ? (v.get<bool>() ? "1" : "0")
                                             : v.dump());
}

// Whether a results file's first line is an older schema's header: every column one this
// schema has (an older sweep's file lacks the columns added since; the reader leaves their
// cells empty, which every reader takes as the axis's fallback).
bool older_header(const std::string& first) {
  if (first.empty() || first == ResultsStore::header()) return false;
  std::size_t start = 0;
  while (start <= first.size()) {
    const std::size_t end = std::min(first.find(',', start), first.size());
    if (schema::find_column(first.substr(start, end - start)) >= schema::kColumnCount) return false;
    start = end + 1;
  }
  return true;
}

void refuse_schema(const std::string& csv_path) {
  throw UserError(csv_path, 1, "header", "results file has another schema than this sweep",
                  "write to another --out directory, or move this results.csv away");
}

// An older sweep's results file, rewritten under this schema's header so that new rows can
// follow its own: the file as it was is kept beside it (PATH.schema-N, the first N free), the
// rows are read as every reader reads them (new columns empty) and written whole to a
// temporary file that then replaces it. A row the reader refuses leaves everything untouched.
void upgrade_older_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  in.close();
  if (!older_header(first)) return;
  const auto results = reports::read_results(path);
  std::string text = ResultsStore::header() + "\n";
  for (const auto& row : results.rows) {
    for (std::size_t c = 0; c < row.cells.size(); ++c)
      text.append(c ? "," : "").append(reports::csv_field(row.cells[c]));
    text += '\n';
  }
  std::string kept;
  for (int n = 1; kept.empty() || fs::exists(kept); ++n)
    kept = path + ".schema-" + std::to_string(n);
  auto cannot = [&](const std::string& why) {
    throw UserError(path, 1, "header",
                    "results file has an older schema, and it could not be rewritten under this "
                    "one: " +
                        why,
                    "write to another --out directory, or move this results.csv away");
  };
  std::error_code ec;
  if (!fs::copy_file(path, kept, ec)) cannot("no copy " + kept + " (" + ec.message() + ")");
  const std::string tmp = path + ".upgrading";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      cannot("writing " + tmp + " failed");
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) cannot("renaming " + tmp + " failed (" + ec.message() + ")");
  std::cerr << "sweep: " << path << " was written by an older sweep: its " << results.rows.size()
            << " rows now carry this version's columns (empty where they were not recorded); the "
               "file as it was is "
            << kept << "\n";
}

}  // namespace

std::string ResultsStore::header() {
  std::string h;
  for (auto c : schema::kColumns) h.append(h.empty() ? "" : ",").append(c);
  return h;
}

std::string ResultsStore::format_row(const nlohmann::json& row) {
  // A key that is no column would vanish from the file (a misspelt column stays empty
  // forever): that is a bug in the writer, not bad input.
  for (const auto& [key, value] : row.items())
    SWEEP_CHECK(schema::find_column(key) < schema::kColumnCount,
                "'" + key + "' is not a results column (reports/results/schema.h)");
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

ResultsStore::ResultsStore(const std::string& dir, const std::string& file) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  path_ = (fs::path(dir) / file).string();
  // A results file that is there must be a regular one (files.h): a FIFO is refused by name,
  // not met with "cannot get file size" or an open that waits for a reader.
  bool exists = false;
  if (names_something(path_)) {
    const int fd = open_regular_file(path_, "", "results are kept in a regular file: move this one away, or write elsewhere with --out DIR");
    struct stat st{};
    exists = ::fstat(fd, &st) == 0 && st.st_size > 0;
    ::close(fd);
  }
  if (exists) upgrade_older_file(path_);
  auto open_for_append = [this] {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw UserError(path_, 0, "", std::string("cannot open for writing: ") + std::strerror(errno),
                      "choose an output directory you can write to with --out DIR");
  };
  if (exists) {
    rows_ = recall(path_);
    // A crash mid-write can leave a last line without its newline: end it so the next row
    // starts on a line of its own (the partial line then fails to parse, never silently).
    std::ifstream tail(path_, std::ios::binary);
    tail.seekg(-1, std::ios::end);
    char last = '\n';
    tail.get(last);
    open_for_append();
    if (last != '\n') write_whole("\n");
  } else {
    open_for_append();
    write_whole(header() + "\n");
  }
}

ResultsStore::~ResultsStore() {
  if (fd_ >= 0) ::close(fd_);
}

void ResultsStore::write_whole(const std::string& text) {
  // One write(2) of the whole line (a signal cannot split a write to a regular file), then
  // fsync: the row is on disk before the next point starts, and a killed run leaves whole rows.
  // A short or failed write (a full disk, a file-size limit) is cut back off, so the file
  // stays as it was and every reader still accepts it.
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  int error = 0;
  for (std::size_t done = 0; done < text.size() && !error;) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno != EINTR) error = errno;
    if (n == 0) error = ENOSPC;
    if (n > 0) done += static_cast<std::size_t>(n);
  }
  if (!error && ::fsync(fd_) != 0) error = errno;
  if (!error) return;
  const bool restored = before >= 0 && ::ftruncate(fd_, before) == 0;
  throw UserError(path_, 0, "", std::string("cannot append a row: ") + std::strerror(error) +
                                    (restored ? "; the file is left as it was"
                                              : "; the last line may be cut short"),
                  "free space on that disk (or write elsewhere with --out), then run the "
                  "same command again: points already recorded are not re-run");
}

void ResultsStore::append(const nlohmann::json& row) {
  write_whole(format_row(row) + "\n");
  ++rows_;
  if (auto it = row.find("point_id"); it != row.end()) {
    auto number = [&](const char* key) -> std::optional<double> {
      auto v = row.find(key);
      return v != row.end() && v->is_number() ? std::optional<double>(v->get<double>()) : std::nullopt;
    };
    const auto status = parse_as<Status>(row.value("status", ""));
    SWEEP_CHECK(status.has_value(), "a row appended without a known status");
    recorded_[it->get<std::string>()] = outcome_of(*status, number("peak_allocated_bytes"),
                                                   number("peak_reserved_bytes"));
  }
}

std::size_t ResultsStore::recall(const std::string& csv_path) {
  std::ifstream in(csv_path);
  std::string first;
  std::getline(in, first);
  // Another file (a Slurm shard) is only read: an older schema's reads as every reader reads it.
  if (first != header() && !older_header(first)) refuse_schema(csv_path);
  // The reader's errors name the file and line and say how to repair it; nothing is touched.
  const auto results = reports::read_results(csv_path);
  // Each point's latest row, as every reader takes it; a failure there runs the point again.
  for (const auto* r : reports::latest_per_point(results).rows) {
    const std::string& id = r->at(schema::column("point_id"));
    if (!result_on_resume(*r)) {
      recorded_.erase(id);
      continue;
    }
    recorded_[id] = outcome_of(r->status, r->number(schema::column("peak_allocated_bytes")),
                               r->number(schema::column("peak_reserved_bytes")));
  }
  return results.rows.size();
}

bool result_on_resume(const reports::Row& r) {
  return r.at(schema::column("reason")) != kNotStartedReason && r.status != Status::kCrash &&
         r.status != Status::kTimeout;
}

const ProbeOutcome* ResultsStore::outcome(const std::string& point_id) const {
  auto it = recorded_.find(point_id);
  return it == recorded_.end() ? nullptr : &it->second;
}

}  // namespace sweep
