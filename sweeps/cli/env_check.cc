// See env_check.h. Everything here runs before the shared libraries' initializers, libstdc++'s
// included: strings and the allocator-settings parser (which throws and catches internally)
// are fine, iostreams are not, so the message goes out with write(2).
#include "sweeps/cli/env_check.h"

#include <unistd.h>

#include <cstring>
#include <string_view>
#include <variant>

#include "reports/results/error.h"
#include "sweeps/measure/alloc_conf.h"

namespace sweep {

std::optional<std::string> environment_error(char** envp) {
  // Both readers (zygote.h, set_alloc_conf): torch reads whichever it looks at first, and a
  // value it rejects in either aborts it.
  for (const std::string_view name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    for (char** e = envp; e && *e; ++e) {
      const std::string_view kv(*e);
      if (!kv.starts_with(name) || kv.size() <= name.size() || kv[name.size()] != '=') continue;
      const std::string value(kv.substr(name.size() + 1));
      const auto parsed = emu::parse_alloc_conf(value);
      const auto* error = std::get_if<std::string>(&parsed);
      if (!error) break;
      // print_user_error's format ("error: ...", "hint: ..."); its iostream is not usable yet.
      const UserError err(std::string(name), 0, "",
                        "inherited from the environment, and PyTorch 2.11 rejects it: " + *error +
                            ". LibTorch reads it as it loads, before any command runs, and would abort",
                        "unset it (unset " + std::string(name) + ") or write it as torch takes it: "
                        "key:value, comma-separated, e.g. " + std::string(name) +
                            "=expandable_segments:True,max_split_size_mb:512; keys: " +
                            emu::alloc_conf_keys());
      return "error: " + err.located() + "\nhint: " + err.hint() + "\n";
    }
  }
  return std::nullopt;
}

void check_environment(int, char**, char** envp) {
  const auto error = environment_error(envp);
  if (!error) return;
  for (std::size_t done = 0; done < error->size();) {
    const ssize_t n = write(STDERR_FILENO, error->data() + done, error->size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  _exit(2);
}

}  // namespace sweep
