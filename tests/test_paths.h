// Where the tests find the source tree (the PyTorch reference, the npm packages, corpora)
// and the build tree (the fathom binary). The absolute paths are compiled into one object
// (test_paths.cc) and nowhere else, so every other test object is the same whatever
// directory the checkout sits in, and a compiler cache (ccache in .ci/run) reuses it
// from one clean clone to the next.
#pragma once

#include <string>

namespace fathom::testing {

const std::string& SourceDir();  // the repository root
const std::string& BinaryDir();  // the CMake build directory

}  // namespace fathom::testing
