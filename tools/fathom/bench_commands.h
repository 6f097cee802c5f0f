// `fathom bench` subcommands built on src/bench (workloads, exit traces, bounds).
#pragma once

#include <string>
#include <vector>

namespace fathom::cli {

int RunBenchOffline(const std::vector<std::string>& args);
int RunBenchOnline(const std::vector<std::string>& args);
int RunBenchKSweep(const std::vector<std::string>& args);
int RunBenchServe(const std::vector<std::string>& args);  // bench_serve.cc
int RunBenchKvCapacity(const std::vector<std::string>& args);  // bench_kv_capacity.cc
int RunBenchSoak(const std::vector<std::string>& args);  // bench_soak.cc
int RunBenchBudget(const std::vector<std::string>& args);  // bench_budget.cc

}  // namespace fathom::cli
