// FATHOM_CHECK: invariants of fathom's own code. A failure is a bug, not bad input: it
// prints file, line, the condition and the values given, then aborts.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace fathom::internal {
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* cond,
                                     const std::string& detail) {
  std::fprintf(stderr, "FATHOM_CHECK failed at %s:%d: %s %s\n", file, line, cond, detail.c_str());
  std::abort();
}
}  // namespace fathom::internal

#define FATHOM_CHECK(cond)                                                   \
  do {                                                                       \
    if (!(cond)) ::fathom::internal::CheckFailed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

// FATHOM_CHECK_MSG(n == m, "n=" << n << " m=" << m)
#define FATHOM_CHECK_MSG(cond, stream_expr)                                   \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::ostringstream fathom_os_;                                          \
      fathom_os_ << stream_expr;                                              \
      ::fathom::internal::CheckFailed(__FILE__, __LINE__, #cond, fathom_os_.str()); \
    }                                                                         \
  } while (0)
