// fathom: an inference engine for depth-adaptive language models. See README.md.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"

namespace {

constexpr const char* kUsage =
    "usage: fathom <command> [flags]\n"
    "\n"
    "commands:\n"
    "  make-model FAMILY OUTDIR   write a random checkpoint with the real tensor names\n"
    "  logits                     run a prompt once and write the logits of every position\n"
    "  generate                   generate tokens from a prompt (exit depths for looped models)\n"
    "  tokenize                   encode text (or decode ids) with a checkpoint's tokenizer\n"
    "  serve                      OpenAI-compatible HTTP server (completions, chat, SSE, metrics)\n"
    "  eval [sweep]               perplexity of a text under an exit policy, as served\n"
    "  bench decode|step-latency|offline|online|k-sweep\n"
    "                             throughput, latency and scheduler benchmarks\n"
    "\n"
    "Run `fathom <command> --help` for the flags of a command.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "make-model") return fathom::cli::RunMakeModel(args);
  if (cmd == "logits") return fathom::cli::RunLogits(args);
  if (cmd == "generate") return fathom::cli::RunGenerate(args);
  if (cmd == "bench") return fathom::cli::RunBench(args);
  if (cmd == "tokenize") return fathom::cli::RunTokenize(args);
  if (cmd == "serve") return fathom::cli::RunServe(args);
  if (cmd == "eval") return fathom::cli::RunEval(args);
  std::fprintf(stderr, "fathom: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
  return 2;
}
