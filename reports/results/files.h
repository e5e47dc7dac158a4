// The one way sweep reads and writes the files a user points it at.
// Writing: every file the product writes whole (fit.yaml, a run's kept config, a Slurm plan,
// the report and its charts' .dat/.gp, recommendations.*, compare --export, the tables) is
// installed: a reader sees the old file or the new one, never a part, and a link planted at
// the name is replaced, never followed.
// Reading: only a regular file is read; a FIFO, a socket, a device or a directory given where
// a file belongs is refused with the file's name instead of blocking or failing obscurely.
// Free of LibTorch, like the rest of the results contract: both sides use it.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace sweep {

// Installs `text` as the file `path`: written to a fresh temporary file beside it (mkstemp, so
// no planted link is followed or replaced), fsync'ed, handed to `check` (which may read it,
// e.g. with load_config, and throw), then renamed over `path`. A write that fails throws
// UserError(path, field: "cannot write WHAT: cause", hint); whatever throws leaves `path` as
// it was and removes the temporary file.
void install_file(const std::filesystem::path& path, const std::string& text, const std::string& what,
                  const std::string& field, const std::string& hint,
                  const std::function<void(const std::string& written)>& check = {});

// Opens `path` for reading if it is a regular file (following links, as a reader does): the
// descriptor (close-on-exec, blocking). Opened without blocking and checked with fstat on what
// was opened, so a FIFO neither blocks the open nor slips in after a check. Throws
// UserError(path, field: "not a regular file (a FIFO)" or "cannot read: cause", hint).
int open_regular_file(const std::string& path, const std::string& field, const std::string& hint);

// The whole text of the regular file `path` (open_regular_file's checks and errors).
std::string read_regular_file(const std::string& path, const std::string& field, const std::string& hint);

// Creates the output directory `dir` (and its parents) if it is not there. A link whose
// target does not exist is said so (create_directories said only "File exists"), as is
// anything that is not a directory. Throws UserError(dir, field: message, hint).
void make_output_directory(const std::filesystem::path& dir, const std::string& field);

// Whether `path` names something that exists, following links; a dangling link counts as
// existing (it is refused when read, never silently skipped).
bool names_something(const std::filesystem::path& path);

}  // namespace sweep
