// Ctrl-C during a run: every finished point is already a row of the results file (appended and
// fsync'ed as it finished), so SIGINT ends the run at once, says how many rows are kept and
// the command that resumes (the same command line: a run reuses every point on record), and
// exits 130 (128 + SIGINT, as a shell reports it). The point in flight leaves no row: its
// worker dies with this process (PR_SET_PDEATHSIG) and the resumed run measures it again.
#pragma once

#include <string>

namespace sweep {

// Installs the SIGINT handler for a run writing `results_path`, which holds `kept` rows
// already, each a `noun` ("probes", "points"). Idempotent per path (fit runs its search, then
// its pick, into one file).
void exit_on_interrupt(const std::string& results_path, int kept, const std::string& noun);
// One more row kept (called after each append of a measured point).
void count_kept_row();

// This process's command line as a shell would take it back ("sweep fit gpt2 --gpu 'a b'").
std::string command_line();
// `text` quoted for a POSIX shell where it needs to be.
std::string shell_quoted(const std::string& text);

}  // namespace sweep
