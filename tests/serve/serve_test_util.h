// Test fixtures for the server: a minimal byte-level BPE tokenizer (GPT-2's byte-to-unicode
// alphabet, a few merges, ChatML special tokens and chat template) and a tiny random Ouro
// checkpoint whose vocabulary matches it, written together into one directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fathom::testing {

struct TinyTokenizerInfo {
  int32_t vocab_size = 0;
  int32_t endoftext = 0, im_start = 0, im_end = 0;
};

// Writes DIR/tokenizer.json and DIR/tokenizer_config.json.
TinyTokenizerInfo WriteTinyTokenizer(const std::string& dir);
// The tokenizer plus `fathom make-model ouro DIR` with vocab_size and eos_token_id set to
// the tokenizer's (fails the test on error).
TinyTokenizerInfo MakeServeModel(const std::string& dir, uint64_t seed = 7);

// `fathom serve ARGS --port 0` as a child process (stdout and stderr captured). Start()
// waits (at most 60 s) for its "listening on" line and returns the port, or -1 with the
// output so far in output(). Terminate() sends SIGTERM and returns the exit code (-1 if it
// had to be killed after 60 s). The destructor kills a server still running.
class ServeProcess {
 public:
  ~ServeProcess();
  int Start(const std::vector<std::string>& args);
  int Terminate();
  const std::string& output() const { return output_; }

 private:
  int pid_ = -1, fd_ = -1;
  std::string output_;
};

// The value of the Prometheus sample `name{labels}` (labels as written, e.g.
// `state="used"`; empty for none) in `text`; -1 if absent.
double MetricValue(const std::string& text, const std::string& name, const std::string& labels = "");

}  // namespace fathom::testing
