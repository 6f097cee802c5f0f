// `fathom serve`: the OpenAI-compatible HTTP server (src/serve/). Loads the model and its
// tokenizer, runs the engine on its own thread and serves until SIGTERM / SIGINT, which
// drain: new requests get 503, the ones in flight finish, then the process exits 0.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "commands.h"
#include "engine/engine.h"
#include "engine_flags.h"
#include "flags.h"
#include "model/model.h"
#include "serve/engine_loop.h"
#include "serve/http_server.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {
namespace {

// The flags of `fathom serve`; the engine's own come from EngineFlags.
struct ServeArgs {
  std::string model_dir, host = "127.0.0.1", api_key, api_key_file, served_name;
  LoadFlags load;
  int64_t port = 8000, max_pending = 256, threads = 0, http_threads = 64, heartbeat_ms = 1000, max_body_mb = 8;
  // Connection and request limits, their defaults read from serve::ServerOptions
  // (docs/RELIABILITY.md).
  static inline const serve::ServerOptions kDefaults{};
  int64_t max_connections = kDefaults.max_connections, idle_timeout_s = kDefaults.idle_timeout_ms / 1000,
          read_timeout_s = kDefaults.read_timeout_ms / 1000, request_timeout_s = kDefaults.request_timeout_ms / 1000,
          max_prompt_tokens = kDefaults.max_prompt_tokens, max_output_tokens = kDefaults.max_output_tokens;
  int64_t default_deadline_ms = kDefaults.default_deadline_ms;
  int64_t default_thinking_budget = kDefaults.default_thinking_budget;
  bool budget_control = false;
  EngineFlags engine{kServeEngineFlags};

  void Declare(FlagSet& f) {
    f.String("--model", &model_dir, "Hugging Face model directory with tokenizer.json");
    f.String("--host", &host, "address to listen on (default 127.0.0.1)");
    f.Int("--port", &port, "port (default 8000; 0: any free port)", 0, 65535);
    f.String("--api-key", &api_key, "require 'Authorization: Bearer KEY' on /v1/*");
    f.String("--api-key-file", &api_key_file, "read the API key from PATH (one line), keeping it out of `ps`");
    f.String("--served-model-name", &served_name, "the model's name in the API (default: DIR's basename)");
    engine.Declare(f);
    load.Declare(f);
    f.Int("--max-pending", &max_pending, "requests queued or running before 429 (default 256)", 1, 1 << 24);
    DeclareThreads(f, &threads);
    f.Int("--http-threads", &http_threads, "HTTP worker threads; each open stream holds one (default 64)", 1, 4096);
    f.Int("--max-body-mb", &max_body_mb, "largest request body in MiB (default 8; larger: 413)", 1, 1024);
    f.Int("--heartbeat-ms", &heartbeat_ms, "SSE keep-alive comment interval (default 1000)", 1, 600000);
    const auto dflt = [](int64_t v) { return " (default " + std::to_string(v) + ")"; };
    f.Int("--max-connections", &max_connections, "open connections; more are answered 503" + dflt(max_connections), 1,
          1 << 20);
    f.Int("--idle-timeout-s", &idle_timeout_s, "close keep-alive connections idle this long" + dflt(idle_timeout_s), 1,
          3600);
    f.Int("--read-timeout-s", &read_timeout_s,
          "a request must arrive within this of its first byte, else 408" + dflt(read_timeout_s), 1, 3600);
    f.Int("--request-timeout-s", &request_timeout_s,
          "cancel a generation running longer, answering 408; 0: no limit" + dflt(request_timeout_s), 0, 1 << 24);
    f.Int("--max-prompt-tokens", &max_prompt_tokens, "longest prompt accepted, else 400; 0: the model's context" +
          dflt(max_prompt_tokens), 0, 1 << 30);
    f.Int("--max-output-tokens", &max_output_tokens, "largest max_tokens accepted, else 400; 0: the model's context" +
          dflt(max_output_tokens), 0, 1 << 30);
    f.Int("--default-deadline-ms", &default_deadline_ms,
          "deadline of a request without deadline_ms; 0: none" + dflt(default_deadline_ms), 0, int64_t{1} << 40);
    f.Int("--default-thinking-budget", &default_thinking_budget,
          "thinking tokens of a request without thinking_token_budget, times its budget b, then </think>"
          " is forced; -1: none" + dflt(default_thinking_budget), -1, INT32_MAX);
    f.Bool("--budget-control", &budget_control,
           "recompute the compute budget b every step from deadlines, queue, KV and reclaim notices (issue 14)");
    f.Require("--model");
  }
};

// Serves until SIGTERM / SIGINT (blocked in `sigs` by the caller), which drain.
int Serve(const ServeArgs& a, const sigset_t& sigs, const Model& model, const Tokenizer& tok,
          EngineOptions opt) {
  opt.budget_control = a.budget_control;
  auto engine = Engine::Create(model, opt);
  if (!engine.ok()) return Fail("serve", engine.status().message(), 1);
  const serve::ModelLimits limits = serve::LimitsOf(model, **engine);
  serve::EngineLoopOptions lopt;
  lopt.max_pending = a.max_pending;
  serve::EngineLoop loop(std::move(*engine), lopt);
  serve::ServerOptions sopt;
  sopt.host = a.host;
  sopt.port = static_cast<int>(a.port);
  sopt.api_key = a.api_key;
  sopt.model_name = a.served_name;
  sopt.threads = static_cast<int>(a.http_threads);
  sopt.heartbeat_ms = static_cast<int>(a.heartbeat_ms);
  sopt.max_body_bytes = static_cast<size_t>(a.max_body_mb) << 20;
  sopt.max_connections = static_cast<int>(a.max_connections);
  sopt.idle_timeout_ms = static_cast<int>(a.idle_timeout_s * 1000);
  sopt.read_timeout_ms = static_cast<int>(a.read_timeout_s * 1000);
  sopt.request_timeout_ms = a.request_timeout_s * 1000;
  sopt.max_prompt_tokens = a.max_prompt_tokens;
  sopt.max_output_tokens = a.max_output_tokens;
  sopt.default_deadline_ms = a.default_deadline_ms;
  sopt.default_thinking_budget = a.default_thinking_budget;
  serve::HttpServer server(tok, loop, limits, sopt);
  if (Status s = server.Bind(); !s.ok()) return Fail("serve", s.message(), 1);
  std::printf("fathom serve: listening on http://%s:%d (model '%s', scheduler %s)\n", a.host.c_str(), server.port(),
              a.served_name.c_str(), std::string(SchedModeName(opt.mode)).c_str());
  std::fflush(stdout);

  std::atomic<bool> listening_done{false};
  std::thread signals([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (listening_done) return;  // woken by main after the server stopped on its own
    std::fprintf(stderr, "fathom serve: %s: draining in-flight requests\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.Drain();
  });
  Status s = server.Listen();
  listening_done = true;
  pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  loop.Stop();
  if (!s.ok()) return Fail("serve", s.message(), 1);
  std::fprintf(stderr, "fathom serve: stopped\n");
  return 0;
}

}  // namespace

int RunServe(const std::vector<std::string>& args) {
  ServeArgs a;
  FlagSet flags(
      "fathom serve",
      "fathom serve --model DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY | --api-key-file PATH]\n"
      "             [--served-model-name NAME] [--max-connections N] [--request-timeout-s S]\n"
      "             [--scheduler cb|cdb-norefill|cdb-refill] [--width W] [--k K] [--max-pending N]\n"
      "             [--threads N] [--http-threads N] [--kv-mb N] [--lookahead]",
      "Serves the model over an OpenAI-compatible HTTP API: POST /v1/completions and\n"
      "/v1/chat/completions (\"stream\": true for server-sent events), GET /v1/models, /health and\n"
      "/metrics (Prometheus). Extensions per request: \"exit_threshold\" (the model's exit signal),\n"
      "\"max_loops\", \"min_loops\", \"ignore_eos\". SIGTERM / SIGINT drain in-flight requests and exit.\n"
      "The model directory needs tokenizer.json (and tokenizer_config.json for chat).");
  a.Declare(flags);
  if (Status s = flags.Parse(args); !s.ok()) return Fail("serve", s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  auto opt = a.engine.Options();
  if (!opt.ok()) return Fail("serve", opt.status().message(), 2);
  auto load = a.load.Options();
  if (!load.ok()) return Fail("serve", load.status().message(), 2);
  if (!a.api_key_file.empty()) {
    if (!a.api_key.empty()) return Fail("serve", "--api-key and --api-key-file: give one", 2);
    auto key = serve::ReadApiKeyFile(a.api_key_file);
    if (!key.ok()) return Fail("serve", key.status().message(), 2);
    a.api_key = std::move(*key);
  }
  namespace fs = std::filesystem;
  if (!fs::exists(fs::path(a.model_dir) / "tokenizer.json"))
    return Fail("serve", "--model: no tokenizer.json in '" + a.model_dir +
                             "': copy the checkpoint's tokenizer files there, or write a test one with "
                             "`fathom make-model FAMILY DIR --tokenizer`",
                2);
  if (a.served_name.empty()) {
    fs::path p(a.model_dir);
    a.served_name = (p.has_filename() ? p.filename() : p.parent_path().filename()).string();
  }
  // Signals go to a sigwait thread (blocked here, before any thread exists, so that every
  // thread inherits the mask); SIGPIPE from a vanished client must not kill the server.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  LimitMallocArenasForServing();
  ApplyThreads(a.threads);
  auto model = Model::Load(a.model_dir, *load);
  if (!model.ok()) return Fail("serve", model.status().message(), 1);
  auto tok = Tokenizer::Load(a.model_dir);
  if (!tok.ok()) return Fail("serve", tok.status().message(), 1);
  if (Status s = serve::CheckVocabulary(**tok, (*model)->spec()); !s.ok()) return Fail("serve", s.message(), 1);
  return Serve(a, sigs, **model, **tok, *opt);
}

}  // namespace fathom::cli
