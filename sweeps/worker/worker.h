// The worker side of process isolation: `sweep worker --point JSON --result-fd N` runs one
// point's burst in this fresh process and writes one JSON record (schema column -> value)
// to the pipe. Crashes and hangs are the parent's to classify; an OOM is a normal record.
#pragma once

#include <string>

namespace sweep {

int worker_main(const std::string& point_json, int result_fd);

}  // namespace sweep
