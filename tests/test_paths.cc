#include "test_paths.h"

namespace fathom::testing {

const std::string& SourceDir() {
  static const std::string dir = FATHOM_SOURCE_DIR;
  return dir;
}

const std::string& BinaryDir() {
  static const std::string dir = FATHOM_BINARY_DIR;
  return dir;
}

}  // namespace fathom::testing
