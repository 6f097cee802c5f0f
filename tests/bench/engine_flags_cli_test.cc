// Every command that builds an Engine takes the engine's options from one declaration
// (tools/fathom/engine_flags.h): the same flag has the same help in every command, the
// help states EngineOptions{}'s own default, a bad value is a usage error naming the flag,
// and what is given reaches the engine.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "model/family.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::CommandResult;

CommandResult Fathom(const std::string& args) { return testing::RunCommand(testing::FathomBinary() + " " + args); }

// flag -> its help line, from `--help` ("  --width N\n      help").
std::map<std::string, std::string> HelpLines(const std::string& help) {
  std::map<std::string, std::string> out;
  std::istringstream in(help);
  std::string line, flag;
  while (std::getline(in, line)) {
    if (line.rfind("  --", 0) == 0) flag = line.substr(2, line.find(' ', 2) - 2);
    else if (line.rfind("      ", 0) == 0 && !flag.empty()) out[flag] = line.substr(6), flag.clear();
  }
  return out;
}

const std::vector<std::string> kCommands = {"generate --requests x", "serve",         "bench serve",  "bench online",
                                            "bench k-sweep",         "bench decode",  "bench offline"};

TEST(EngineFlagsCli, OneHelpPerFlagWithTheEnginesDefaults) {
  const EngineOptions d;
  const std::map<std::string, std::string> defaults = {
      {"--scheduler", "(default " + std::string(SchedModeName(d.mode)) + ")"},
      {"--layout", "(default " + std::string(KvLayoutName(d.layout)) + ")"},
      {"--shared-after", "(default " + std::to_string(d.shared_after) + ")"},
      {"--width", "(default " + std::to_string(d.width) + ")"},
      {"--k", "(default " + std::to_string(d.min_coda) + ")"},
      {"--flush-steps", "(default " + std::to_string(d.flush_steps) + ")"},
      {"--prefill-budget", "(default " + std::to_string(d.prefill_budget) + ")"},
      {"--block-size", "(default " + std::to_string(d.block_size) + ")"},
      {"--kv-dtype", "(default " + std::string(KvDtypeName(d.kv_dtype)) + ")"},
      {"--lookahead", d.lookahead ? "default on" : "default off"}};
  std::map<std::string, std::pair<std::string, std::string>> first;  // flag -> (command, help)
  for (const std::string& cmd : kCommands) {
    const CommandResult r = Fathom(cmd + " --help");
    ASSERT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
    const auto lines = HelpLines(r.output);
    EXPECT_TRUE(lines.count("--layout")) << cmd << " takes no --layout:\n" << r.output;
    for (const auto& [flag, help] : lines) {
      if (defaults.count(flag)) {
        EXPECT_NE(help.find(defaults.at(flag)), std::string::npos) << cmd << " " << flag << ": " << help;
      }
      if (flag == "--max-depth" || !defaults.count(flag)) continue;  // --max-depth's default is per command
      const auto [it, fresh] = first.emplace(flag, std::make_pair(cmd, help));
      if (!fresh) {
        EXPECT_EQ(help, it->second.second) << flag << ": " << cmd << " vs " << it->second.first;
      }
    }
  }
  EXPECT_EQ(first.size(), defaults.size());  // every option is declared somewhere
}

TEST(EngineFlagsCli, BadValuesAreUsageErrorsNamingTheFlag) {
  for (const std::string cmd : {"serve", "bench serve", "bench decode"}) {
    CommandResult r = Fathom(cmd + " --model /nonexistent --layout sideways 2>&1");
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("--layout: unknown KV layout \"sideways\""), std::string::npos) << cmd << ": " << r.output;
    if (cmd == "bench decode") continue;  // its only engine option is the layout
    r = Fathom(cmd + " --model /nonexistent --width 0 2>&1");
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("--width: 0 is outside [1, "), std::string::npos) << cmd << ": " << r.output;
  }
  const CommandResult r = Fathom("serve --model /nonexistent --scheduler fifo 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--scheduler: expected cb, cdb-norefill or cdb-refill, found 'fifo'"), std::string::npos)
      << r.output;
}

TEST(EngineFlagsCli, GivenOptionsReachTheEngine) {
  testing::TempDir dir;
  ASSERT_EQ(Fathom("make-model ouro " + dir / "ouro").exit_code, 0);
  std::ofstream(dir / "req.jsonl") << "{\"prompt_ids\": [1, 2, 3], \"max_tokens\": 3}\n";
  CommandResult r = Fathom("generate --model " + dir / "ouro" + " --requests " + dir / "req.jsonl" +
                           " --scheduler cb --layout hybrid --block-size 4 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["summary"]["scheduler"], "cb");
  EXPECT_EQ(j["summary"]["layout"], "hybrid");
  // The defaults are the engine's, in bench decode too (it once defaulted to depth-indexed).
  r = Fathom("generate --model " + dir / "ouro" + " --requests " + dir / "req.jsonl" + " --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["summary"]["scheduler"], std::string(SchedModeName(EngineOptions{}.mode)));
  EXPECT_EQ(j["summary"]["layout"], std::string(KvLayoutName(EngineOptions{}.layout)));
  r = Fathom("bench decode --model " + dir / "ouro" + " --prompt 4 --gen 2 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["layout"], std::string(KvLayoutName(EngineOptions{}.layout)));
  EXPECT_EQ(nlohmann::json::parse(r.output)["kv_dtype"], std::string(KvDtypeName(EngineOptions{}.kv_dtype)));
  r = Fathom("bench decode --model " + dir / "ouro" + " --prompt 4 --gen 2 --threads 1 --kv-dtype f32 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["kv_dtype"], "f32");
  r = Fathom("bench decode --model " + dir / "ouro" + " --kv-dtype f16 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--kv-dtype: 'f16' is not bf16, int8 or f32"), std::string::npos)
      << r.output;
  // bench offline takes them from the same declarations (it once had its own copies).
  r = Fathom("bench offline --model " + dir / "ouro" +
             " --requests 2 --schedulers cb --no-control --width 3 --k 2 --layout hybrid --max-depth 2 --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["width"], 3);
  EXPECT_EQ(j["k"], 2);
  EXPECT_EQ(j["layout"], "hybrid");
  EXPECT_EQ(j["r_max"], 2);
  r = Fathom("bench offline --model " + dir / "ouro" + " --layout sideways 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--layout: unknown KV layout \"sideways\""), std::string::npos) << r.output;
  // A pool too small for a block is the engine's error, so --kv-memory reached it.
  r = Fathom("generate --model " + dir / "ouro" + " --requests " + dir / "req.jsonl" + " --kv-memory 1 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("kv memory: 1 bytes hold no block"), std::string::npos) << r.output;
  // --kv-dtype reaches the engine: a budget of one bf16 block holds no f32 block.
  auto spec = SpecFromConfigFile(dir / "ouro/config.json");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const std::string one_bf16_block =
      std::to_string(BlockPool::BytesPerBlock(EngineOptions{}.block_size, spec->kv_dim(), DType::kBF16));
  r = Fathom("generate --model " + dir / "ouro" + " --requests " + dir / "req.jsonl" + " --kv-memory " +
             one_bf16_block + " --kv-dtype f32 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("bytes hold no block"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace fathom
