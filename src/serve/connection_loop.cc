#include "serve/connection_loop.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "serve/httplib_include.h"

namespace fathom::serve {

namespace {

using Clock = std::chrono::steady_clock;

int MsUntil(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count() + 1;
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

bool SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

void AddressOf(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ip.clear();
  port = 0;
  if (rc != 0) return;
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
  }
  ip = buf;
}

// The socket of one request as cpp-httplib's Stream: reads come first from the bytes the
// loop already read, then from the socket until the request's read deadline; writes wait
// for the socket at most write_timeout_ms without progress. Reads fail once the server
// stops. Bytes read past this request (a pipelined next request) stay in the buffer for
// the loop.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(int fd, std::string buffered, Clock::time_point read_deadline, int write_timeout_ms,
             const std::atomic<bool>& stopping)
      : fd_(fd), buf_(std::move(buffered)), read_deadline_(read_deadline), write_timeout_ms_(write_timeout_ms),
        stopping_(stopping) {}

  bool is_readable() const override { return pos_ < buf_.size() || WaitFor(POLLIN, read_deadline_); }
  bool is_writable() const override {
    return !timed_out_ && WaitFor(POLLOUT, Clock::now() + std::chrono::milliseconds(write_timeout_ms_));
  }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == buf_.size() && !Fill()) return -1;
    const size_t n = std::min(size, buf_.size() - pos_);
    std::memcpy(ptr, buf_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    // After a read timeout the handler's own reply (a 400 for a cut body) is dropped: the
    // worker answers 408 instead.
    if (timed_out_) return -1;
    size_t off = 0;
    auto last_progress = Clock::now();
    while (off < size) {
      const ssize_t r = ::send(fd_, ptr + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r > 0) {
        off += static_cast<size_t>(r);
        wrote_ = true;
        last_progress = Clock::now();
        continue;
      }
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
      if (!WaitFor(POLLOUT, last_progress + std::chrono::milliseconds(write_timeout_ms_))) return -1;
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { AddressOf(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { AddressOf(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

  bool timed_out() const { return timed_out_; }
  bool wrote() const { return wrote_; }
  std::string TakeUnread() { return buf_.substr(pos_); }

 private:
  // Waits for `events` until `deadline`, in slices so that a stop is noticed; on a read
  // deadline marks the stream timed out. A stop fails reads only: a response being
  // written when the server drains must still reach its client (open streams are cut by
  // cpp-httplib itself, which ends chunked responses once the listening socket is gone).
  // The socket is polled at least once, so a deadline already passed (a zero timeout)
  // still sees a socket that is ready.
  bool WaitFor(short events, Clock::time_point deadline) const {
    for (;;) {
      if (events == POLLIN && stopping_) return false;
      const auto now = Clock::now();
      pollfd p{fd_, events, 0};
      const int rc = ::poll(&p, 1, std::min(MsUntil(deadline, now), 100));
      if (rc > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0;
      if (rc < 0 && errno != EINTR) return false;
      if (rc == 0 && Clock::now() >= deadline) {
        if (events == POLLIN) timed_out_ = true;
        return false;
      }
    }
  }

  bool Fill() {
    buf_.clear();
    pos_ = 0;
    char tmp[16384];
    for (;;) {
      if (!WaitFor(POLLIN, read_deadline_)) return false;
      const ssize_t r = ::recv(fd_, tmp, sizeof(tmp), MSG_DONTWAIT);
      if (r > 0) {
        buf_.assign(tmp, static_cast<size_t>(r));
        return true;
      }
      if (r == 0) return false;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    }
  }

  const int fd_;
  std::string buf_;
  size_t pos_ = 0;
  const Clock::time_point read_deadline_;
  const int write_timeout_ms_;
  const std::atomic<bool>& stopping_;
  mutable bool timed_out_ = false;
  bool wrote_ = false;
};

// The connection the calling worker (or the loop, for an inline request) is serving.
thread_local int t_watched_fd = -1;

}  // namespace

bool CurrentClientGone() {
  if (t_watched_fd < 0) return false;
  pollfd p{t_watched_fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

struct ConnectionLoop::Conn {
  int fd = -1;
  std::string buf;                 // bytes of the next request read so far
  bool peer_closed = false;        // the client shut down its side after sending
  int served = 0;                  // requests answered on this connection
  Clock::time_point last_active;   // idle since (no bytes pending)
  Clock::time_point request_start; // first byte of the request in buf
  // Where the search for the end of the headers resumes, and once they ended, the bytes
  // the request needs in all: a client sending a byte at a time costs O(bytes), not
  // O(bytes^2) rescans.
  size_t scanned = 0, need = 0;
};

RequestBytes ConnectionLoop::Classify(Conn& c) const {
  if (c.need > 0) return c.buf.size() >= c.need ? RequestBytes::kReady : RequestBytes::kNeedMore;
  const size_t from = c.scanned > 2 ? c.scanned - 2 : 0;
  if (c.buf.find("\n\n", from) == std::string::npos && c.buf.find("\n\r\n", from) == std::string::npos) {
    c.scanned = c.buf.size();
    return c.buf.size() > opt_.max_header_bytes ? RequestBytes::kHeadersTooLarge : RequestBytes::kNeedMore;
  }
  const RequestBytes r = ClassifyRequestBytes(c.buf, opt_.max_header_bytes, opt_.max_body_bytes, &c.need);
  if (r != RequestBytes::kNeedMore) c.need = 0;
  return r;
}

RequestBytes ClassifyRequestBytes(std::string_view buf, size_t max_header_bytes, size_t max_body_bytes,
                                  size_t* need) {
  // The blank line that ends the headers: "\r\n\r\n", or bare "\n\n" as cpp-httplib allows.
  size_t end = std::string_view::npos, body = 0;
  for (size_t i = buf.find('\n'); i != std::string_view::npos; i = buf.find('\n', i + 1)) {
    if (i + 1 < buf.size() && buf[i + 1] == '\n') {
      end = i;
      body = i + 2;
      break;
    }
    if (i + 2 < buf.size() && buf[i + 1] == '\r' && buf[i + 2] == '\n') {
      end = i;
      body = i + 3;
      break;
    }
  }
  if (end == std::string_view::npos) return buf.size() > max_header_bytes ? RequestBytes::kHeadersTooLarge
                                                                          : RequestBytes::kNeedMore;
  if (end > max_header_bytes) return RequestBytes::kHeadersTooLarge;
  std::string_view head = buf.substr(0, end);
  size_t content_length = 0;
  for (size_t pos = head.find('\n'); pos != std::string_view::npos && pos < head.size();) {
    const size_t next = head.find('\n', pos + 1);
    std::string_view line = head.substr(pos + 1, next == std::string_view::npos ? std::string_view::npos : next - pos - 1);
    pos = next;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = Trim(line.substr(0, colon)), value = Trim(line.substr(colon + 1));
    // The handler reads these bodies itself, under the read deadline: a chunked body has no
    // length up front, and a client that sent Expect: 100-continue waits for the go-ahead.
    if (IEquals(name, "transfer-encoding")) return RequestBytes::kReady;
    if (IEquals(name, "expect")) return RequestBytes::kReady;
    if (IEquals(name, "content-length")) {
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return RequestBytes::kBadContentLength;
      content_length = std::stoull(std::string(value));
      if (content_length > max_body_bytes) return RequestBytes::kReady;  // the handler answers 413
    }
  }
  if (need) *need = body + content_length;
  return buf.size() - body >= content_length ? RequestBytes::kReady : RequestBytes::kNeedMore;
}

ConnectionLoop::ConnectionLoop(int listen_fd, ConnectionOptions opt, RequestRunner run)
    : listen_fd_(listen_fd), opt_(opt), run_(std::move(run)) {
  // Created here and closed in the destructor, so that Stop() from another thread never
  // writes to a descriptor Run() has closed (and the process may have reused).
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

ConnectionLoop::~ConnectionLoop() {
  Stop();
  if (epfd_ >= 0) ::close(epfd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

ConnectionStats ConnectionLoop::stats() const {
  ConnectionStats s;
  s.open = open_;
  s.accepted = accepted_;
  s.refused = refused_;
  s.idle_closed = idle_closed_;
  s.read_timeouts = read_timeouts_;
  s.headers_too_large = headers_too_large_;
  return s;
}

void ConnectionLoop::Stop() {
  stopping_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
}

void ConnectionLoop::Reply(int fd, int status, std::string_view reason, std::string_view message) {
  std::string body = "{\"error\":{\"message\":\"";
  body.append(message).append("\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}");
  std::string out = "HTTP/1.1 " + std::to_string(status) + " ";
  out.append(reason).append("\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ");
  out.append(std::to_string(body.size())).append("\r\n\r\n").append(body);
  (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  // Half-close first: closing with unread request bytes would send a reset, which can
  // destroy the reply before the client reads it.
  ::shutdown(fd, SHUT_WR);
}

void ConnectionLoop::Close(std::unique_ptr<Conn> c) {
  ::close(c->fd);
  --open_;
}

void ConnectionLoop::Register(std::unique_ptr<Conn> c) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c->fd;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, c->fd, &ev) != 0) return Close(std::move(c));
  const int fd = c->fd;
  conns_.emplace(fd, std::move(c));
}

std::unique_ptr<ConnectionLoop::Conn> ConnectionLoop::Unregister(int fd) {
  epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  auto it = conns_.find(fd);
  std::unique_ptr<Conn> c = std::move(it->second);
  conns_.erase(it);
  return c;
}

void ConnectionLoop::AcceptAll() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop polling the listener (level-triggered, it would spin)
        // and retry shortly; pending clients wait in the backlog.
        epoll_event ev{};
        epoll_ctl(epfd_, EPOLL_CTL_MOD, listen_fd_, &ev);
        listener_paused_ = true;
        listener_retry_ = Clock::now() + std::chrono::milliseconds(100);
      }
      return;  // EAGAIN: accepted everything pending; other errors concern that client
    }
    ++accepted_;
    if (open_ >= opt_.max_connections) {
      ++refused_;
      Reply(fd, 503, "Service Unavailable",
            "the server has " + std::to_string(opt_.max_connections) +
                " connections open (--max-connections); retry later");
      ::close(fd);
      continue;
    }
    ++open_;
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->last_active = Clock::now();
    Register(std::move(c));
  }
}

bool ConnectionLoop::Inline(const Conn& c) const {
  // "GET <path> " or "GET <path>?...": a request without a body, so the buffer holds it all.
  if (c.buf.rfind("GET ", 0) != 0) return false;
  const size_t end = c.buf.find_first_of(" ?\r\n", 4);
  if (end == std::string::npos) return false;
  const std::string_view path = std::string_view(c.buf).substr(4, end - 4);
  if (std::find(opt_.inline_paths.begin(), opt_.inline_paths.end(), path) == opt_.inline_paths.end()) return false;
  // A body the handler would read from the socket (chunked, or after a 100 Continue)
  // could block the loop: such a request goes to a worker like any other.
  std::string head = c.buf.substr(0, std::min(c.buf.size(), opt_.max_header_bytes));
  for (char& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return head.find("\ntransfer-encoding") == std::string::npos && head.find("\nexpect") == std::string::npos;
}

void ConnectionLoop::Handle(std::unique_ptr<Conn> c) {
  const RequestBytes state = c->buf.empty() ? RequestBytes::kNeedMore : Classify(*c);
  if (state == RequestBytes::kHeadersTooLarge) {
    ++headers_too_large_;
    Reply(c->fd, 431, "Request Header Fields Too Large",
          "the request line and headers exceed " + std::to_string(opt_.max_header_bytes) + " bytes");
    return Close(std::move(c));
  }
  if (state == RequestBytes::kBadContentLength) {
    Reply(c->fd, 400, "Bad Request", "the Content-Length header is not a decimal number of bytes");
    return Close(std::move(c));
  }
  if (state == RequestBytes::kNeedMore) {
    if (c->peer_closed) return Close(std::move(c));  // the request can never complete
    return Register(std::move(c));
  }
  if (Inline(*c)) {
    // Answered here, so that /health answers even while every worker holds a stream. Its
    // write must not block the loop: a client that does not read loses the connection.
    Serve(*c, /*write_timeout_ms=*/0);
    if (c->peer_closed) return Close(std::move(c));
    c->last_active = c->request_start = Clock::now();
    if (c->buf.empty()) return Register(std::move(c));
    // A pipelined request follows: a worker takes it (one inline request per event bounds
    // the loop's work for a client that pipelines thousands).
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(c));
  }
  work_cv_.notify_one();
}

void ConnectionLoop::OnReadable(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  char tmp[65536];
  const ssize_t r = ::recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (r <= 0) {
    // The client closed (or reset). A complete request sent before a half-close is still
    // answered; anything else is dropped.
    if (r < 0 || c.buf.empty()) return Close(Unregister(fd));
    c.peer_closed = true;
  } else {
    if (c.buf.empty()) c.request_start = Clock::now();
    c.buf.append(tmp, static_cast<size_t>(r));
  }
  if (!c.peer_closed && Classify(c) == RequestBytes::kNeedMore) return;  // stays registered
  Handle(Unregister(fd));
}

void ConnectionLoop::TakeReturned() {
  uint64_t n = 0;
  (void)!::read(wake_fd_, &n, sizeof(n));
  std::deque<std::unique_ptr<Conn>> back;
  {
    std::lock_guard<std::mutex> lk(mu_);
    back.swap(returned_);
  }
  const auto now = Clock::now();
  for (auto& c : back) {
    c->last_active = now;
    c->request_start = now;  // a pipelined request's bytes, if any, count from now
    Handle(std::move(c));
  }
}

void ConnectionLoop::Sweep(Clock::time_point now) {
  if (listener_paused_ && now >= listener_retry_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = listen_fd_;
    epoll_ctl(epfd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    listener_paused_ = false;
  }
  std::vector<int> idle, late;
  for (const auto& [fd, c] : conns_) {
    if (c->buf.empty()) {
      if (now - c->last_active >= std::chrono::milliseconds(opt_.idle_timeout_ms)) idle.push_back(fd);
    } else if (now - c->request_start >= std::chrono::milliseconds(opt_.read_timeout_ms)) {
      late.push_back(fd);
    }
  }
  for (int fd : idle) {
    ++idle_closed_;
    Close(Unregister(fd));
  }
  for (int fd : late) {
    ++read_timeouts_;
    Reply(fd, 408, "Request Timeout",
          "the request did not arrive within " + std::to_string(opt_.read_timeout_ms) + " ms of its first byte");
    Close(Unregister(fd));
  }
}

void ConnectionLoop::Serve(Conn& c, int write_timeout_ms) {
  ConnStream s(c.fd, std::move(c.buf), c.request_start + std::chrono::milliseconds(opt_.read_timeout_ms),
               write_timeout_ms, stopping_);
  c.buf.clear();
  c.scanned = c.need = 0;
  ++c.served;
  const bool close_after = c.peer_closed || stopping_ || c.served >= opt_.max_requests_per_connection;
  bool closed = false;
  t_watched_fd = c.fd;
  const bool ok = run_(s, close_after, &closed);
  t_watched_fd = -1;
  if (s.timed_out()) {
    ++read_timeouts_;
    if (!s.wrote())
      Reply(c.fd, 408, "Request Timeout",
            "the request body did not arrive within " + std::to_string(opt_.read_timeout_ms) + " ms");
    c.peer_closed = true;  // closes below
    return;
  }
  if (!ok || closed || close_after) {
    c.peer_closed = true;
    return;
  }
  c.buf = s.TakeUnread();
}

void ConnectionLoop::WorkerMain() {
  for (;;) {
    std::unique_ptr<Conn> c;
    {
      std::unique_lock<std::mutex> lk(mu_);
      work_cv_.wait(lk, [&] { return workers_exit_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      c = std::move(jobs_.front());
      jobs_.pop_front();
    }
    if (!stopping_) Serve(*c, opt_.write_timeout_ms);
    if (stopping_ || c->peer_closed) {
      ::close(c->fd);
      --open_;
      continue;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      returned_.push_back(std::move(c));
    }
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
}

Status ConnectionLoop::Run() {
  if (epfd_ < 0 || wake_fd_ < 0 || !SetNonBlocking(listen_fd_))
    return Status::Error(std::string("the connection loop could not start: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  for (int i = 0; i < opt_.workers; ++i) workers_.emplace_back([this] { WorkerMain(); });
  running_ = true;

  // Timeouts are checked every 50 ms: a bound on how late an idle or slow connection closes.
  constexpr int kSweepMs = 50;
  auto next_sweep = Clock::now() + std::chrono::milliseconds(kSweepMs);
  std::vector<epoll_event> events(256);
  while (!stopping_) {
    const int n = epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), kSweepMs);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n && !stopping_; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      if (fd == listen_fd_) AcceptAll();
      else if (fd == wake_fd_) TakeReturned();
      else OnReadable(fd);
    }
    const auto now = Clock::now();
    if (now >= next_sweep) {
      Sweep(now);
      next_sweep = now + std::chrono::milliseconds(kSweepMs);
    }
  }

  // Stopping: idle connections close now; workers finish (their I/O fails from here on).
  for (auto& [fd, c] : conns_) {
    ::close(fd);
    --open_;
  }
  conns_.clear();
  {
    std::lock_guard<std::mutex> lk(mu_);
    workers_exit_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  for (auto* q : {&jobs_, &returned_}) {
    for (auto& c : *q) {
      ::close(c->fd);
      --open_;
    }
    q->clear();
  }
  epoll_ctl(epfd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
  running_ = false;
  return Status::Ok();
}

}  // namespace fathom::serve
