// Inputs that the fuzz targets (tests/fuzz, scripts/fuzz.sh) found crashing fathom, kept as
// regression tests. A number literal past double's range (1e309) makes nlohmann::json
// throw out_of_range (406), not parse_error: parsers that caught only parse_error let it
// escape and std::terminate (found by shard_index_fuzz in its first 600 inputs).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "io/json_fields.h"
#include "io/safetensors.h"

namespace fathom {
namespace {

std::string TempDirFor(const std::string& name) {
  const std::string d = (std::filesystem::temp_directory_path() / ("fathom-fuzzreg-" + name + "-" +
                                                                    std::to_string(getpid()))).string();
  std::filesystem::create_directories(d);
  return d;
}

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(FuzzRegression, JsonNumberPastDoubleRangeIsAnError) {
  auto r = JsonFields::ParseText(R"({"hidden_size": 1e999})", "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("config.json: malformed JSON"), std::string::npos) << r.status().message();
}

TEST(FuzzRegression, ShardIndexWithANumberPastDoubleRangeIsAnError) {
  const std::string d = TempDirFor("index");
  Write(d + "/model.safetensors.index.json", R"({"metadata": {"total_size": 1e3081}, "weight_map": {}})");
  auto ck = Checkpoint::Open(d);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("malformed JSON"), std::string::npos) << ck.status().message();
  std::filesystem::remove_all(d);
}

TEST(FuzzRegression, SafetensorsHeaderWithANumberPastDoubleRangeIsAnError) {
  const std::string d = TempDirFor("header");
  const std::string header = R"({"a": {"dtype": "F32", "shape": [1e999], "data_offsets": [0, 4]}})";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  Write(d + "/model.safetensors", file + header + std::string(4, '\0'));
  auto ck = Checkpoint::OpenFile(d + "/model.safetensors");
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("header is not valid JSON"), std::string::npos) << ck.status().message();
  std::filesystem::remove_all(d);
}

}  // namespace
}  // namespace fathom
