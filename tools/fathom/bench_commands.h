// `fathom bench` subcommands built on src/bench (workloads, exit traces, bounds).
#pragma once

#include <string>
#include <vector>

namespace fathom::cli {

int RunBenchOffline(const std::vector<std::string>& args);
int RunBenchOnline(const std::vector<std::string>& args);
int RunBenchKSweep(const std::vector<std::string>& args);

}  // namespace fathom::cli
