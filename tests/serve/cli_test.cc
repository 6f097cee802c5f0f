// `fathom serve` as a process: it prints its address, answers, and on SIGTERM drains and
// exits 0. Every wait is bounded (60 s) so that a hung server fails the test.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "model/test_util.h"
#include "serve/httplib_include.h"
#include "serve/serve_test_util.h"

namespace fathom::testing {
namespace {

using nlohmann::json;

// Reads the child's output until `marker` appears in a line; returns that line.
std::string ReadUntil(int fd, const std::string& marker, std::string* all) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string buf;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char c[512];
    const ssize_t n = read(fd, c, sizeof c);
    if (n <= 0) break;
    buf.append(c, static_cast<size_t>(n));
    size_t pos = buf.find(marker);
    if (pos != std::string::npos) {
      const size_t end = buf.find('\n', pos);
      if (end != std::string::npos) {
        *all = buf;
        return buf.substr(pos, end - pos);
      }
    }
  }
  *all = buf;
  return "";
}

TEST(ServeCli, ServesAndDrainsOnSigterm) {
  TempDir dir;
  MakeServeModel(dir / "tiny-model");
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const std::string bin = FathomBinary(), model = dir / "tiny-model";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(out[0]);
    execl(bin.c_str(), "fathom", "serve", "--model", model.c_str(), "--port", "0", "--threads", "1",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string all;
  const std::string line = ReadUntil(out[0], "listening on http://", &all);
  ASSERT_FALSE(line.empty()) << all;
  const int port = std::stoi(line.substr(line.rfind(':') + 1));
  {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(60, 0);
    auto models = cli.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny-model");
    auto r = cli.Post("/v1/completions", R"({"prompt": "hello", "max_tokens": 4, "temperature": 0})",
                      "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"].get<int>() > 0, true);
  }
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!WIFEXITED(status) && !WIFSIGNALED(status)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "fathom serve did not exit after SIGTERM";
  }
  close(out[0]);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ServeCli, MissingTokenizerIsAClearError) {
  TempDir dir;
  MakeTinyModel("ouro", dir.path(), DType::kF32);
  CommandResult r = RunCommand(FathomBinary() + " serve --model " + dir.path() + " --port 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("tokenizer.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--tokenizer"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace fathom::testing
