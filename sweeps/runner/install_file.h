// One way to replace a file whole or not at all (fit.yaml, fit-pick.yaml, a run's kept
// config, a Slurm plan): a reader sees the old file or the new one, never a part.
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

}  // namespace sweep
