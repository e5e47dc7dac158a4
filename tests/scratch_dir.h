// A test's scratch folder: NAME_<pid> under the temp directory, fresh at the start of the scope
// and deleted with everything in it at its end (through remove_tree: temp_tree.h says why).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "temp_tree.h"

namespace sweep {

struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    remove_tree(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { remove_tree(path); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

}  // namespace sweep
