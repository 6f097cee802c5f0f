// Safetensors checkpoints: memory-mapped reading (one file or index-sharded) and writing.
//
// File format: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data buffer (offsets are relative to its start).
//
// Alignment: every TensorView::data from a Checkpoint is aligned for its element type, so
// consumers may read it as float / uint16_t directly. Files written by the reference
// implementation (and by WriteSafetensors when tensors are ordered by decreasing element
// size) have naturally aligned data in the mapping; for a tensor that is not (a header
// length that is not a multiple of 8, or an F32 tensor after an odd-sized BF16 one), Open
// copies that tensor's bytes into an aligned buffer owned by the Checkpoint, since reading
// a misaligned float* is undefined behaviour. Such files are rare; the copy costs memory
// only for the tensors affected.
//
// Views stay valid while the Checkpoint or any copy of it lives (copies share the mappings
// and the aligned copies); moving a Checkpoint keeps them valid.
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
  // One safetensors file, whatever its name (same validation as Open).
  static Result<Checkpoint> OpenFile(const std::string& path);

  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* Find(const std::string& name) const;

 private:
  static Result<Checkpoint> OpenIndexed(const std::string& dir, const std::string& index_path);
  // Validates `file`'s header and adds its tensors; `names` (if given) receives them.
  Status AddFile(std::shared_ptr<MappedFile> file, std::vector<std::string>* names);

  std::vector<std::shared_ptr<MappedFile>> files_;
  // Aligned copies of tensors whose bytes are misaligned in their mapping (see the top).
  std::vector<std::shared_ptr<uint8_t[]>> aligned_copies_;
  std::map<std::string, TensorEntry> tensors_;
};

// A tensor to write: raw little-endian bytes of `dtype`, numel(shape) * size(dtype) long.
struct OwnedTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<uint8_t> bytes;
};

// Header keys are sorted, data is laid out in the given order with no gaps (the format
// requires a contiguous buffer), the header is space-padded to a multiple of 8 bytes and
// carries "__metadata__": {"format": "pt"}. Written to `path`.tmp, then renamed over
// `path`, so readers never see a half-written file. Errors name the path (and the tensor
// for invalid input: byte count not matching shape*dtype, duplicate or reserved names).
// To keep every tensor aligned in the file, order them by decreasing dtype size (F32 before
// BF16/F16) or use sizes that are multiples of 4 bytes; otherwise readers copy (see top).
Status WriteSafetensors(const std::string& path, const std::vector<OwnedTensor>& tensors);
// Writes `model.safetensors`, or when the total exceeds max_shard_bytes,
// `model-0000i-of-0000n.safetensors` shards plus `model.safetensors.index.json`.
// Shards are filled greedily in the given order; a tensor larger than max_shard_bytes gets
// a shard of its own. Creates `dir` if needed and removes the stale counterpart (the index
// when writing one file, model.safetensors when sharding) so that Open reads what was just
// written. Shards of an earlier write with a different count are left alone (unreferenced).
Status WriteCheckpointTensors(const std::string& dir, const std::vector<OwnedTensor>& tensors,
                              size_t max_shard_bytes);

}  // namespace fathom
