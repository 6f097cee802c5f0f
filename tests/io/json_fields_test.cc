// JsonFields: typed config fields with errors naming the file and the field.
#include "io/json_fields.h"

#include <gtest/gtest.h>

#include "io_test_util.h"
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fathom {
namespace {

namespace fs = std::filesystem;

using io_testing::ContainsAll;
using io_testing::ScratchDir;

constexpr const char* kConfig = R"({
  "hidden_size": 2048,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000,
  "tie_word_embeddings": false,
  "model_type": "llama",
  "torch_dtype": null,
  "rope_scaling": {"type": "linear", "factor": 2.0},
  "architectures": ["LlamaForCausalLM"],
  "some_future_field": {"nested": [1, 2, 3]}
})";

JsonFields Config() {
  Result<JsonFields> r = JsonFields::ParseText(kConfig, "config.json");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.value();
}

TEST(JsonFieldsTest, ReadsTypedFieldsAndIgnoresUnknownOnes) {
  ScratchDir dir;
  const std::string path = dir.Write("config.json", kConfig);
  Result<JsonFields> cfg = JsonFields::ParseFile(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->source(), path);
  EXPECT_EQ(cfg->Int("hidden_size").value(), 2048);
  EXPECT_DOUBLE_EQ(cfg->Number("rms_norm_eps").value(), 1e-6);
  EXPECT_DOUBLE_EQ(cfg->Number("rope_theta").value(), 10000.0);  // an integer is a number
  EXPECT_FALSE(cfg->Bool("tie_word_embeddings").value());
  EXPECT_EQ(cfg->String("model_type").value(), "llama");
  EXPECT_TRUE(cfg->Has("some_future_field"));
  EXPECT_TRUE(cfg->json().contains("architectures"));
}

TEST(JsonFieldsTest, NegativeAndLargeIntegers) {
  Result<JsonFields> cfg = JsonFields::ParseText(
      R"({"a": -5, "b": 9223372036854775807, "c": 9223372036854775808})", "c.json");
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->Int("a").value(), -5);
  EXPECT_EQ(cfg->Int("b").value(), 9223372036854775807);
  Result<int64_t> c = cfg->Int("c");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(ContainsAll(c.status().message(),
                          {"c.json", "field 'c'", "fits in int64", "9223372036854775808"}));
}

TEST(JsonFieldsTest, MissingRequiredField) {
  JsonFields cfg = Config();
  Result<int64_t> r = cfg.Int("num_attention_heads");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "config.json: missing required field 'num_attention_heads'");
  EXPECT_FALSE(cfg.String("absent").ok());
  EXPECT_FALSE(cfg.Number("absent").ok());
  EXPECT_FALSE(cfg.Bool("absent").ok());
  // null counts as absent, also for required fields.
  Result<std::string> null_field = cfg.String("torch_dtype");
  ASSERT_FALSE(null_field.ok());
  EXPECT_EQ(null_field.status().message(), "config.json: missing required field 'torch_dtype'");
}

TEST(JsonFieldsTest, WrongType) {
  JsonFields cfg = Config();
  Result<int64_t> as_int = cfg.Int("model_type");
  ASSERT_FALSE(as_int.ok());
  EXPECT_EQ(as_int.status().message(),
            "config.json: field 'model_type': expected an integer, found string \"llama\"");
  Result<int64_t> float_as_int = cfg.Int("rms_norm_eps");
  ASSERT_FALSE(float_as_int.ok());
  EXPECT_TRUE(ContainsAll(float_as_int.status().message(),
                          {"config.json", "'rms_norm_eps'", "expected an integer, found float"}));
  Result<double> as_number = cfg.Number("tie_word_embeddings");
  ASSERT_FALSE(as_number.ok());
  EXPECT_EQ(as_number.status().message(),
            "config.json: field 'tie_word_embeddings': expected a number, found boolean false");
  Result<bool> as_bool = cfg.Bool("hidden_size");
  ASSERT_FALSE(as_bool.ok());
  EXPECT_EQ(as_bool.status().message(),
            "config.json: field 'hidden_size': expected a boolean, found integer 2048");
  Result<std::string> as_string = cfg.String("architectures");
  ASSERT_FALSE(as_string.ok());
  EXPECT_EQ(as_string.status().message(),
            "config.json: field 'architectures': expected a string, found array");
}

TEST(JsonFieldsTest, OptionalFieldsUseDefaultsWhenAbsentOrNull) {
  JsonFields cfg = Config();
  EXPECT_EQ(cfg.IntOr("num_key_value_heads", 16).value(), 16);
  EXPECT_EQ(cfg.IntOr("hidden_size", 16).value(), 2048);
  EXPECT_DOUBLE_EQ(cfg.NumberOr("absent", 0.5).value(), 0.5);
  EXPECT_DOUBLE_EQ(cfg.NumberOr("rms_norm_eps", 0.5).value(), 1e-6);
  EXPECT_TRUE(cfg.BoolOr("absent", true).value());
  EXPECT_FALSE(cfg.BoolOr("tie_word_embeddings", true).value());
  EXPECT_EQ(cfg.StringOr("torch_dtype", "float32").value(), "float32");  // null = absent
  EXPECT_EQ(cfg.StringOr("model_type", "x").value(), "llama");
  EXPECT_FALSE(cfg.Has("torch_dtype"));
  EXPECT_FALSE(cfg.Has("absent"));
}

TEST(JsonFieldsTest, OptionalFieldPresentWithTheWrongTypeIsAnError) {
  JsonFields cfg = Config();
  Result<int64_t> r = cfg.IntOr("model_type", 3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "config.json: field 'model_type': expected an integer, found string \"llama\"");
  EXPECT_FALSE(cfg.NumberOr("model_type", 1.0).ok());
  EXPECT_FALSE(cfg.BoolOr("hidden_size", false).ok());
  EXPECT_FALSE(cfg.StringOr("hidden_size", "x").ok());
}

TEST(JsonFieldsTest, NestedObjectsNameTheirPath) {
  JsonFields cfg = Config();
  Result<JsonFields> scaling = cfg.Object("rope_scaling");
  ASSERT_TRUE(scaling.ok()) << scaling.status().message();
  EXPECT_EQ(scaling->String("type").value(), "linear");
  EXPECT_DOUBLE_EQ(scaling->Number("factor").value(), 2.0);
  Result<int64_t> missing = scaling->Int("original_max_position_embeddings");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "config.json: rope_scaling: missing required field 'original_max_position_embeddings'");
  Result<JsonFields> not_object = cfg.Object("hidden_size");
  ASSERT_FALSE(not_object.ok());
  EXPECT_EQ(not_object.status().message(),
            "config.json: field 'hidden_size': expected an object, found integer 2048");
}

TEST(JsonFieldsTest, MalformedJsonNamesFileLineAndColumn) {
  ScratchDir dir;
  const std::string path = dir.Write("config.json", "{\n  \"hidden_size\": 2048,\n  \"x\": }\n");
  Result<JsonFields> r = JsonFields::ParseFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(ContainsAll(r.status().message(), {path, "malformed JSON", "line 3, column 8"}));
  EXPECT_EQ(r.status().message().find("[json.exception"), std::string::npos);
}

TEST(JsonFieldsTest, TopLevelMustBeAnObject) {
  ScratchDir dir;
  const std::string path = dir.Write("config.json", "[1, 2, 3]");
  Result<JsonFields> r = JsonFields::ParseFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), path + ": expected a JSON object at the top level, found array");
}

TEST(JsonFieldsTest, MissingFile) {
  ScratchDir dir;
  const std::string path = dir.path() + "/config.json";
  Result<JsonFields> r = JsonFields::ParseFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(ContainsAll(r.status().message(), {path, "No such file or directory"}));
}

}  // namespace
}  // namespace fathom
