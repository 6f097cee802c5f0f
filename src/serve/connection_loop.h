// ConnectionLoop: the accept path and socket I/O of fathom's HTTP server, in front of
// cpp-httplib's request handling.
//
// cpp-httplib 0.11 gives every accepted connection a worker thread, which blocks on the
// socket until the client sends or its keep-alive timeout passes: 64 idle TCP connections
// stalled /health for 5 s and 300 for more than 10 s. Here one thread owns every socket
// that is not in a request. It accepts (a connection beyond `max_connections` gets a 503
// and is closed), reads with non-blocking reads until a request's headers and body have
// arrived, and only then hands the connection to a worker, which runs that one request
// through cpp-httplib's routing (Server::process_request over our own Stream) and gives the
// connection back. An idle or slow client costs a file descriptor and a buffer, never a
// worker; idle connections are closed after `idle_timeout_ms`, requests that do not arrive
// within `read_timeout_ms` of their first byte get a 408.
//
// A worker is held for the length of a request: an open SSE stream holds one, so
// `workers` bounds the streams answered at once (more wait in the queue). GET /health is
// answered by the loop thread itself, so it answers even then.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace httplib {
class Stream;
}  // namespace httplib

namespace fathom::serve {

struct ConnectionOptions {
  int max_connections = 512;      // open sockets; the next one is answered 503 and closed
  int workers = 64;               // threads running requests (an open stream holds one)
  int idle_timeout_ms = 5000;     // a keep-alive connection idle this long is closed
  int read_timeout_ms = 10000;    // a request must arrive within this of its first byte (408)
  int write_timeout_ms = 10000;   // a write that makes no progress this long cuts the connection
  size_t max_header_bytes = size_t{64} << 10;  // request line + headers; larger: 431
  // Bodies up to this are read by the loop before the handoff; a larger Content-Length
  // goes to the handler at once (which answers 413 for it).
  size_t max_body_bytes = size_t{8} << 20;
  int max_requests_per_connection = 1000;  // then the reply says "Connection: close"
  // GET requests for these paths are answered on the loop thread itself, never queued
  // behind workers: their handlers must be cheap and never block (/health).
  std::vector<std::string> inline_paths = {"/health"};
};

struct ConnectionStats {
  int64_t open = 0;              // sockets now open (idle, being read, or in a request)
  int64_t accepted = 0;          // connections accepted, ever
  int64_t refused = 0;           // answered 503: max_connections were open
  int64_t idle_closed = 0;       // closed after idle_timeout_ms without a byte
  int64_t read_timeouts = 0;     // answered 408: the request did not arrive in time
  int64_t headers_too_large = 0; // answered 431
};

// Runs one request read from `stream` and writes its response. `close_connection`: the
// response must end the connection (it says so). Returns false, or sets *closed, when the
// connection cannot carry another request.
using RequestRunner = std::function<bool(httplib::Stream& stream, bool close_connection, bool* closed)>;

// Where a request's bytes stand (exposed for tests): more are needed, it is complete (or
// its body is left to the handler: chunked, Expect: 100-continue, beyond max_body_bytes,
// or a Content-Length the handler will refuse), or its headers exceed max_header_bytes, or
// its Content-Length is not a number (answered 400 here: cpp-httplib 0.11 reads "-5" as
// 2^64 - 5 and waits for that body until the read timeout, found by bench soak).
// With kNeedMore once the headers are complete, *need (if given) is the request's total
// size (headers and body).
enum class RequestBytes { kNeedMore, kReady, kHeadersTooLarge, kBadContentLength };
RequestBytes ClassifyRequestBytes(std::string_view buf, size_t max_header_bytes, size_t max_body_bytes,
                                  size_t* need = nullptr);

// Whether the client of the request that the calling thread runs has gone (closed or reset
// its connection): cpp-httplib gives a handler no such signal, and a non-streamed generation
// writes nothing until its end. False on a thread that runs no request. TCP cannot tell a
// client that closed from one that only shut down its sending side until the server
// writes, so a half-close counts as gone, as nginx counts it (499): such a client gets
// the answers that need no check (/health, /v1/models) but no generation.
bool CurrentClientGone();

class ConnectionLoop {
 public:
  // `listen_fd` is a bound, listening socket that the caller keeps and closes.
  ConnectionLoop(int listen_fd, ConnectionOptions opt, RequestRunner run);
  ~ConnectionLoop();  // Stop()
  ConnectionLoop(const ConnectionLoop&) = delete;
  ConnectionLoop& operator=(const ConnectionLoop&) = delete;

  // Serves on the calling thread until Stop(); returns once every worker has finished.
  // Call once.
  Status Run();
  // From any thread, before or during Run: stop accepting, close idle connections, and
  // make in-flight requests' reads fail; responses being written are finished.
  void Stop();
  bool running() const { return running_; }
  ConnectionStats stats() const;

 private:
  struct Conn;
  using Clock = std::chrono::steady_clock;

  void AcceptAll();
  void OnReadable(int fd);
  // For a connection not in conns_: hands it to a worker if its request is complete,
  // answers 431 if its headers are too large, or registers it to read more.
  void Handle(std::unique_ptr<Conn> c);
  RequestBytes Classify(Conn& c) const;         // ClassifyRequestBytes, resumed
  void Register(std::unique_ptr<Conn> c);       // into epoll and conns_
  std::unique_ptr<Conn> Unregister(int fd);     // out of both
  void Close(std::unique_ptr<Conn> c);
  void Sweep(Clock::time_point now);
  void TakeReturned();
  bool Inline(const Conn& c) const;  // a request for one of inline_paths
  void WorkerMain();
  // Runs the request in c.buf; leaves the next request's bytes in c.buf, or sets
  // c.peer_closed when the connection must close.
  void Serve(Conn& c, int write_timeout_ms);
  // A short canned reply written without blocking (best effort), before a close.
  static void Reply(int fd, int status, std::string_view reason, std::string_view message);

  const int listen_fd_;
  const ConnectionOptions opt_;
  const RequestRunner run_;
  int epfd_ = -1, wake_fd_ = -1;
  std::atomic<bool> stopping_{false}, running_{false};
  bool listener_paused_ = false;  // accept hit EMFILE: retried from Sweep
  Clock::time_point listener_retry_{};

  // Owned by the loop thread: connections idle or being read.
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;

  // Connections in a request, and the ones workers gave back.
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<std::unique_ptr<Conn>> jobs_, returned_;
  bool workers_exit_ = false;
  std::vector<std::thread> workers_;

  std::atomic<int64_t> open_{0}, accepted_{0}, refused_{0}, idle_closed_{0}, read_timeouts_{0},
      headers_too_large_{0};
};

}  // namespace fathom::serve
