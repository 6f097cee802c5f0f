#include "flags.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace fathom::cli {
namespace {

Result<int64_t> ToInt(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE)
    return Status::Error(flag + ": expected an integer, found '" + v + "'");
  return static_cast<int64_t>(x);
}

Result<double> ToDouble(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x))
    return Status::Error(flag + ": expected a number, found '" + v + "'");
  return x;
}

}  // namespace

void FlagSet::String(const std::string& name, std::string* dst, const std::string& help) {
  flags_.push_back({name, help, "STR", true, [dst](const std::string& v) {
                      *dst = v;
                      return Status::Ok();
                    }});
}

void FlagSet::Int(const std::string& name, int64_t* dst, const std::string& help, int64_t min,
                  int64_t max) {
  flags_.push_back({name, help, "N", true, [=](const std::string& v) -> Status {
                      FATHOM_ASSIGN_OR_RETURN(int64_t x, ToInt(name, v));
                      if (x < min || x > max)
                        return Status::Error(name + ": " + v + " is outside [" +
                                             std::to_string(min) + ", " + std::to_string(max) + "]");
                      *dst = x;
                      return Status::Ok();
                    }});
}

void FlagSet::Double(const std::string& name, double* dst, const std::string& help, double min,
                     double max) {
  flags_.push_back({name, help, "X", true, [=](const std::string& v) -> Status {
                      FATHOM_ASSIGN_OR_RETURN(double x, ToDouble(name, v));
                      if (x < min || x > max) {
                        std::ostringstream os;
                        os << name << ": " << v << " is outside [" << min << ", " << max << "]";
                        return Status::Error(os.str());
                      }
                      *dst = x;
                      return Status::Ok();
                    }});
}

void FlagSet::Bool(const std::string& name, bool* dst, const std::string& help) {
  flags_.push_back({name, help, "", false, [dst](const std::string&) {
                      *dst = true;
                      return Status::Ok();
                    }});
}

void FlagSet::Positional(const std::string& name, std::string* dst, const std::string& help) {
  positionals_.push_back({name, help, "", true, [dst](const std::string& v) {
                            *dst = v;
                            return Status::Ok();
                          }});
  required_.insert(name);
}

const FlagSet::Flag* FlagSet::Find(const std::string& name) const {
  for (const Flag& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

Status FlagSet::Parse(const std::vector<std::string>& args) {
  size_t next_positional = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      return Status::Ok();
    }
    if (a.rfind("--", 0) == 0) {
      std::string value;
      bool has_inline = false;
      if (const size_t eq = a.find('='); eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_inline = true;
      }
      const Flag* f = Find(a);
      if (!f) return Status::Error("unknown flag " + a + " (see " + command_ + " --help)");
      if (seen_.count(a)) return Status::Error(a + " given twice");
      if (f->takes_value && !has_inline) {
        if (i + 1 >= args.size()) return Status::Error(a + ": missing value");
        value = args[++i];
      } else if (!f->takes_value && has_inline) {
        return Status::Error(a + " takes no value");
      }
      FATHOM_RETURN_IF_ERROR(f->set(value));
      seen_.insert(a);
      continue;
    }
    if (next_positional >= positionals_.size())
      return Status::Error("unexpected argument '" + a + "' (see " + command_ + " --help)");
    const Flag& p = positionals_[next_positional++];
    FATHOM_RETURN_IF_ERROR(p.set(a));
    seen_.insert(p.name);
  }
  for (const std::string& r : required_)
    if (!seen_.count(r)) return Status::Error("missing required " + r + " (see " + command_ + " --help)");
  return Status::Ok();
}

std::string FlagSet::Help() const {
  std::ostringstream os;
  os << "usage: " << usage_ << "\n\n" << description_ << "\n";
  if (!positionals_.empty()) {
    os << "\narguments:\n";
    for (const Flag& p : positionals_) os << "  " << p.name << "\n      " << p.help << "\n";
  }
  os << "\nflags:\n";
  for (const Flag& f : flags_) {
    os << "  " << f.name << (f.takes_value ? " " + f.value_name : "")
       << (required_.count(f.name) ? "  (required)" : "") << "\n      " << f.help << "\n";
  }
  os << "  --help\n      print this help\n";
  return os.str();
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Result<std::vector<int64_t>> ParseIntList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  size_t index = 0;
  while (std::getline(ss, item, ',')) {
    auto v = ToInt(flag, item);
    if (!v.ok())
      return Status::Error(flag + ": element " + std::to_string(index) + " ('" + item +
                           "') is not an integer");
    out.push_back(*v);
    ++index;
  }
  if (out.empty()) return Status::Error(flag + ": expected a comma-separated list, found '" + text + "'");
  return out;
}

Result<std::vector<int32_t>> ParseIdList(const std::string& flag, const std::string& text) {
  FATHOM_ASSIGN_OR_RETURN(std::vector<int64_t> v, ParseIntList(flag, text));
  std::vector<int32_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] > INT32_MAX)
      return Status::Error(flag + ": element " + std::to_string(i) + " (" + std::to_string(v[i]) +
                           ") is not a valid token id");
    out.push_back(static_cast<int32_t>(v[i]));
  }
  return out;
}

}  // namespace fathom::cli
