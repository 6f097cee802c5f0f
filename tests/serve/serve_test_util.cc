#include "serve/serve_test_util.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/make_model.h"
#include "model/test_util.h"

namespace fathom::testing {
namespace {

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to U+0100...
std::vector<std::string> ByteAlphabet() {
  std::vector<std::string> out(256);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out[static_cast<size_t>(b)] = s;
  }
  return out;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

}  // namespace

TinyTokenizerInfo WriteTinyTokenizer(const std::string& dir) {
  using nlohmann::json;
  std::filesystem::create_directories(dir);
  const std::vector<std::string> alpha = ByteAlphabet();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[alpha[static_cast<size_t>(b)]] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"Ġ", "t"}, {"h", "e"}, {"i", "n"}, {"Ġt", "he"}, {"e", "r"}, {"o", "n"}};
  json merge_list = json::array();
  int32_t id = 256;
  for (const auto& [a, b] : merges) {
    merge_list.push_back(a + " " + b);
    vocab[a + b] = id++;
  }
  TinyTokenizerInfo info;
  json added = json::array();
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    added.push_back({{"id", id},
                     {"content", special},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
    vocab[special] = id++;
  }
  info.endoftext = 256 + static_cast<int32_t>(merges.size());
  info.im_start = info.endoftext + 1;
  info.im_end = info.endoftext + 2;
  info.vocab_size = id;
  json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  WriteFile(dir + "/tokenizer.json", tok.dump(1));
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  json cfg = {{"chat_template", chatml},
              {"eos_token", "<|im_end|>"},
              {"bos_token", nullptr},
              {"pad_token", "<|endoftext|>"},
              {"model_max_length", 512}};
  WriteFile(dir + "/tokenizer_config.json", cfg.dump(1));
  return info;
}

TinyTokenizerInfo MakeServeModel(const std::string& dir, uint64_t seed) {
  TinyTokenizerInfo info = WriteTinyTokenizer(dir);
  MakeModelOptions opt;
  opt.family = "ouro";
  opt.out_dir = dir;
  opt.dtype = DType::kF32;
  opt.seed = seed;
  opt.config_overrides = {{"vocab_size", info.vocab_size}, {"eos_token_id", info.im_end}, {"bos_token_id", info.endoftext}};
  Status s = MakeRandomModel(opt);
  EXPECT_TRUE(s.ok()) << s.message();
  return info;
}

double MetricValue(const std::string& text, const std::string& name, const std::string& labels) {
  const std::string key = labels.empty() ? name + " " : name + "{" + labels + "} ";
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size()));
  return -1;
}

ServeProcess::~ServeProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (fd_ >= 0) close(fd_);
}

int ServeProcess::Start(const std::vector<std::string>& args) {
  int out[2];
  if (pipe(out) != 0) return -1;
  const std::string bin = FathomBinary();
  std::vector<std::string> argv_s = {"fathom", "serve"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  argv_s.insert(argv_s.end(), {"--port", "0"});
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) return -1;
  if (pid_ == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(out[0]);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  fd_ = out[0];
  const std::string marker = "listening on http://";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char c[512];
    const ssize_t n = read(fd_, c, sizeof c);
    if (n <= 0) break;
    output_.append(c, static_cast<size_t>(n));
    const size_t pos = output_.find(marker);
    if (pos == std::string::npos) continue;
    const size_t end = output_.find_first_of(" \n", pos + marker.size());
    if (end == std::string::npos) continue;
    const std::string addr = output_.substr(pos + marker.size(), end - pos - marker.size());
    return std::stoi(addr.substr(addr.rfind(':') + 1));
  }
  return -1;
}

int ServeProcess::Terminate() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool exited = false;
  while (!exited && std::chrono::steady_clock::now() < deadline) {
    exited = waitpid(pid_, &status, WNOHANG) == pid_;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!exited) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
  }
  pid_ = -1;
  // Whatever the server wrote while draining, for failure messages.
  char c[512];
  ssize_t n;
  while ((n = read(fd_, c, sizeof c)) > 0) output_.append(c, static_cast<size_t>(n));
  return exited && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace fathom::testing
