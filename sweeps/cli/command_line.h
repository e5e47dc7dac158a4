// What `sweep` says about a command line CLI11 refused: the refusal, and a hint in the words
// of the subcommand it was given to: "did you mean --seq?" for a flag it does not have, the
// nearest subcommand for a misspelt one, and that (sub)command's own --help.
#pragma once

#include <CLI/CLI.hpp>

#include "reports/results/error.h"

namespace sweep {

// The user error for `e`, thrown by app.parse: its message is CLI11's, its hint names the
// nearest flag of the innermost subcommand parsed for each unknown one (reports/results/
// spelling.h's suggestions) and ends with "run `sweep fit --help`".
UserError command_line_error(const CLI::App& app, const CLI::ParseError& e);

}  // namespace sweep
