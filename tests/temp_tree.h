// Deleting a test's temporary folder. Every test binary uses this, never
// std::filesystem::remove_all: libtorch.so exports its own copy of libstdc++'s filesystem, whose
// remove_all jumps to null, and with a toolchain that links libstdc++ statically (the GPU
// image's /opt/gcc g++ 13) the linker binds the call to that copy whatever the link order
// (sweep_tests crashed in every temp-folder test on the H100 host, 2026-11-22).
#pragma once

#include <ftw.h>

#include <cstdio>
#include <filesystem>

namespace sweep {

// Deletes DIR and everything in it, without following links; a missing DIR is no error.
inline void remove_tree(const std::filesystem::path& dir) {
  ::nftw(
      dir.c_str(), [](const char* path, const struct stat*, int, struct FTW*) { return std::remove(path); },
      16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace sweep
