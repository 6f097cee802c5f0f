// Helpers shared by the io tests: a scratch directory and a check that an error message
// names everything it should.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fathom::io_testing {

// Whether `message` contains every one of `parts`; on failure shows the message and the
// missing part.
inline ::testing::AssertionResult ContainsAll(const std::string& message,
                                              const std::vector<std::string>& parts) {
  for (const std::string& part : parts) {
    if (message.find(part) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << message << "\"\n  lacks \"" << part << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

// A fresh directory under the test temp dir, removed with everything in it on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = ::testing::TempDir() + "fathom_io_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << tmpl;
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }
  // Writes `text` to a file of the directory; returns its path.
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string path = *this / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

 private:
  std::string path_;
};

}  // namespace fathom::io_testing
