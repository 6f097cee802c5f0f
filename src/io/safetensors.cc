#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "io/json_fields.h"

namespace fathom {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kSupportedDTypes = "BF16, F16, F32";
constexpr const char* kMetadataKey = "__metadata__";
constexpr size_t kLengthPrefix = 8;  // u64 little-endian header length

std::string ErrnoText(int err) { return std::strerror(err); }

std::string JoinPath(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// The integer value of `v` if it is a JSON integer that fits in int64.
std::optional<int64_t> AsInt64(const json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

// One header entry, validated against the file it came from.
struct ParsedTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // relative to the data buffer
  uint64_t end = 0;
};

struct ParsedHeader {
  std::vector<ParsedTensor> tensors;
  size_t data_start = 0;  // file offset of the data buffer
};

// Reads the length prefix and parses the header JSON, rejecting duplicate top-level keys
// (nlohmann would silently keep the last one, hiding a second tensor of the same name).
Result<json> ReadHeaderJson(const MappedFile& f, size_t* data_start) {
  const std::string& path = f.path();
  if (f.size() < kLengthPrefix) {
    return Status::Error(path + ": file is " + std::to_string(f.size()) +
                         " bytes, shorter than the 8-byte header length prefix");
  }
  uint64_t n = 0;  // little-endian regardless of the host
  for (size_t i = 0; i < kLengthPrefix; ++i) n |= static_cast<uint64_t>(f.data()[i]) << (8 * i);
  const uint64_t available = f.size() - kLengthPrefix;
  if (n > available) {
    return Status::Error(path + ": header length " + std::to_string(n) +
                         " is larger than the file allows (file size " + std::to_string(f.size()) +
                         " bytes, at most " + std::to_string(available) + " bytes of header)");
  }
  const uint8_t* begin = f.data() + kLengthPrefix;
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json header;
  try {
    header = json::parse(begin, begin + n, on_event);
  } catch (const json::parse_error& e) {
    return Status::Error(path + ": header is not valid JSON: " + JsonParseErrorText(e));
  } catch (const json::exception& e) {  // out_of_range 406: a number past double's range (1e309)
    return Status::Error(path + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) {
    return Status::Error(path + ": header must be a JSON object, found " +
                         DescribeJsonValue(header));
  }
  if (!duplicate.empty()) {
    return Status::Error(path + ": header lists tensor '" + duplicate + "' more than once");
  }
  *data_start = kLengthPrefix + static_cast<size_t>(n);
  return header;
}

// Validates dtype and shape of one entry into `t`; `where` is "path: tensor 'name'".
Status ParseDTypeAndShape(const std::string& where, const json& e, ParsedTensor* t) {
  auto dtype_it = e.find("dtype");
  if (dtype_it == e.end()) return Status::Error(where + ": missing 'dtype'");
  if (!dtype_it->is_string()) {
    return Status::Error(where + ": 'dtype' must be a string, found " +
                         DescribeJsonValue(*dtype_it));
  }
  const std::string dtype_name = dtype_it->get<std::string>();
  std::optional<DType> dtype = DTypeFromSafetensorsName(dtype_name);
  if (!dtype) {
    return Status::Error(where + ": unsupported dtype '" + dtype_name +
                         "' (supported: " + kSupportedDTypes + ")");
  }
  t->dtype = *dtype;

  auto shape_it = e.find("shape");
  if (shape_it == e.end()) return Status::Error(where + ": missing 'shape'");
  if (!shape_it->is_array()) {
    return Status::Error(where + ": 'shape' must be an array of integers, found " +
                         DescribeJsonValue(*shape_it));
  }
  for (const json& d : *shape_it) {
    std::optional<int64_t> dim = AsInt64(d);
    if (!dim) {
      return Status::Error(where + ": 'shape' must be an array of integers, found " +
                           shape_it->dump());
    }
    if (*dim < 0) {
      return Status::Error(where + ": negative dimension " + std::to_string(*dim) + " in shape " +
                           shape_it->dump());
    }
    t->shape.push_back(*dim);
  }
  return Status::Ok();
}

// Validates data_offsets of one entry against its dtype/shape and the data buffer size.
Status ParseOffsets(const std::string& where, const json& e, uint64_t data_size, size_t data_start,
                    ParsedTensor* t) {
  auto off_it = e.find("data_offsets");
  if (off_it == e.end()) return Status::Error(where + ": missing 'data_offsets'");
  std::optional<int64_t> begin, end;
  if (off_it->is_array() && off_it->size() == 2) {
    begin = AsInt64((*off_it)[0]);
    end = AsInt64((*off_it)[1]);
  }
  if (!begin || !end || *begin < 0 || *end < 0 || *begin > *end) {
    return Status::Error(where + ": 'data_offsets' must be [begin, end] with 0 <= begin <= " +
                         "end, found " + off_it->dump());
  }
  t->begin = static_cast<uint64_t>(*begin);
  t->end = static_cast<uint64_t>(*end);

  // numel * dtype size, guarding against shapes whose byte count overflows.
  uint64_t need = DTypeSize(t->dtype);
  for (int64_t d : t->shape) {
    if (__builtin_mul_overflow(need, static_cast<uint64_t>(d), &need)) {
      return Status::Error(where + ": shape " + ShapeToString(t->shape) + " is too large");
    }
  }
  const uint64_t have = t->end - t->begin;
  if (need != have) {
    return Status::Error(where + ": shape " + ShapeToString(t->shape) + " with dtype " +
                         std::string(DTypeName(t->dtype)) + " needs " + std::to_string(need) +
                         " bytes, data_offsets give " + std::to_string(have));
  }
  if (t->end > data_size) {
    return Status::Error(where + ": data_offsets " + off_it->dump() + " end beyond the " +
                         std::to_string(data_size) + "-byte data buffer (truncated file?): " +
                         "expected file size >= " + std::to_string(data_start + t->end) +
                         " bytes, found " + std::to_string(data_start + data_size));
  }
  return Status::Ok();
}

// Tensors must not share bytes; zero-size tensors occupy none and cannot overlap.
Status CheckNoOverlap(const std::string& path, std::vector<const ParsedTensor*> sorted) {
  std::erase_if(sorted, [](const ParsedTensor* t) { return t->begin == t->end; });
  std::sort(sorted.begin(), sorted.end(), [](const ParsedTensor* a, const ParsedTensor* b) {
    return a->begin < b->begin || (a->begin == b->begin && a->end < b->end);
  });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const ParsedTensor& a = *sorted[i - 1];
    const ParsedTensor& b = *sorted[i];
    if (b.begin < a.end) {
      return Status::Error(path + ": tensors '" + a.name + "' (bytes [" + std::to_string(a.begin) +
                           ", " + std::to_string(a.end) + ")) and '" + b.name + "' (bytes [" +
                           std::to_string(b.begin) + ", " + std::to_string(b.end) + ")) overlap");
    }
  }
  return Status::Ok();
}

Result<ParsedHeader> ParseHeader(const MappedFile& f) {
  ParsedHeader h;
  FATHOM_ASSIGN_OR_RETURN(json header, ReadHeaderJson(f, &h.data_start));
  const uint64_t data_size = f.size() - h.data_start;
  for (const auto& [name, e] : header.items()) {
    if (name == kMetadataKey) continue;  // free-form string map, not a tensor
    const std::string where = f.path() + ": tensor '" + name + "'";
    if (!e.is_object()) {
      return Status::Error(where + ": expected an object with dtype, shape and data_offsets, " +
                           "found " + DescribeJsonValue(e));
    }
    ParsedTensor t;
    t.name = name;
    FATHOM_RETURN_IF_ERROR(ParseDTypeAndShape(where, e, &t));
    FATHOM_RETURN_IF_ERROR(ParseOffsets(where, e, data_size, h.data_start, &t));
    h.tensors.push_back(std::move(t));
  }
  std::vector<const ParsedTensor*> ptrs;
  for (const ParsedTensor& t : h.tensors) ptrs.push_back(&t);
  FATHOM_RETURN_IF_ERROR(CheckNoOverlap(f.path(), std::move(ptrs)));
  return h;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// MappedFile

Result<std::shared_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error("cannot open " + path + ": " + ErrnoText(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::Error("cannot stat " + path + ": " + ErrnoText(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Error(path + ": not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    return Status::Error(path + ": file is empty (0 bytes)");  // mmap of 0 bytes fails
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (p == MAP_FAILED) return Status::Error("cannot mmap " + path + ": " + ErrnoText(err));
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->data_ = static_cast<const uint8_t*>(p);
  f->size_ = size;
  f->path_ = path;
  return f;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

// ---------------------------------------------------------------------------------------
// Checkpoint

const TensorEntry* Checkpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status Checkpoint::AddFile(std::shared_ptr<MappedFile> file, std::vector<std::string>* names) {
  FATHOM_ASSIGN_OR_RETURN(ParsedHeader h, ParseHeader(*file));
  for (const ParsedTensor& t : h.tensors) {
    if (const TensorEntry* other = Find(t.name)) {
      return Status::Error("tensor '" + t.name + "' appears in both " + other->file + " and " +
                           file->path());
    }
  }
  for (ParsedTensor& t : h.tensors) {
    const uint8_t* data = file->data() + h.data_start + t.begin;
    const size_t nbytes = static_cast<size_t>(t.end - t.begin);
    if (reinterpret_cast<uintptr_t>(data) % DTypeSize(t.dtype) != 0) {
      // Misaligned in the mapping (see the header comment): keep an aligned copy.
      std::shared_ptr<uint8_t[]> copy(new uint8_t[nbytes]);
      std::memcpy(copy.get(), data, nbytes);
      data = copy.get();
      aligned_copies_.push_back(std::move(copy));
    }
    if (names != nullptr) names->push_back(t.name);
    TensorEntry& entry = tensors_[t.name];
    entry.file = file->path();
    entry.view.dtype = t.dtype;
    entry.view.shape = std::move(t.shape);
    entry.view.data = data;
  }
  files_.push_back(std::move(file));
  return Status::Ok();
}

Result<Checkpoint> Checkpoint::OpenFile(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  Checkpoint ckpt;
  FATHOM_RETURN_IF_ERROR(ckpt.AddFile(std::move(file), nullptr));
  return ckpt;
}

Result<Checkpoint> Checkpoint::Open(const std::string& dir) {
  const std::string index_path = JoinPath(dir, kIndexFile);
  std::error_code ec;
  if (fs::exists(index_path, ec)) return OpenIndexed(dir, index_path);
  const std::string single_path = JoinPath(dir, kSingleFile);
  if (fs::exists(single_path, ec)) return OpenFile(single_path);
  return Status::Error(dir + ": no checkpoint found: expected " + kSingleFile + " or " +
                       kIndexFile);
}

namespace {

// weight_map of an index file, grouped by shard file name (sorted, so shards open in a
// deterministic order).
Result<std::map<std::string, std::vector<std::string>>> ReadWeightMap(
    const std::string& index_path, std::map<std::string, std::string>* shard_of) {
  FATHOM_ASSIGN_OR_RETURN(JsonFields index, JsonFields::ParseFile(index_path));
  FATHOM_ASSIGN_OR_RETURN(JsonFields weight_map, index.Object("weight_map"));
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [name, shard] : weight_map.json().items()) {
    if (!shard.is_string() || shard.get<std::string>().empty()) {
      return Status::Error(index_path + ": weight_map['" + name +
                           "']: expected a shard file name, found " + DescribeJsonValue(shard));
    }
    (*shard_of)[name] = shard.get<std::string>();
    by_shard[shard.get<std::string>()].push_back(name);
  }
  return by_shard;
}

}  // namespace

Result<Checkpoint> Checkpoint::OpenIndexed(const std::string& dir, const std::string& index_path) {
  std::map<std::string, std::string> shard_of;
  FATHOM_ASSIGN_OR_RETURN(auto by_shard, ReadWeightMap(index_path, &shard_of));
  Checkpoint ckpt;
  for (const auto& [shard, listed] : by_shard) {
    const std::string shard_path = JoinPath(dir, shard);
    Result<std::shared_ptr<MappedFile>> file = MappedFile::Open(shard_path);
    if (!file.ok()) {
      return file.status().WithContext(index_path + " lists shard '" + shard + "' (for tensor '" +
                                       listed.front() + "')");
    }
    std::vector<std::string> held;
    FATHOM_RETURN_IF_ERROR(ckpt.AddFile(std::move(file).value(), &held));
    for (const std::string& name : held) {
      auto it = shard_of.find(name);
      if (it == shard_of.end()) {
        return Status::Error(shard_path + ": holds tensor '" + name + "', which " + index_path +
                             " does not list");
      }
      if (it->second != shard) {
        return Status::Error(shard_path + ": holds tensor '" + name + "', but " + index_path +
                             " maps it to shard '" + it->second + "'");
      }
    }
  }
  for (const auto& [name, shard] : shard_of) {
    if (ckpt.Find(name) == nullptr) {
      return Status::Error(index_path + " lists tensor '" + name + "' in shard '" + shard +
                           "', but " + JoinPath(dir, shard) + " does not contain it");
    }
  }
  return ckpt;
}

// ---------------------------------------------------------------------------------------
// Writing

namespace {

// Coalesces small writes (the header, small tensors) into one buffer and hands large ones
// to write(2) directly, so multi-GB tensors are never copied. Errors name `path`.
class FileWriter {
 public:
  FileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
    buffer_.reserve(kBufferBytes);
  }

  Status Append(const void* data, size_t n) {
    if (buffer_.size() + n > kBufferBytes) FATHOM_RETURN_IF_ERROR(Flush());
    if (n >= kBufferBytes) return WriteAll(static_cast<const uint8_t*>(data), n);
    const auto* p = static_cast<const uint8_t*>(data);
    buffer_.insert(buffer_.end(), p, p + n);
    return Status::Ok();
  }

  Status Flush() {
    Status s = WriteAll(buffer_.data(), buffer_.size());
    buffer_.clear();
    return s;
  }

 private:
  static constexpr size_t kBufferBytes = size_t{4} << 20;
  // Linux writes at most ~2 GiB per call; keep calls well below that.
  static constexpr size_t kMaxWrite = size_t{1} << 30;

  Status WriteAll(const uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, p, std::min(n, kMaxWrite));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return Status::Error("cannot write " + path_ + ": " + ErrnoText(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }

  int fd_;
  std::string path_;
  std::vector<uint8_t> buffer_;
};

// Writes `head` then each of `bodies` to path + ".tmp", fsyncs, and renames it over `path`:
// a crash leaves either the old file or the new one, never a torn one.
Status WriteFileAtomically(const std::string& path, const std::string& head,
                           const std::vector<const std::vector<uint8_t>*>& bodies) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error("cannot create " + tmp + ": " + ErrnoText(errno));
  FileWriter out(fd, tmp);
  Status s = out.Append(head.data(), head.size());
  for (size_t i = 0; s.ok() && i < bodies.size(); ++i) {
    s = out.Append(bodies[i]->data(), bodies[i]->size());
  }
  if (s.ok()) s = out.Flush();
  if (s.ok() && ::fsync(fd) != 0)
    s = Status::Error("cannot fsync " + tmp + ": " + ErrnoText(errno));
  if (::close(fd) != 0 && s.ok())
    s = Status::Error("cannot close " + tmp + ": " + ErrnoText(errno));
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Status::Error("cannot rename " + tmp + " to " + path + ": " + ErrnoText(errno));
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

// Rejects tensors that would produce an unreadable file.
Status ValidateForWrite(const std::string& path, const std::vector<const OwnedTensor*>& tensors) {
  std::set<std::string> names;
  for (const OwnedTensor* t : tensors) {
    const std::string where = "writing " + path + ": tensor '" + t->name + "'";
    if (t->name == kMetadataKey) return Status::Error(where + ": the name is reserved");
    if (!names.insert(t->name).second) return Status::Error(where + ": duplicate name");
    try {
      (void)json(t->name).dump();  // the header is JSON, which must be valid UTF-8
    } catch (const json::type_error&) {
      return Status::Error(where + ": the name is not valid UTF-8");
    }
    uint64_t need = DTypeSize(t->dtype);
    for (int64_t d : t->shape) {
      if (d < 0) return Status::Error(where + ": negative dimension in " + ShapeToString(t->shape));
      if (__builtin_mul_overflow(need, static_cast<uint64_t>(d), &need)) {
        return Status::Error(where + ": shape " + ShapeToString(t->shape) + " is too large");
      }
    }
    if (need != t->bytes.size()) {
      return Status::Error(where + ": shape " + ShapeToString(t->shape) + " with dtype " +
                           std::string(DTypeName(t->dtype)) + " needs " + std::to_string(need) +
                           " bytes, found " + std::to_string(t->bytes.size()));
    }
  }
  return Status::Ok();
}

// Length prefix + header JSON (keys sorted by nlohmann's std::map), space-padded so the
// data buffer starts at a multiple of 8 bytes, as the reference implementation does.
std::string BuildHead(const std::vector<const OwnedTensor*>& tensors) {
  json header = json::object();
  header[kMetadataKey] = json::object({{"format", "pt"}});
  uint64_t offset = 0;
  for (const OwnedTensor* t : tensors) {
    json e = json::object();
    e["dtype"] = std::string(DTypeName(t->dtype));
    e["shape"] = t->shape;
    e["data_offsets"] = json::array({offset, offset + t->bytes.size()});
    offset += t->bytes.size();
    header[t->name] = std::move(e);
  }
  std::string text = header.dump();
  text.append((kLengthPrefix - text.size() % kLengthPrefix) % kLengthPrefix, ' ');
  std::string head(kLengthPrefix, '\0');
  for (size_t i = 0; i < kLengthPrefix; ++i) {
    head[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  }
  return head + text;
}

Status WriteSafetensorsFile(const std::string& path,
                            const std::vector<const OwnedTensor*>& tensors) {
  FATHOM_RETURN_IF_ERROR(ValidateForWrite(path, tensors));
  std::vector<const std::vector<uint8_t>*> bodies;
  for (const OwnedTensor* t : tensors) bodies.push_back(&t->bytes);
  return WriteFileAtomically(path, BuildHead(tensors), bodies);
}

// Removes `path` if it exists; a checkpoint directory must not keep a stale file that Open
// would prefer over the one just written.
Status RemoveStale(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) return Status::Error("cannot remove stale " + path + ": " + ec.message());
  return Status::Ok();
}

std::string ShardName(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i, n);
  return buf;
}

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<OwnedTensor>& tensors) {
  std::vector<const OwnedTensor*> ptrs;
  for (const OwnedTensor& t : tensors) ptrs.push_back(&t);
  return WriteSafetensorsFile(path, ptrs);
}

Status WriteCheckpointTensors(const std::string& dir, const std::vector<OwnedTensor>& tensors,
                              size_t max_shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Error("cannot create directory " + dir + ": " + ec.message());

  std::vector<const OwnedTensor*> all;
  for (const OwnedTensor& t : tensors) all.push_back(&t);
  // Up front, so that names duplicated across shards are caught before anything is written.
  FATHOM_RETURN_IF_ERROR(ValidateForWrite(dir, all));

  // Greedy packing in the given order; pointers, so no tensor bytes are copied.
  std::vector<std::vector<const OwnedTensor*>> shards;
  size_t total = 0, in_shard = 0;
  for (const OwnedTensor& t : tensors) {
    const size_t n = t.bytes.size();
    if (shards.empty() || (in_shard + n > max_shard_bytes && !shards.back().empty())) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&t);
    in_shard += n;
    total += n;
  }

  if (total <= max_shard_bytes || shards.size() <= 1) {
    FATHOM_RETURN_IF_ERROR(WriteSafetensorsFile(JoinPath(dir, kSingleFile), all));
    return RemoveStale(JoinPath(dir, kIndexFile));
  }

  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = ShardName(i + 1, shards.size());
    FATHOM_RETURN_IF_ERROR(WriteSafetensorsFile(JoinPath(dir, name), shards[i]));
    for (const OwnedTensor* t : shards[i]) weight_map[t->name] = name;
  }
  // The index goes last: it only appears once every shard it names is complete.
  json index = json::object();
  index["metadata"] = json::object({{"total_size", total}});
  index["weight_map"] = std::move(weight_map);
  FATHOM_RETURN_IF_ERROR(WriteFileAtomically(JoinPath(dir, kIndexFile), index.dump(2) + "\n", {}));
  return RemoveStale(JoinPath(dir, kSingleFile));
}

}  // namespace fathom
