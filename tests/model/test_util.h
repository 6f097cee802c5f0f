// Helpers for model-level tests: temporary directories, tiny random checkpoints, running
// the PyTorch reference (tests/reference/reference.py) and reading its raw f32 outputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fathom::testing {

// A fresh directory under the test temp dir, removed at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes a random checkpoint of `family`'s tiny preset into `dir` (fails the test on error).
void MakeTinyModel(const std::string& family, const std::string& dir, DType dtype,
                   uint64_t seed = 1);

// Writes a random checkpoint with tests/reference/make_tiny.py: the upstream tensor names and
// config fields (written independently of fathom's own writer), `extra_args` e.g. "--tied" or
// "--shards 2". Families: llama, qwen2, qwen3, ouro, huginn, lckv.
void MakeUpstreamTinyModel(const std::string& family, const std::string& dir, DType dtype,
                           const std::string& extra_args = "");

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
CommandResult RunCommand(const std::string& command);

// Runs the PyTorch reference; its outputs land in `out_dir`.
void RunReference(const std::string& model_dir, const std::vector<int32_t>& ids, int32_t loops,
                  const std::string& out_dir, const std::string& extra_args = "");

std::vector<float> ReadF32File(const std::string& path);

// max |a - b| / max |b|: the relative error used against the reference.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b);

std::string JoinIds(const std::vector<int32_t>& ids);
std::string FathomBinary();

}  // namespace fathom::testing
