// The download loop with its threads: several transfers at once, each body handed to its sink,
// whose worker writes it and whose hasher hashes it, and which wakes the loop (curl_multi_wakeup)
// from its own thread when it is done; and a stop set from another thread, as the signal handler
// does. Against an HTTP server in this process. ThreadSanitizer runs these (build-tsan,
// docs/reliability.md): the CLI tests reach the same code, but only as a separate process.
#include "fetch/downloader.hpp"
#include "helpers.hpp"
#include "util/sha256.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (auto& c : s)
    c = static_cast<char>(gen() & 0xff);
  return s;
}

// What several servers share: how many connections are being answered at once, and the most
// there were; a body may wait until `wait_for` of them have been open at once (so the transfers
// overlap), and may stop after `hold_after` bytes until `released` (each wait ends with the
// server, or after 60 s).
struct Meeting {
  int wait_for = 0;
  std::size_t hold_after = 0;
  std::atomic<int> open{0}, most{0}, holding{0};
  std::atomic<bool> released{false};
};

// HTTP/1.1 on 127.0.0.1 for one file, one thread per connection, "Connection: close": GET /NAME
// answers 200 with the bytes, in 64 KiB writes; any other path 404. One server per file: with
// four jobs on one such server, libcurl 7.88 opened one connection at a time (seen, not
// explained; the downloader's CURLOPT_PIPEWAIT, which waits to see whether a connection can
// multiplex, is the likely cause), and these transfers must run at once.
class Server {
public:
  Server(std::string name, std::string body, Meeting& meeting)
      : name_(std::move(name)), body_(std::move(body)), meeting_(meeting) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~Server() {
    ending_ = true;
    ::shutdown(fd_, SHUT_RDWR); // Linux ends the accept() of a listening socket that is shut down
    acceptor_.join();
    std::lock_guard lock(mu_);
    for (auto& t : connections_)
      t.join();
    ::close(fd_);
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/" + name_; }

private:
  void accept_loop() {
    for (;;) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::lock_guard lock(mu_);
      connections_.emplace_back([this, c] {
        const int now = ++meeting_.open;
        for (int most = meeting_.most; now > most && !meeting_.most.compare_exchange_weak(most, now);) {
        }
        serve(c);
        --meeting_.open;
        ::close(c);
      });
    }
  }
  // Until `done` or the end, at most 60 s.
  void wait_until(const std::function<bool()>& done) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done() && !ending_ && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  void serve(int c) {
    std::string request;
    char buf[4096];
    while (request.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::read(c, buf, sizeof buf);
      if (n <= 0) return;
      request.append(buf, static_cast<std::size_t>(n));
    }
    if (!request.starts_with("GET /" + name_ + " ")) {
      send_all(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
      return;
    }
    wait_until([this] { return meeting_.most >= meeting_.wait_for; });
    send_all(c, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body_.size()) + "\r\nConnection: close\r\n\r\n");
    for (std::size_t off = 0; off < body_.size();) {
      if (meeting_.hold_after != 0 && off >= meeting_.hold_after) {
        ++meeting_.holding;
        wait_until([this] { return meeting_.released.load(); });
        --meeting_.holding;
        return; // the client has gone: nothing more to send
      }
      const std::size_t n = std::min<std::size_t>(64 << 10, body_.size() - off);
      if (!send_all(c, body_.substr(off, n))) return;
      off += n;
    }
  }
  static bool send_all(int c, const std::string& s) {
    for (std::size_t off = 0; off < s.size();) {
      const ssize_t n = ::send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }

  std::string name_, body_;
  Meeting& meeting_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> ending_{false};
  std::mutex mu_;
  std::vector<std::thread> connections_;
  std::thread acceptor_; // last: starts once everything above exists
};

// Counts events by kind, and the most bytes each artifact reported. The loop calls it; the
// stopper thread reads it.
struct Counter : fetch::Observer {
  void on_event(const fetch::Event& e) override {
    if (e.kind == fetch::EventKind::finished) ++finished;
    if (e.kind == fetch::EventKind::failed) ++failed;
    std::lock_guard lock(mu);
    bytes[e.name] = std::max(bytes[e.name], e.bytes);
  }
  // How many artifacts reported at least `n` bytes.
  int at_least(std::uint64_t n) {
    std::lock_guard lock(mu);
    return static_cast<int>(std::count_if(bytes.begin(), bytes.end(), [n](const auto& b) { return b.second >= n; }));
  }
  std::atomic<int> finished{0}, failed{0};
  std::mutex mu;
  std::map<std::string, std::uint64_t> bytes;
};

fetch::Options options(const fs::path& dir) {
  fetch::Options o;
  o.cache_dir = dir / "cache";
  o.parallel = 4;
  o.attempts_per_url = 1;
  o.backoff_initial_s = 0.01;
  return o;
}

} // namespace

TEST_CASE("download: four transfers at once, each through its sink's threads, every byte verified") {
  const auto dir = test::scratch("downloader-parallel");
  // 3 MiB and a bit: three full 1 MiB chunks and a short last one per transfer, so each sink's
  // worker and hasher hand chunks over while the loop receives the next.
  Meeting meeting;
  meeting.wait_for = 4; // no body before all four transfers are connected
  std::map<std::string, std::string> files;
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<fetch::Job> jobs;
  for (unsigned i = 0; i < 4; ++i) {
    const std::string name = "a" + std::to_string(i) + ".run";
    files[name] = random_bytes((3u << 20) + 1000 * i + 7, i);
    servers.push_back(std::make_unique<Server>(name, files[name], meeting));
    jobs.push_back({name, {servers.back()->url()}, util::sha256_of(files[name]).value(), files[name].size()});
  }
  Counter counter;
  auto report = fetch::download(jobs, options(dir), counter);
  REQUIRE(report.has_value());
  REQUIRE(report->results.size() == jobs.size());
  for (const auto& r : report->results) {
    INFO(r.name << ": " << r.error);
    CHECK(r.ok);
    CHECK_FALSE(r.from_cache);
    CHECK(test::slurp(r.path) == files[r.name]);
  }
  CHECK(meeting.most == 4);
  CHECK(counter.finished == 4);
  CHECK(counter.failed == 0);
}

TEST_CASE("download: a stop set from another thread ends every transfer and keeps its bytes") {
  const auto dir = test::scratch("downloader-stop");
  // Each 2 MiB body stops after 1.5 MiB until the end: the stop comes while all three run.
  Meeting meeting;
  meeting.hold_after = (3u << 20) / 2;
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<fetch::Job> jobs;
  for (unsigned i = 0; i < 3; ++i) {
    const std::string name = "b" + std::to_string(i) + ".run", body = random_bytes(2u << 20, 10 + i);
    servers.push_back(std::make_unique<Server>(name, body, meeting));
    jobs.push_back({name, {servers.back()->url()}, util::sha256_of(body).value(), body.size()});
  }
  std::atomic<bool> stop{false};
  auto opt = options(dir);
  opt.stop = &stop;
  opt.low_speed_seconds = 120; // the held transfers are not stalls while the stopper waits
  Counter counter;
  std::thread stopper([&] {
    // As the signal handler: set from outside the loop, once every transfer has received all
    // the server sends before holding (the loop's progress events say so).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(50);
    while (counter.at_least(meeting.hold_after) < 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stop = true;
  });
  auto report = fetch::download(jobs, opt, counter);
  stopper.join();
  meeting.released = true;
  CHECK(meeting.most == 3);
  REQUIRE(report.has_value());
  REQUIRE(report->results.size() == 3);
  for (const auto& r : report->results) {
    INFO(r.name << ": " << r.error);
    CHECK_FALSE(r.ok);
    CHECK(r.interrupted);
    CHECK(r.partial_bytes == meeting.hold_after); // every byte received is kept
  }
}

// The digest names the cache entry: a pin of 64 characters that are not hex ("../" repeated) would
// name a path outside the cache. Nothing is downloaded or written for it.
TEST_CASE("download: a pinned SHA-256 that is not 64 lower-case hex digits is refused before anything starts") {
  const auto dir = test::scratch("downloader-bad-pin");
  std::string dots;
  while (dots.size() < 63)
    dots += "../";
  dots.resize(64, 'x');
  for (const std::string& pin : {dots, std::string(64, 'A'), std::string(63, 'a') + "g"}) {
    INFO(pin);
    Counter counter;
    auto report = fetch::download({{"a.run", {"http://127.0.0.1:9/a.run"}, pin, 1}}, options(dir), counter);
    REQUIRE_FALSE(report.has_value());
    CHECK(report.error().message ==
          "a.run: its pinned SHA-256 is not 64 lower-case hex digits: refusing to download it");
    CHECK_FALSE(fs::exists(dir / "cache"));
  }
}
