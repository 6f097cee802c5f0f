// The subcommands of the `fathom` CLI. Each parses its own flags (flags.h) and returns the
// process exit code: 0 success, 1 runtime error, 2 usage error.
#pragma once

#include <string>
#include <vector>

namespace fathom::cli {

int RunMakeModel(const std::vector<std::string>& args);
int RunLogits(const std::vector<std::string>& args);
int RunGenerate(const std::vector<std::string>& args);
int RunBench(const std::vector<std::string>& args);
int RunTokenize(const std::vector<std::string>& args);  // cmd_tokenize.cc
int RunServe(const std::vector<std::string>& args);     // cmd_serve.cc
int RunEval(const std::vector<std::string>& args);      // cmd_eval.cc (and eval sweep)

// Prints "fathom <command>: <message>" to stderr and returns `code`.
int Fail(const std::string& command, const std::string& message, int code);

}  // namespace fathom::cli
