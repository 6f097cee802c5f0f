// Counts heap allocations between StartCounting() and StopCounting(), by who asked for them.
//
// alloc_counter.cc replaces the global operator new / delete (every form) and, outside
// AddressSanitizer builds, malloc, calloc, realloc, posix_memalign, aligned_alloc and
// memalign (forwarding to glibc's __libc_* entry points). Replacing them affects the whole
// binary, so this is a test executable of its own (tests/alloc). Shared libraries' calls
// resolve to the executable's definitions too, so calls made inside libdnnl (oneDNN),
// libgomp and libstdc++ are seen.
//
// Attribution: the immediate caller's return address is looked up in the loaded objects'
// executable segments (dl_iterate_phdr). A call from libstdc++ or libc (std::string,
// std::function, strdup ...) is made on someone's behalf, so the stack is walked
// (backtrace()) to the first frame outside those two. kFathom is the test executable
// itself: fathom's static libraries, the standard templates instantiated in them, the test
// code and gtest. Counting is global (every thread), off by default.
//
// Not seen: mmap / brk called directly (glibc's malloc maps large blocks itself, which is
// counted as the malloc that caused it), allocations by the dynamic loader, and under
// ASan the malloc family (ASan owns malloc; operator new is still counted).
#pragma once

#include <cstdint>
#include <string>

namespace fathom::testing {

enum class AllocSource : int { kFathom, kOneDnn, kOpenMp, kStdCpp, kLibc, kOther, kCount };
const char* AllocSourceName(AllocSource s);

struct AllocCounts {
  static constexpr int kSources = static_cast<int>(AllocSource::kCount);
  static constexpr int kKeptStacks = 4;
  static constexpr int kStackDepth = 16;
  int64_t new_calls[kSources] = {};     // operator new / new[] (any form)
  int64_t malloc_calls[kSources] = {};  // malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign
  int64_t bytes[kSources] = {};
  // The stacks of the first kKeptStacks kFathom allocations, for the failure message.
  void* stacks[kKeptStacks][kStackDepth] = {};
  int stack_depth[kKeptStacks] = {};
  int kept = 0;

  int64_t new_from(AllocSource s) const { return new_calls[static_cast<int>(s)]; }
  int64_t malloc_from(AllocSource s) const { return malloc_calls[static_cast<int>(s)]; }
  int64_t total_from(AllocSource s) const { return new_from(s) + malloc_from(s); }
  // One line per source with calls, then the kept stacks (symbolized where possible).
  std::string Describe() const;
};

// Whether the malloc family is counted (false under AddressSanitizer).
bool CountsMalloc();
void StartCounting();
AllocCounts StopCounting();

}  // namespace fathom::testing
