#include "model/test_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/make_model.h"
#include "test_paths.h"

namespace fathom::testing {

TempDir::TempDir() {
  std::string tmpl = ::testing::TempDir() + "fathom-XXXXXX";
  char* p = mkdtemp(tmpl.data());
  if (!p) ADD_FAILURE() << "mkdtemp failed for " << tmpl;
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void MakeTinyModel(const std::string& family, const std::string& dir, DType dtype, uint64_t seed) {
  MakeModelOptions opt;
  opt.family = family;
  opt.out_dir = dir;
  opt.dtype = dtype;
  opt.seed = seed;
  Status s = MakeRandomModel(opt);
  ASSERT_TRUE(s.ok()) << s.message();
}

CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string JoinIds(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s;
}

void MakeUpstreamTinyModel(const std::string& family, const std::string& dir, DType dtype,
                           const std::string& extra_args) {
  const char* dt = dtype == DType::kBF16 ? "bf16" : dtype == DType::kF16 ? "f16" : "f32";
  const std::string cmd = "/usr/bin/python3 " + SourceDir() + "/tests/reference/make_tiny.py --family " +
                          family + " --out " + dir + " --dtype " + dt + " " + extra_args;
  CommandResult r = RunCommand(cmd);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
}

void RunReference(const std::string& model_dir, const std::vector<int32_t>& ids, int32_t loops,
                  const std::string& out_dir, const std::string& extra_args) {
  std::string cmd = "/usr/bin/python3 " + SourceDir() + "/tests/reference/reference.py --model " +
                    model_dir + " --ids " + JoinIds(ids) + " --out-dir " + out_dir;
  if (loops > 0) cmd += " --loops " + std::to_string(loops);
  cmd += " " + extra_args;
  CommandResult r = RunCommand(cmd);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
}

std::vector<float> ReadF32File(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) {
    ADD_FAILURE() << "cannot read " << path;
    return {};
  }
  const auto size = static_cast<size_t>(f.tellg());
  std::vector<float> v(size / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return INFINITY;
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(b[i])));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

std::string FathomBinary() { return BinaryDir() + "/fathom"; }

}  // namespace fathom::testing
