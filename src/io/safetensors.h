// Safetensors checkpoints: memory-mapped reading (one file or index-sharded) and writing.
//
// File format: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data buffer (offsets are relative to its start).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace fathom {

class MappedFile {
 public:
  static Result<std::shared_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

struct TensorEntry {
  std::string file;  // path of the file holding it
  TensorView view;   // points into the mapping
};

// All tensors of a Hugging Face model directory: `model.safetensors`, or the shards listed
// in `model.safetensors.index.json` (weight_map: tensor name -> shard file).
class Checkpoint {
 public:
  // Errors name the file and the tensor: malformed header, unknown dtype, offsets outside
  // the file or inconsistent with dtype*shape, overlapping tensors, a name listed in the
  // index but missing from its shard (or vice versa), a missing shard.
  static Result<Checkpoint> Open(const std::string& dir);

  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* Find(const std::string& name) const;

 private:
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::map<std::string, TensorEntry> tensors_;
};

// A tensor to write: raw little-endian bytes of `dtype`, numel(shape) * size(dtype) long.
struct OwnedTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<uint8_t> bytes;
};

Status WriteSafetensors(const std::string& path, const std::vector<OwnedTensor>& tensors);
// Writes `model.safetensors`, or when the total exceeds max_shard_bytes,
// `model-0000i-of-0000n.safetensors` shards plus `model.safetensors.index.json`.
Status WriteCheckpointTensors(const std::string& dir, const std::vector<OwnedTensor>& tensors,
                              size_t max_shard_bytes);

}  // namespace fathom
