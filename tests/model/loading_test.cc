// Model::Load on broken checkpoints: every error names the file, the tensor or field, and
// expected versus found.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/family.h"
#include "model/model.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::TempDir;

// Reads dir's tensors, lets `edit` change the list, writes model.safetensors back.
void RewriteTensors(const std::string& dir, const std::function<void(std::vector<OwnedTensor>&)>& edit) {
  std::vector<OwnedTensor> tensors;
  {
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    for (const auto& [name, e] : ckpt->tensors()) {
      OwnedTensor t{name, e.view.dtype, e.view.shape, {}};
      const auto* p = static_cast<const uint8_t*>(e.view.data);
      t.bytes.assign(p, p + e.view.nbytes());
      tensors.push_back(std::move(t));
    }
  }
  edit(tensors);
  Status s = WriteSafetensors(dir + "/model.safetensors", tensors);
  ASSERT_TRUE(s.ok()) << s.message();
}

void EditConfig(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = dir + "/config.json";
  nlohmann::json j;
  {
    std::ifstream f(path);
    j = nlohmann::json::parse(f);
  }
  edit(j);
  std::ofstream(path) << j.dump(2);
}

std::string LoadError(const std::string& dir) {
  auto m = Model::Load(dir);
  EXPECT_FALSE(m.ok()) << "loading " << dir << " should fail";
  return m.ok() ? "" : m.status().message();
}

class LoadingTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::MakeTinyModel("llama", model_, DType::kF32); }
  TempDir tmp_;
  std::string model_ = tmp_ / "model";
};

TEST_F(LoadingTest, IntactCheckpointLoads) {
  auto m = Model::Load(model_);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)->spec().layers.size(), 2u);
}

TEST_F(LoadingTest, MissingTensor) {
  RewriteTensors(model_, [](std::vector<OwnedTensor>& t) {
    std::erase_if(t, [](const OwnedTensor& x) { return x.name == "model.layers.1.mlp.up_proj.weight"; });
  });
  const std::string e = LoadError(model_);
  EXPECT_NE(e.find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("[160, 64]"), std::string::npos) << e;  // the expected shape
  EXPECT_NE(e.find(model_), std::string::npos) << e;
}

TEST_F(LoadingTest, UnexpectedTensor) {
  RewriteTensors(model_, [](std::vector<OwnedTensor>& t) {
    t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::kF32, {8}, std::vector<uint8_t>(32)});
  });
  const std::string e = LoadError(model_);
  EXPECT_NE(e.find("unexpected tensor 'model.layers.0.self_attn.rotary_emb.inv_freq'"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST_F(LoadingTest, WrongShape) {
  RewriteTensors(model_, [](std::vector<OwnedTensor>& t) {
    for (OwnedTensor& x : t)
      if (x.name == "model.layers.0.self_attn.k_proj.weight") {
        x.shape = {64, 32};  // expected [32, 64]
      }
  });
  const std::string e = LoadError(model_);
  EXPECT_NE(e.find("model.layers.0.self_attn.k_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("expected shape [32, 64], found [64, 32]"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST_F(LoadingTest, UnsupportedDtype) {
  // Rewrite the header so one tensor claims dtype I32 (same byte size as F32).
  const std::string path = model_ + "/model.safetensors";
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  std::string header = bytes.substr(8, n);
  auto j = nlohmann::json::parse(header);
  j["model.norm.weight"]["dtype"] = "I32";
  std::string h2 = j.dump();
  h2.resize(n, ' ');  // same length: the data offsets stay valid
  ASSERT_LE(j.dump().size(), n);
  std::memcpy(bytes.data() + 8, h2.data(), n);
  std::ofstream(path, std::ios::binary) << bytes;
  const std::string e = LoadError(model_);
  EXPECT_NE(e.find("I32"), std::string::npos) << e;
  EXPECT_NE(e.find("model.norm.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST_F(LoadingTest, TruncatedFile) {
  const std::string path = model_ + "/model.safetensors";
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  const std::string e = LoadError(model_);
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST_F(LoadingTest, MalformedHeader) {
  const std::string path = model_ + "/model.safetensors";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(8);
  f.write("{\"oops", 6);
  f.close();
  const std::string e = LoadError(model_);
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST_F(LoadingTest, UnknownModelType) {
  EditConfig(model_, [](nlohmann::json& j) { j["model_type"] = "mamba"; });
  const std::string e = LoadError(model_);
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown model_type 'mamba'"), std::string::npos) << e;
  EXPECT_NE(e.find("huginn_raven"), std::string::npos) << e;  // lists the supported ones
}

TEST_F(LoadingTest, MissingRequiredField) {
  EditConfig(model_, [](nlohmann::json& j) { j.erase("hidden_size"); });
  const std::string e = LoadError(model_);
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size"), std::string::npos) << e;
}

TEST_F(LoadingTest, WrongFieldType) {
  EditConfig(model_, [](nlohmann::json& j) { j["num_attention_heads"] = "four"; });
  const std::string e = LoadError(model_);
  EXPECT_NE(e.find("num_attention_heads"), std::string::npos) << e;
}

TEST_F(LoadingTest, UnknownFieldsAreIgnored) {
  EditConfig(model_, [](nlohmann::json& j) { j["some_future_field"] = {1, 2, 3}; });
  EXPECT_TRUE(Model::Load(model_).ok());
}

// llama3 RoPE scaling is read (from rope_scaling or transformers 5's rope_parameters, which
// also gives rope_theta); other kinds, missing fields and bad values are refused by name.
TEST_F(LoadingTest, RopeScalingLlama3IsReadOtherKindsAreRefused) {
  const nlohmann::json llama3 = {{"rope_type", "llama3"},
                                 {"factor", 8.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 64}};
  EditConfig(model_, [&](nlohmann::json& j) { j["rope_scaling"] = llama3; });
  {
    auto m = Model::Load(model_);
    ASSERT_TRUE(m.ok()) << m.status().message();
    const RopeScaling& r = (*m)->spec().rope_scaling;
    EXPECT_EQ(r.kind, RopeScaling::Kind::kLlama3);
    EXPECT_EQ(r.factor, 8.0);
    EXPECT_EQ(r.low_freq_factor, 1.0);
    EXPECT_EQ(r.high_freq_factor, 4.0);
    EXPECT_EQ(r.original_max_positions, 64);
  }
  EditConfig(model_, [&](nlohmann::json& j) {
    j.erase("rope_scaling");
    j.erase("rope_theta");
    j["rope_parameters"] = llama3;
    j["rope_parameters"]["rope_theta"] = 500000.0;
  });
  {
    auto m = Model::Load(model_);
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_EQ((*m)->spec().rope_scaling.kind, RopeScaling::Kind::kLlama3);
    EXPECT_EQ((*m)->spec().rope_theta, 500000.f);
  }
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit,
                           const std::string& want) {
    EditConfig(model_, [&](nlohmann::json& j) {
      j.erase("rope_parameters");
      j["rope_scaling"] = llama3;
      edit(j["rope_scaling"]);
    });
    const std::string e = LoadError(model_);
    EXPECT_NE(e.find("rope_scaling"), std::string::npos) << e;
    EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  refused([](nlohmann::json& r) { r["rope_type"] = "yarn"; }, "'yarn' is not implemented");
  refused(
      [](nlohmann::json& r) {
        r.erase("rope_type");
        r["type"] = "linear";
      },
      "'linear' is not implemented");
  refused([](nlohmann::json& r) { r.erase("factor"); }, "factor");
  refused([](nlohmann::json& r) { r["high_freq_factor"] = 0.5; },
          "low_freq_factor < high_freq_factor");
  refused([](nlohmann::json& r) { r["original_max_position_embeddings"] = 64.5; },
          "original_max_position_embeddings");
  // rope_type "default" (or a null rope_scaling) is plain RoPE.
  EditConfig(model_, [](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "default"}}; });
  auto m = Model::Load(model_);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)->spec().rope_scaling.kind, RopeScaling::Kind::kNone);
}

TEST_F(LoadingTest, MissingDirectory) {
  const std::string e = LoadError(tmp_ / "nope");
  EXPECT_NE(e.find("nope"), std::string::npos) << e;
}

TEST(LoadingHuginnTest, StoredLmHeadCopyIsAcceptedAndFreqsCisSkipped) {
  TempDir tmp;
  const std::string dir = tmp / "model";
  testing::MakeTinyModel("huginn", dir, DType::kF32);
  RewriteTensors(dir, [](std::vector<OwnedTensor>& t) {
    const OwnedTensor* wte = nullptr;
    for (const OwnedTensor& x : t)
      if (x.name == "transformer.wte.weight") wte = &x;
    OwnedTensor head = *wte;
    head.name = "lm_head.weight";
    t.push_back(head);
    t.push_back({"freqs_cis", DType::kF32, {4, 2}, std::vector<uint8_t>(32)});
  });
  auto m = Model::Load(dir);
  EXPECT_TRUE(m.ok()) << m.status().message();
}

TEST(LoadingPresetsTest, EveryFamilyAndTinyPresetLoads) {
  for (const Family& f : AllFamilies()) {
    TempDir tmp;
    testing::MakeTinyModel(f.name, tmp / "m", DType::kBF16);
    auto m = Model::Load(tmp / "m");
    EXPECT_TRUE(m.ok()) << f.name << ": " << m.status().message();
  }
}

// Special token ids come from config.json for every family: an integer, the first of a list,
// or null / absent (no id); an id outside the vocabulary is an error naming the field.
TEST(SpecialTokenIdsTest, ReadFromTheConfigOfEveryFamily) {
  for (const char* family : {"llama", "ouro", "huginn"}) {
    TempDir tmp;
    const std::string dir = tmp / "model";
    testing::MakeTinyModel(family, dir, DType::kF32);
    EditConfig(dir, [](nlohmann::json& j) {
      j["bos_token_id"] = 250;
      j["eos_token_id"] = nlohmann::json::array({251, 7});
      j["pad_token_id"] = nullptr;
    });
    auto m = Model::Load(dir);
    ASSERT_TRUE(m.ok()) << family << ": " << m.status().message();
    EXPECT_EQ((*m)->spec().bos_id, 250) << family;
    EXPECT_EQ((*m)->spec().eos_id, 251) << family;
    EXPECT_EQ((*m)->spec().pad_id, -1) << family;
    EditConfig(dir, [](nlohmann::json& j) { j["pad_token_id"] = 256; });  // vocabulary: 256
    const std::string e = LoadError(dir);
    EXPECT_NE(e.find("'pad_token_id' is 256, outside the vocabulary of 256 tokens"), std::string::npos)
        << family << ": " << e;
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  }
}

// Huginn: padding_multiple sizes no tensor (upstream sets padded_vocab_size = vocab_size), and
// n_layers must be the total of the three stages.
TEST(HuginnConfigTest, VocabularyIsNotPaddedAndLayerCountIsChecked) {
  TempDir tmp;
  const std::string dir = tmp / "model";
  testing::MakeTinyModel("huginn", dir, DType::kF32);
  EditConfig(dir, [](nlohmann::json& j) { j["padding_multiple"] = 4096; });
  auto m = Model::Load(dir);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)->spec().vocab, 256);
  EditConfig(dir, [](nlohmann::json& j) { j["n_layers"] = 9; });
  const std::string e = LoadError(dir);
  EXPECT_NE(e.find("field 'n_layers' is 9"), std::string::npos) << e;
}

// A layer count beyond family_util::kMaxLayers (or below 0) is refused naming the field, for
// every family's layer fields (the fuzzer's config with 49,857 layers took 3.6 s to accept).
TEST(LayerCountTest, OutOfRangeLayerCountsAreRefusedNamingTheField) {
  const std::vector<std::pair<const char*, const char*>> fields = {
      {"llama", "num_hidden_layers"},        {"ouro", "num_hidden_layers"},
      {"huginn", "n_layers_in_prelude"},     {"huginn", "n_layers_in_recurrent_block"},
      {"huginn", "n_layers_in_coda"},        {"lckv", "num_hidden_layers"}};
  for (const auto& [family, field] : fields) {
    for (const int64_t n : {int64_t{49857}, int64_t{1} << 40, int64_t{-3}}) {
      TempDir tmp;
      const std::string dir = tmp / "model";
      testing::MakeTinyModel(family, dir, DType::kF32);
      EditConfig(dir, [&, f = field](nlohmann::json& j) { j[f] = n; });
      const std::string e = LoadError(dir);
      EXPECT_NE(e.find("field '" + std::string(field) + "' is " + std::to_string(n) + "; fathom reads 0 to 1024 layers"),
                std::string::npos)
          << family << ": " << e;
    }
  }
}

}  // namespace
}  // namespace fathom
