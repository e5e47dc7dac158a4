// The three error tiers (see STYLE.md), shared by the training and the reporting side.
// Header-only and free of LibTorch, like schema.h, so that `reports` can use it without
// linking `sweeps`.
//  1. Broken invariants: SWEEP_CHECK(cond, message) prints file:line and aborts.
//  2. Library and environment failures (filesystem, memory, anything else thrown): caught
//     at one boundary, run_guarded(), and printed naming the path and the cause, exit 2.
//  3. User errors: one type, UserError, printed one way, `file:line: key: message` and a
//     `hint:` line, exit 2.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace sweep {

// Bad input (a config, a flag, a results file, an output directory the user chose).
// `file` may be a flag ("--memory-gib") when no file is involved; `line` 0 = no line.
class UserError : public std::runtime_error {
 public:
  UserError(std::string file, int line, std::string key, const std::string& message,
            std::string hint = "")
      : std::runtime_error(message),
        file_(std::move(file)),
        key_(std::move(key)),
        hint_(std::move(hint)),
        line_(line) {}
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  const std::string& key() const { return key_; }
  const std::string& hint() const { return hint_; }
  // "file:line: key: message", leaving out what is empty.
  std::string located() const {
    std::string s = file_;
    if (line_ > 0) s.append(":").append(std::to_string(line_));
    if (!s.empty()) s += ": ";
    if (!key_.empty()) s.append(key_).append(": ");
    return s.append(what());
  }

 private:
  std::string file_, key_, hint_;
  int line_;
};

// The one printer: "error: file:line: key: message" and "hint: ...". Returns exit code 2.
inline int print_user_error(const UserError& e, std::ostream& err = std::cerr) {
  err << "error: " << e.located() << "\n";
  if (!e.hint().empty()) err << "hint: " << e.hint() << "\n";
  err.flush();
  return 2;
}

// The boundary for tiers 2 and 3: runs fn (returning an exit code) and turns whatever it
// throws into a message on stderr and exit code 2. Nothing escapes, so no `terminate
// called`; what fn had already written stays written.
template <class F>
int run_guarded(F&& fn) noexcept {
  try {
    try {
      return fn();
    } catch (const UserError& e) {
      return print_user_error(e);
    } catch (const std::filesystem::filesystem_error& e) {
      // what() is "filesystem error: cannot create directories: Permission denied [p]".
      std::string what = e.what();
      if (what.rfind("filesystem error: ", 0) == 0) what.erase(0, 18);
      if (auto b = what.find(" ["); b != std::string::npos) what.erase(b);
      return print_user_error(UserError(e.path1().string(), 0, "", what,
                                        "check that the path exists and is writable"));
    } catch (const std::bad_alloc&) {
      return print_user_error(UserError("", 0, "", "out of memory",
                                        "the grid or the input is too large for this host"));
    } catch (const std::exception& e) {
      return print_user_error(UserError("", 0, "", std::string("unexpected failure: ") + e.what(),
                                        "this is a bug in sweep if the input was valid; "
                                        "please report it with the command line"));
    }
  } catch (...) {  // the printer itself failed (stderr closed): still no terminate
    return 2;
  }
}

// Tier 1: an invariant the code relies on. Not for user input.
[[noreturn]] inline void check_failed(const char* file, int line, const char* expr,
                                      const std::string& message) {
  std::fprintf(stderr, "%s:%d: internal check failed: %s%s%s\n", file, line, expr,
               message.empty() ? "" : ": ", message.c_str());
  std::abort();
}

}  // namespace sweep

#define SWEEP_CHECK(cond, message)                                            \
  do {                                                                        \
    if (!(cond)) ::sweep::check_failed(__FILE__, __LINE__, #cond, (message)); \
  } while (0)
