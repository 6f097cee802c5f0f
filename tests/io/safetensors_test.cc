// Safetensors reading and writing: round trips (single file and sharded), the exact layout
// the writer produces, and one broken file per validation error, checking that the message
// names the file, the tensor and the expected-vs-found values.
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "io_test_util.h"

namespace fathom {
namespace {

namespace fs = std::filesystem;

using io_testing::ContainsAll;
using io_testing::ScratchDir;

// A tensor whose bytes are a pattern depending on `seed`, so mix-ups show in comparisons.
OwnedTensor MakeTensor(const std::string& name, DType dtype, Shape shape, uint8_t seed) {
  OwnedTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(static_cast<size_t>(NumElements(t.shape)) * DTypeSize(dtype));
  for (size_t i = 0; i < t.bytes.size(); ++i) t.bytes[i] = static_cast<uint8_t>(seed + 7 * i);
  return t;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string LengthPrefix(uint64_t n) {
  std::string s(8, '\0');
  for (size_t i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A hand-made safetensors file: length prefix, `header` verbatim, `data_bytes` bytes of data.
void WriteRawSafetensors(const std::string& path, const std::string& header, size_t data_bytes,
                         std::optional<uint64_t> length_override = std::nullopt) {
  std::string data(data_bytes, '\x5a');
  WriteBytes(path, LengthPrefix(length_override.value_or(header.size())) + header + data);
}

// Opens `dir` expecting failure; returns the message.
std::string OpenError(const std::string& dir) {
  Result<Checkpoint> r = Checkpoint::Open(dir);
  EXPECT_FALSE(r.ok()) << "expected Open(" << dir << ") to fail";
  return r.status().message();
}

// The message for a single model.safetensors whose header is `header` with `data_bytes` of data.
std::string HeaderError(const std::string& header, size_t data_bytes) {
  ScratchDir dir;
  WriteRawSafetensors(dir / "model.safetensors", header, data_bytes);
  return OpenError(dir.path());
}

void ExpectSameTensor(const Checkpoint& ckpt, const OwnedTensor& want) {
  const TensorEntry* e = ckpt.Find(want.name);
  ASSERT_NE(e, nullptr) << want.name;
  EXPECT_EQ(e->view.dtype, want.dtype) << want.name;
  EXPECT_EQ(e->view.shape, want.shape) << want.name;
  ASSERT_EQ(e->view.nbytes(), want.bytes.size()) << want.name;
  if (!want.bytes.empty()) {
    EXPECT_EQ(std::memcmp(e->view.data, want.bytes.data(), want.bytes.size()), 0) << want.name;
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(e->view.data) % DTypeSize(e->view.dtype), 0u)
      << want.name << " is misaligned";
}

std::vector<OwnedTensor> MixedTensors() {
  return {
      MakeTensor("f32.matrix", DType::kF32, {2, 3}, 1),
      MakeTensor("f32.scalar", DType::kF32, {}, 2),
      MakeTensor("f32.4d", DType::kF32, {1, 2, 1, 3}, 3),
      MakeTensor("bf16.vector", DType::kBF16, {5}, 4),
      MakeTensor("bf16.empty", DType::kBF16, {0, 7}, 5),
      MakeTensor("f16.cube", DType::kF16, {4, 1, 2}, 6),
      MakeTensor("f16.empty", DType::kF16, {3, 0}, 7),
      MakeTensor("f16.odd", DType::kF16, {3}, 8),
  };
}

// ---------------------------------------------------------------------------------------
// Round trips and layout

TEST(SafetensorsTest, RoundTripsEveryDTypeAndShape) {
  ScratchDir dir;
  const std::vector<OwnedTensor> tensors = MixedTensors();
  ASSERT_TRUE(WriteCheckpointTensors(dir.path(), tensors, size_t{1} << 30).ok());
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.tmp"));

  Result<Checkpoint> ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->tensors().size(), tensors.size());
  for (const OwnedTensor& t : tensors) ExpectSameTensor(*ckpt, t);
  EXPECT_EQ(ckpt->Find("absent"), nullptr);
  EXPECT_EQ(ckpt->Find("f32.matrix")->file, dir / "model.safetensors");
}

TEST(SafetensorsTest, ConvertsValuesThroughTheViews) {
  ScratchDir dir;
  OwnedTensor t = MakeTensor("w", DType::kBF16, {3}, 0);
  const float values[3] = {1.5f, -2.0f, 0.25f};
  for (size_t i = 0; i < 3; ++i) {
    uint16_t h = F32ToBF16(values[i]);
    std::memcpy(&t.bytes[2 * i], &h, 2);
  }
  ASSERT_TRUE(WriteSafetensors(dir / "x.safetensors", {t}).ok());
  Result<Checkpoint> ckpt = Checkpoint::OpenFile(dir / "x.safetensors");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->Find("w")->view.ToF32(), std::vector<float>({1.5f, -2.0f, 0.25f}));
}

TEST(SafetensorsTest, WriterLayoutMatchesTheReferenceImplementation) {
  ScratchDir dir;
  // Given order b, a: data follows that order while header keys come out sorted.
  std::vector<OwnedTensor> tensors = {MakeTensor("b", DType::kF32, {3}, 1),
                                      MakeTensor("a", DType::kBF16, {2}, 2)};
  const std::string path = dir / "m.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const std::string file = ReadBytes(path);
  ASSERT_GE(file.size(), 8u);
  uint64_t n = 0;
  for (size_t i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<uint8_t>(file[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u) << "header must be padded to a multiple of 8 bytes";
  ASSERT_EQ(file.size(), 8 + n + 12 + 4);
  const std::string header = file.substr(8, n);
  const size_t end_of_json = header.find_last_not_of(' ');
  EXPECT_EQ(header[end_of_json], '}');
  EXPECT_LT(n - end_of_json - 1, 8u) << "padding is the fewest spaces reaching a multiple of 8";

  const nlohmann::json h = nlohmann::json::parse(header);
  EXPECT_EQ(h["__metadata__"], nlohmann::json({{"format", "pt"}}));
  EXPECT_EQ(h["b"]["data_offsets"], nlohmann::json::array({0, 12}));
  EXPECT_EQ(h["a"]["data_offsets"], nlohmann::json::array({12, 16}));
  EXPECT_EQ(h["a"]["dtype"], "BF16");
  EXPECT_EQ(h["b"]["shape"], nlohmann::json::array({3}));
  // Sorted keys in the text itself: "__metadata__" < "a" < "b".
  EXPECT_LT(header.find("\"__metadata__\""), header.find("\"a\""));
  EXPECT_LT(header.find("\"a\""), header.find("\"b\""));

  EXPECT_EQ(file.substr(8 + n, 12), std::string(tensors[0].bytes.begin(), tensors[0].bytes.end()));
  EXPECT_EQ(file.substr(8 + n + 12), std::string(tensors[1].bytes.begin(), tensors[1].bytes.end()));
}

TEST(SafetensorsTest, ShardedRoundTrip) {
  ScratchDir dir;
  std::vector<OwnedTensor> tensors;
  for (int i = 0; i < 5; ++i) {
    tensors.push_back(
        MakeTensor("layer." + std::to_string(i), DType::kF32, {4, 4}, static_cast<uint8_t>(i)));
  }
  // 64 bytes each, at most 150 per shard: shards of 2, 2 and 1 tensors.
  ASSERT_TRUE(WriteCheckpointTensors(dir.path(), tensors, 150).ok());
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  for (const char* shard : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                            "model-00003-of-00003.safetensors"}) {
    EXPECT_TRUE(fs::exists(dir / shard)) << shard;
  }
  EXPECT_FALSE(fs::exists(dir / "model-00004-of-00003.safetensors"));

  const nlohmann::json index =
      nlohmann::json::parse(ReadBytes(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 320);
  EXPECT_EQ(index["weight_map"].size(), 5u);
  EXPECT_EQ(index["weight_map"]["layer.0"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["layer.1"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["layer.2"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["layer.4"], "model-00003-of-00003.safetensors");

  Result<Checkpoint> ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->tensors().size(), 5u);
  for (const OwnedTensor& t : tensors) ExpectSameTensor(*ckpt, t);
  EXPECT_EQ(ckpt->Find("layer.3")->file, dir / "model-00002-of-00003.safetensors");
}

TEST(SafetensorsTest, TensorLargerThanTheShardLimitGetsItsOwnShard) {
  ScratchDir dir;
  std::vector<OwnedTensor> tensors = {MakeTensor("small.a", DType::kF16, {8}, 1),
                                      MakeTensor("big", DType::kF32, {100}, 2),
                                      MakeTensor("small.b", DType::kF16, {8}, 3)};
  ASSERT_TRUE(WriteCheckpointTensors(dir.path(), tensors, 100).ok());
  const nlohmann::json index =
      nlohmann::json::parse(ReadBytes(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["weight_map"]["small.a"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["big"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["small.b"], "model-00003-of-00003.safetensors");
  EXPECT_EQ(index["metadata"]["total_size"], 432);
  Result<Checkpoint> ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  for (const OwnedTensor& t : tensors) ExpectSameTensor(*ckpt, t);
}

TEST(SafetensorsTest, RewritingAsOneFileRemovesTheStaleIndex) {
  ScratchDir dir;
  std::vector<OwnedTensor> old = {MakeTensor("a", DType::kF32, {16}, 1),
                                  MakeTensor("b", DType::kF32, {16}, 2)};
  ASSERT_TRUE(WriteCheckpointTensors(dir.path(), old, 64).ok());
  ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  std::vector<OwnedTensor> fresh = {MakeTensor("c", DType::kBF16, {4}, 3)};
  ASSERT_TRUE(WriteCheckpointTensors(dir.path(), fresh, 1 << 20).ok());
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  Result<Checkpoint> ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->tensors().size(), 1u);
  ExpectSameTensor(*ckpt, fresh[0]);
}

TEST(SafetensorsTest, RoundTripsTensorsLargerThanTheWriteBuffer) {
  ScratchDir dir;
  // 5 MiB and 9 MiB tensors go straight to write(2); the small ones around them are buffered.
  std::vector<OwnedTensor> tensors = {MakeTensor("small.a", DType::kF16, {3}, 1),
                                      MakeTensor("big.a", DType::kF32, {1280, 1024}, 2),
                                      MakeTensor("small.b", DType::kBF16, {5}, 3),
                                      MakeTensor("big.b", DType::kBF16, {9, 512, 1024}, 4),
                                      MakeTensor("small.c", DType::kF32, {2}, 5)};
  ASSERT_TRUE(WriteCheckpointTensors(dir.path(), tensors, size_t{1} << 30).ok());
  Result<Checkpoint> ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  for (const OwnedTensor& t : tensors) ExpectSameTensor(*ckpt, t);
}

TEST(SafetensorsTest, CreatesMissingDirectories) {
  ScratchDir dir;
  const std::string nested = dir / "out/nested";
  std::vector<OwnedTensor> tensors = {MakeTensor("a", DType::kF32, {2}, 1)};
  ASSERT_TRUE(WriteCheckpointTensors(nested, tensors, 1 << 20).ok());
  Result<Checkpoint> ckpt = Checkpoint::Open(nested);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ExpectSameTensor(*ckpt, tensors[0]);
}

// F16FromF32 (core/dtype.h) against IEEE binary16 values worked out by hand: round to
// nearest even, overflow to infinity, subnormals; and every finite half survives the round trip.
TEST(SafetensorsTest, F16FromF32RoundsToNearestEvenAsIeeeBinary16) {
  EXPECT_EQ(F16FromF32(1.0f), 0x3C00);
  EXPECT_EQ(F16FromF32(-2.0f), 0xC000);
  EXPECT_EQ(F16FromF32(65504.0f), 0x7BFF);             // the largest half
  EXPECT_EQ(F16FromF32(65520.0f), 0x7C00);             // halfway to 2^16: to even, infinity
  EXPECT_EQ(F16FromF32(1.0f + 0x1p-11f), 0x3C00);      // a tie: stays even
  EXPECT_EQ(F16FromF32(1.0f + 3 * 0x1p-11f), 0x3C02);  // a tie: rounds up to even
  EXPECT_EQ(F16FromF32(0x1p-24f), 0x0001);             // the smallest subnormal
  EXPECT_EQ(F16FromF32(0x1p-25f), 0x0000);             // a tie with zero: to even
  const uint16_t nan = F16FromF32(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0) continue;  // NaNs: payloads may change
    ASSERT_EQ(F16FromF32(F16ToF32(static_cast<uint16_t>(h))), h) << "half 0x" << std::hex << h;
  }
}

TEST(SafetensorsTest, MisalignedTensorsAreReadFromAlignedCopies) {
  ScratchDir dir;
  // Header length 2 mod 4 puts the data buffer 2 bytes off 4-byte alignment in the mapping.
  std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("h":{"dtype":"F16","shape":[1],"data_offsets":[8,10]}})";
  while (header.size() % 4 != 2) header += ' ';
  std::string data(10, '\0');
  const float w[2] = {3.0f, -1.25f};
  std::memcpy(data.data(), w, 8);
  const uint16_t h = F16FromF32(0.5f);
  std::memcpy(data.data() + 8, &h, 2);
  WriteBytes(dir / "model.safetensors", LengthPrefix(header.size()) + header + data);

  Result<Checkpoint> ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const TensorView& v = ckpt->Find("w")->view;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 4, 0u);
  EXPECT_EQ(v.ToF32(), std::vector<float>({3.0f, -1.25f}));
  EXPECT_EQ(ckpt->Find("h")->view.ToF32(), std::vector<float>({0.5f}));
}

TEST(SafetensorsTest, IgnoresMetadataAndAcceptsZeroSizeTensorsAtAnyOffset) {
  std::string header = R"({"__metadata__":{"format":"pt","note":"x"},)"
                       R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("e1":{"dtype":"BF16","shape":[0],"data_offsets":[4,4]},)"
                       R"("e2":{"dtype":"F16","shape":[2,0],"data_offsets":[4,4]}})";
  ScratchDir dir;
  WriteRawSafetensors(dir / "model.safetensors", header, 8);
  Result<Checkpoint> ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->tensors().size(), 3u);
  EXPECT_EQ(ckpt->Find("__metadata__"), nullptr);
  EXPECT_EQ(ckpt->Find("e2")->view.numel(), 0);
}

TEST(SafetensorsTest, CopiesShareTheMappingsAndOutliveTheOriginal) {
  ScratchDir dir;
  std::vector<OwnedTensor> tensors = MixedTensors();
  ASSERT_TRUE(WriteCheckpointTensors(dir.path(), tensors, 1 << 20).ok());
  std::optional<Checkpoint> copy;
  {
    Result<Checkpoint> ckpt = Checkpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    copy = ckpt.value();
  }
  for (const OwnedTensor& t : tensors) ExpectSameTensor(*copy, t);
}

// ---------------------------------------------------------------------------------------
// Writer errors

TEST(SafetensorsWriteErrorTest, ByteCountNotMatchingTheShape) {
  ScratchDir dir;
  OwnedTensor t = MakeTensor("w", DType::kF32, {2, 3}, 1);
  t.bytes.resize(20);
  Status s = WriteSafetensors(dir / "x.safetensors", {t});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(ContainsAll(s.message(), {"x.safetensors", "tensor 'w'",
                                        "[2, 3] with dtype F32 needs 24 bytes, found 20"}));
  EXPECT_FALSE(fs::exists(dir / "x.safetensors"));
}

TEST(SafetensorsWriteErrorTest, DuplicateAndReservedNames) {
  ScratchDir dir;
  Status dup = WriteCheckpointTensors(
      dir.path(), {MakeTensor("w", DType::kF32, {2}, 1), MakeTensor("w", DType::kF32, {2}, 2)}, 4);
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(ContainsAll(dup.message(), {"tensor 'w'", "duplicate"}));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));

  Status reserved =
      WriteSafetensors(dir / "x.safetensors", {MakeTensor("__metadata__", DType::kF32, {1}, 1)});
  ASSERT_FALSE(reserved.ok());
  EXPECT_TRUE(ContainsAll(reserved.message(), {"'__metadata__'", "reserved"}));
}

TEST(SafetensorsWriteErrorTest, NameThatIsNotUtf8) {
  ScratchDir dir;
  Status s = WriteSafetensors(dir / "x.safetensors", {MakeTensor("bad\xff", DType::kF32, {1}, 1)});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(ContainsAll(s.message(), {"x.safetensors", "not valid UTF-8"}));
}

TEST(SafetensorsWriteErrorTest, UnwritablePathIsNamed) {
  ScratchDir dir;
  const std::string path = dir / "no_such_dir/x.safetensors";
  Status s = WriteSafetensors(path, {MakeTensor("w", DType::kF32, {2}, 1)});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(ContainsAll(s.message(), {path, "No such file or directory"}));
}

TEST(SafetensorsWriteErrorTest, DirectoryThatCannotBeCreated) {
  ScratchDir dir;
  WriteBytes(dir / "plain_file", "x");
  const std::string bad = dir / "plain_file/ckpt";
  Status s = WriteCheckpointTensors(bad, {MakeTensor("w", DType::kF32, {2}, 1)}, 1 << 20);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(ContainsAll(s.message(), {"cannot create directory", bad}));
}

// ---------------------------------------------------------------------------------------
// Broken files: one per validation error

TEST(SafetensorsErrorTest, FileShorterThanTheLengthPrefix) {
  ScratchDir dir;
  WriteBytes(dir / "model.safetensors", "abcde");
  EXPECT_TRUE(ContainsAll(OpenError(dir.path()),
                          {dir / "model.safetensors", "file is 5 bytes", "8-byte header length"}));
}

TEST(SafetensorsErrorTest, EmptyFile) {
  ScratchDir dir;
  WriteBytes(dir / "model.safetensors", "");
  EXPECT_TRUE(ContainsAll(OpenError(dir.path()), {dir / "model.safetensors", "empty"}));
}

TEST(SafetensorsErrorTest, HeaderLengthLargerThanTheFile) {
  ScratchDir dir;
  WriteRawSafetensors(dir / "model.safetensors", "{}      ", 4, 1000);  // file is 20 bytes
  EXPECT_TRUE(
      ContainsAll(OpenError(dir.path()), {dir / "model.safetensors", "header length 1000",
                                          "file size 20 bytes", "at most 12 bytes of header"}));
}

TEST(SafetensorsErrorTest, MalformedHeaderJson) {
  EXPECT_TRUE(ContainsAll(HeaderError("{\"w\": {\"dtype\": ", 0),
                          {"model.safetensors", "header is not valid JSON", "line 1, column"}));
}

TEST(SafetensorsErrorTest, HeaderNotAnObject) {
  EXPECT_TRUE(ContainsAll(HeaderError("[1, 2]", 0),
                          {"model.safetensors", "must be a JSON object, found array"}));
}

TEST(SafetensorsErrorTest, DuplicateTensorInOneHeader) {
  EXPECT_TRUE(ContainsAll(HeaderError(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                      R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                      8),
                          {"model.safetensors", "tensor 'w' more than once"}));
}

TEST(SafetensorsErrorTest, EntryNotAnObject) {
  EXPECT_TRUE(
      ContainsAll(HeaderError(R"({"w": 5})", 0),
                  {"model.safetensors", "tensor 'w'",
                   "expected an object with dtype, shape and data_offsets, found integer 5"}));
}

TEST(SafetensorsErrorTest, EntryMissingAField) {
  const std::string dtype = R"("dtype":"F32")", shape = R"("shape":[2])",
                    offsets = R"("data_offsets":[0,8])";
  EXPECT_TRUE(ContainsAll(HeaderError("{\"w\":{" + shape + "," + offsets + "}}", 8),
                          {"model.safetensors", "tensor 'w'", "missing 'dtype'"}));
  EXPECT_TRUE(ContainsAll(HeaderError("{\"w\":{" + dtype + "," + offsets + "}}", 8),
                          {"model.safetensors", "tensor 'w'", "missing 'shape'"}));
  EXPECT_TRUE(ContainsAll(HeaderError("{\"w\":{" + dtype + "," + shape + "}}", 8),
                          {"model.safetensors", "tensor 'w'", "missing 'data_offsets'"}));
}

TEST(SafetensorsErrorTest, EntryFieldsOfTheWrongType) {
  EXPECT_TRUE(ContainsAll(HeaderError(R"({"w":{"dtype":3,"shape":[2],"data_offsets":[0,8]}})", 8),
                          {"tensor 'w'", "'dtype' must be a string, found integer 3"}));
  EXPECT_TRUE(
      ContainsAll(HeaderError(R"({"w":{"dtype":"F32","shape":"2x3","data_offsets":[0,8]}})", 8),
                  {"tensor 'w'", "'shape' must be an array of integers, found string \"2x3\""}));
  EXPECT_TRUE(
      ContainsAll(HeaderError(R"({"w":{"dtype":"F32","shape":[2,1.5],"data_offsets":[0,8]}})", 8),
                  {"tensor 'w'", "'shape' must be an array of integers, found [2,1.5]"}));
  EXPECT_TRUE(ContainsAll(
      HeaderError(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", 8),
      {"model.safetensors", "tensor 'w'", "'data_offsets' must be [begin, end]", "found [8]"}));
  EXPECT_TRUE(
      ContainsAll(HeaderError(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":"0-8"}})", 8),
                  {"tensor 'w'", "found \"0-8\""}));
}

TEST(SafetensorsErrorTest, NegativeDimension) {
  EXPECT_TRUE(
      ContainsAll(HeaderError(R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,8]}})", 8),
                  {"model.safetensors", "tensor 'w'", "negative dimension -3 in shape [2,-3]"}));
}

TEST(SafetensorsErrorTest, ShapeWhoseByteCountOverflows) {
  EXPECT_TRUE(ContainsAll(
      HeaderError(R"({"w":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})",
                  8),
      {"tensor 'w'", "is too large"}));
}

TEST(SafetensorsErrorTest, UnsupportedDType) {
  for (const std::string dtype : {"I64", "F8_E4M3"}) {
    EXPECT_TRUE(ContainsAll(
        HeaderError(R"({"ids":{"dtype":")" + dtype + R"(","shape":[1],"data_offsets":[0,8]}})", 8),
        {"model.safetensors", "tensor 'ids'", "unsupported dtype '" + dtype + "'",
         "supported: BF16, F16, F32"}));
  }
}

TEST(SafetensorsErrorTest, DataOffsetsBeginAfterEnd) {
  EXPECT_TRUE(
      ContainsAll(HeaderError(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8),
                  {"model.safetensors", "tensor 'w'", "0 <= begin <= end, found [8,4]"}));
}

TEST(SafetensorsErrorTest, ByteCountNotMatchingShapeAndDType) {
  EXPECT_TRUE(
      ContainsAll(HeaderError(R"({"x":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}})", 10),
                  {"model.safetensors",
                   "tensor 'x': shape [2, 3] with dtype BF16 needs 12 bytes, "
                   "data_offsets give 10"}));
}

TEST(SafetensorsErrorTest, TruncatedFile) {
  ScratchDir dir;
  std::vector<OwnedTensor> tensors = {MakeTensor("first", DType::kF32, {4}, 1),
                                      MakeTensor("last", DType::kF32, {4}, 2)};
  const std::string path = dir / "model.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  const uintmax_t full = fs::file_size(path);
  fs::resize_file(path, full - 10);
  EXPECT_TRUE(
      ContainsAll(OpenError(dir.path()), {path, "tensor 'last'", "truncated",
                                          "expected file size >= " + std::to_string(full) +
                                              " bytes, found " + std::to_string(full - 10)}));
}

TEST(SafetensorsErrorTest, OverlappingTensors) {
  EXPECT_TRUE(
      ContainsAll(HeaderError(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              12),
                  {"model.safetensors", "'a' (bytes [0, 8))", "'b' (bytes [4, 12))", "overlap"}));
}

TEST(SafetensorsErrorTest, NoCheckpointInTheDirectory) {
  ScratchDir dir;
  EXPECT_TRUE(ContainsAll(OpenError(dir.path()),
                          {dir.path(), "model.safetensors or model.safetensors.index.json"}));
}

TEST(SafetensorsErrorTest, MappedFileErrorsNameThePath) {
  ScratchDir dir;
  Result<std::shared_ptr<MappedFile>> missing = MappedFile::Open(dir / "nope.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(ContainsAll(missing.status().message(),
                          {dir / "nope.safetensors", "No such file or directory"}));
  Result<std::shared_ptr<MappedFile>> directory = MappedFile::Open(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_TRUE(ContainsAll(directory.status().message(), {dir.path(), "not a regular file"}));
}

// ---------------------------------------------------------------------------------------
// Broken sharded checkpoints

constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";

void WriteIndex(const ScratchDir& dir, const nlohmann::json& weight_map) {
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  WriteBytes(dir / "model.safetensors.index.json", index.dump(2));
}

TEST(SafetensorsShardErrorTest, IndexReferencesAMissingShard) {
  ScratchDir dir;
  ASSERT_TRUE(WriteSafetensors(dir / kShard1, {MakeTensor("a", DType::kF32, {2}, 1)}).ok());
  WriteIndex(dir, {{"a", kShard1}, {"b", kShard2}});
  EXPECT_TRUE(ContainsAll(OpenError(dir.path()), {"model.safetensors.index.json", kShard2,
                                                  "tensor 'b'", "No such file or directory"}));
}

TEST(SafetensorsShardErrorTest, IndexListsATensorAbsentFromItsShard) {
  ScratchDir dir;
  ASSERT_TRUE(WriteSafetensors(dir / kShard1, {MakeTensor("a", DType::kF32, {2}, 1)}).ok());
  ASSERT_TRUE(WriteSafetensors(dir / kShard2, {MakeTensor("c", DType::kF32, {2}, 1)}).ok());
  WriteIndex(dir, {{"a", kShard1}, {"b", kShard1}, {"c", kShard2}});
  EXPECT_TRUE(ContainsAll(OpenError(dir.path()), {"model.safetensors.index.json lists tensor 'b'",
                                                  dir / kShard1, "does not contain it"}));
}

TEST(SafetensorsShardErrorTest, ShardHoldsATensorMissingFromTheIndex) {
  ScratchDir dir;
  ASSERT_TRUE(WriteSafetensors(dir / kShard1, {MakeTensor("a", DType::kF32, {2}, 1),
                                               MakeTensor("stray", DType::kF32, {2}, 2)})
                  .ok());
  WriteIndex(dir, {{"a", kShard1}});
  EXPECT_TRUE(ContainsAll(OpenError(dir.path()), {dir / kShard1, "holds tensor 'stray'",
                                                  "model.safetensors.index.json does not list"}));
}

TEST(SafetensorsShardErrorTest, ShardHoldsATensorTheIndexMapsElsewhere) {
  ScratchDir dir;
  ASSERT_TRUE(WriteSafetensors(dir / kShard1, {MakeTensor("a", DType::kF32, {2}, 1)}).ok());
  ASSERT_TRUE(WriteSafetensors(dir / kShard2, {MakeTensor("b", DType::kF32, {2}, 1)}).ok());
  WriteIndex(dir, {{"a", kShard1}, {"b", kShard1}, {"x", kShard2}});
  EXPECT_TRUE(ContainsAll(
      OpenError(dir.path()),
      {dir / kShard2, "holds tensor 'b'",
       "model.safetensors.index.json maps it to shard '" + std::string(kShard1) + "'"}));
}

TEST(SafetensorsShardErrorTest, TensorDuplicatedAcrossShards) {
  ScratchDir dir;
  ASSERT_TRUE(WriteSafetensors(dir / kShard1, {MakeTensor("a", DType::kF32, {2}, 1)}).ok());
  ASSERT_TRUE(WriteSafetensors(dir / kShard2, {MakeTensor("a", DType::kF32, {2}, 2),
                                               MakeTensor("b", DType::kF32, {2}, 3)})
                  .ok());
  WriteIndex(dir, {{"a", kShard1}, {"b", kShard2}});
  EXPECT_TRUE(ContainsAll(OpenError(dir.path()),
                          {"tensor 'a' appears in both", dir / kShard1, dir / kShard2}));
}

TEST(SafetensorsShardErrorTest, BrokenShardIsNamed) {
  ScratchDir dir;
  ASSERT_TRUE(WriteSafetensors(dir / kShard1, {MakeTensor("a", DType::kF32, {2}, 1)}).ok());
  WriteRawSafetensors(dir / kShard2, R"({"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                      8);
  WriteIndex(dir, {{"a", kShard1}, {"b", kShard2}});
  EXPECT_TRUE(
      ContainsAll(OpenError(dir.path()), {dir / kShard2, "tensor 'b'", "unsupported dtype 'I64'"}));
}

TEST(SafetensorsShardErrorTest, MalformedIndex) {
  ScratchDir dir;
  WriteBytes(dir / "model.safetensors.index.json", "{\"weight_map\": {\"a\": }");
  EXPECT_TRUE(ContainsAll(OpenError(dir.path()), {dir / "model.safetensors.index.json",
                                                  "malformed JSON", "line 1, column"}));

  WriteIndex(dir, {{"a", 3}});
  EXPECT_TRUE(ContainsAll(OpenError(dir.path()),
                          {"model.safetensors.index.json", "weight_map['a']", "found integer 3"}));

  WriteBytes(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_TRUE(ContainsAll(OpenError(dir.path()),
                          {"model.safetensors.index.json", "missing required field 'weight_map'"}));
}

}  // namespace
}  // namespace fathom
