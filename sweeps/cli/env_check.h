// What `sweep` checks of its environment before LibTorch loads. LibTorch's static
// initializers run when the dynamic loader maps it, before main: c10 parses the allocator
// settings (PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF) there, and a value it rejects
// (`max_split_size_mb=512`, `=` for `:`) aborts every command, `--version` included, with a
// c10 INTERNAL ASSERT and a stack trace. main.cc puts check_environment in the executable's
// .preinit_array, which the loader runs before any shared object's initializer (ELF gABI,
// DT_PREINIT_ARRAY; glibc's _dl_init), so the variable is named and the command exits 2
// before torch reads it.
#pragma once

#include <optional>
#include <string>

namespace sweep {

// The message for an environment LibTorch would abort on (environ-style NAME=VALUE strings,
// null-terminated), or nullopt when it would load. Runs before libstdc++'s own initializers:
// no iostream, no static objects with constructors.
std::optional<std::string> environment_error(char** envp);

// The .preinit_array entry: environment_error's message on stderr, then _exit(2).
void check_environment(int argc, char** argv, char** envp);

}  // namespace sweep
