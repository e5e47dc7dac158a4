// `sweep fit`; see fit.h. A config is written and run like any other, then read back through
// the one results reader, so everything fit says comes from rows in OUT/results.csv. Each stage
// is a function of its own, in a file named for it:
//   fit_question  the model, its lengths, the card, the device, the rule's cap and ceiling
//   fit_plan      the technique combinations and the config that searches them
//   fit_search    fit.yaml written, the estimate, the max-batch searches (seeded, resumed)
//   fit_analysis  this question's rows: the largest batch per technique
//   fit_pick      the one recommendation, confirmed at its accumulation (--seq max: the
//                 longest seq)
//   fit_answer    the answer as text or JSON
#include "sweeps/cli/fit.h"

#include <iostream>

#include "sweeps/cli/fit_analysis.h"
#include "sweeps/cli/fit_answer.h"
#include "sweeps/cli/fit_pick.h"
#include "sweeps/cli/fit_plan.h"
#include "sweeps/cli/fit_question.h"
#include "sweeps/cli/fit_search.h"

namespace sweep {

std::string FitTechnique::label() const {
  // Appended, not "text" + std::string&&: g++ 12 sets off a false -Wstringop-overflow there.
  std::string s = to_string(precision);
  if (checkpointing == Checkpointing::kNone) {
    s += ", no checkpointing, ";
  } else {
    s += ", ";
    s += to_string(checkpointing);
    s += " checkpointing, ";
  }
  s += to_string(optimizer);
  s += name_tail(cells_of(*this), ", ");
  return s;
}

int run_fit(const FitOptions& given, nlohmann::json* answer) {
  const FitQuestion question = ask(given);
  const FitPlan planned = plan(question);
  const FitSearch searched = search(question, planned);
  if (searched.exit_code != 0) return searched.exit_code;
  const FitRows rows = analyse(question, searched, planned.wanted);
  const FitPick picked =
      question.o.seq_max ? pick_longest(question, rows) : pick_confirmed(question, planned, rows);
  if (picked.exit_code != 0) return picked.exit_code;
  if (answer) {
    *answer = answer_json(question, searched, rows, picked);
  } else if (question.o.json) {
    std::cout << answer_json(question, searched, rows, picked).dump(2) << "\n";
  } else {
    print_answer(question, planned, searched, rows, picked);
  }
  return picked.no_answer.empty() ? 0 : 1;  // searches stopped by crashes: no answer
}

}  // namespace sweep
