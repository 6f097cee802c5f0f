// Command-line flags of one fathom subcommand: declared once with their help text, parsed
// with validation (unknown flags, missing values, bad numbers and out-of-range values are
// errors that name the flag), and printed by --help.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace fathom::cli {

class FlagSet {
 public:
  FlagSet(std::string command, std::string usage, std::string description)
      : command_(std::move(command)), usage_(std::move(usage)), description_(std::move(description)) {}

  void String(const std::string& name, std::string* dst, const std::string& help);
  void Int(const std::string& name, int64_t* dst, const std::string& help, int64_t min, int64_t max);
  void Double(const std::string& name, double* dst, const std::string& help, double min, double max);
  void Bool(const std::string& name, bool* dst, const std::string& help);  // presence = true
  void Positional(const std::string& name, std::string* dst, const std::string& help);
  void Require(const std::string& name) { required_.insert(name); }

  // argv excludes the program and subcommand names.
  Status Parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_; }
  bool Seen(const std::string& name) const { return seen_.count(name) > 0; }
  std::string Help() const;

 private:
  struct Flag {
    std::string name, help, value_name;
    bool takes_value = true;
    std::function<Status(const std::string&)> set;
  };
  const Flag* Find(const std::string& name) const;

  std::string command_, usage_, description_;
  std::vector<Flag> flags_;
  std::vector<Flag> positionals_;
  std::set<std::string> required_, seen_;
  bool help_ = false;
};

// "a,b,,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> SplitComma(const std::string& s);
// "1,2,3" -> {1, 2, 3}; errors name the flag and the bad element.
Result<std::vector<int32_t>> ParseIdList(const std::string& flag, const std::string& text);
Result<std::vector<int64_t>> ParseIntList(const std::string& flag, const std::string& text);

}  // namespace fathom::cli
