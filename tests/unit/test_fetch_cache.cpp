// The content-addressed cache: publish and look up, quarantine, verify, list and gc, with the
// locks a download and a reader hold respected, and failures reported as they happened.
#include "fetch/cache.hpp"
#include "helpers.hpp"
#include "util/sha256.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <iterator>
#include <thread>

using namespace hpcbake;
using fetch::Cache;
namespace fs = std::filesystem;

namespace {

std::string sha_of(const std::string& s) {
  return util::sha256_of(s).value();
}

std::string fmt_name(int i) {
  return std::string(64 - std::to_string(i).size(), 'f') + std::to_string(i);
}

// Puts `content` into the cache the way a download does: .part, then publish.
std::string put(const Cache& cache, const std::string& content) {
  const std::string sha = sha_of(content);
  test::write(cache.part(sha), content);
  REQUIRE(cache.publish(sha).has_value());
  return sha;
}

// Holds flock(mode) on `path` while alive, through its own open file description, as another
// process would.
struct Held {
  Held(const fs::path& path, int mode) : fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, mode | LOCK_NB) == 0);
  }
  ~Held() { ::close(fd); }
  int fd;
};

} // namespace

TEST_CASE("cache: publish makes an entry that has() and list() see, and the sidecar goes") {
  Cache cache(test::scratch("cache-put"));
  REQUIRE(cache.ensure_layout().has_value());
  const std::string sha = sha_of("hello");
  CHECK_FALSE(cache.has(sha));
  test::write(cache.part(sha), "hello");
  REQUIRE(cache.write_sidecar(sha, {"https://example.invalid/x", "d", "\"etag\""}).has_value());
  REQUIRE(cache.read_sidecar(sha).has_value());
  CHECK(cache.read_sidecar(sha)->validator == "\"etag\"");
  REQUIRE(cache.publish(sha).has_value());
  CHECK(cache.has(sha));
  CHECK_FALSE(fs::exists(cache.part(sha)));
  CHECK_FALSE(fs::exists(cache.sidecar(sha)));
  const auto entries = cache.list();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].sha256 == sha);
  CHECK(entries[0].size == 5);
}

TEST_CASE("cache: quarantine moves the .part aside, one copy per digest, and a failed move is an error, not a path") {
  const auto dir = test::scratch("cache-quarantine");
  Cache cache(dir);
  REQUIRE(cache.ensure_layout().has_value());
  const std::string sha = sha_of("good");
  test::write(cache.part(sha), "bad bytes");
  auto first = cache.quarantine(sha);
  REQUIRE(first.has_value());
  CHECK(*first == dir / "quarantine" / (sha + ".download"));
  CHECK(test::slurp(*first) == "bad bytes");
  // Regression (issue 20): every failed run added a copy (.0, .1, ...): the newest replaces it.
  test::write(dir / "quarantine" / (sha + ".corrupt"), "an older copy, from cache verify");
  test::write(cache.part(sha), "bad again");
  CHECK(cache.quarantine(sha) == dir / "quarantine" / (sha + ".download"));
  CHECK(test::slurp(dir / "quarantine" / (sha + ".download")) == "bad again");
  CHECK(std::distance(fs::directory_iterator(dir / "quarantine"), fs::directory_iterator()) == 1);

  // Regression: the rename's failure was ignored and the caller told "kept in quarantine/".
  auto missing = cache.quarantine(sha); // no .part left to move
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message.find(cache.part(sha).string()) != std::string::npos);
  CHECK_FALSE(missing.error().hint.empty());
}

TEST_CASE("cache: quarantine keeps to its byte budget, oldest out, and says when a copy alone is too big") {
  const auto dir = test::scratch("cache-quarantine-budget");
  Cache cache(dir, 10);
  REQUIRE(cache.ensure_layout().has_value());
  const std::string a = sha_of("a"), b = sha_of("b"), c = sha_of("c");
  test::write(cache.part(a), "aaaa");
  REQUIRE(cache.quarantine(a).has_value());
  // An hour older than what comes next, whatever the file system's time stamp resolution.
  fs::last_write_time(dir / "quarantine" / (a + ".download"), fs::file_time_type::clock::now() - std::chrono::hours(1));
  test::write(cache.part(b), "bbbb");
  REQUIRE(cache.quarantine(b).has_value());
  test::write(cache.part(c), "cccc"); // 12 bytes in all: the oldest, a's, goes
  REQUIRE(cache.quarantine(c).has_value());
  CHECK_FALSE(fs::exists(dir / "quarantine" / (a + ".download")));
  CHECK(fs::exists(dir / "quarantine" / (b + ".download")));
  CHECK(fs::exists(dir / "quarantine" / (c + ".download")));
  test::write(cache.part(a), "more than ten bytes");
  auto too_big = cache.quarantine(a);
  REQUIRE_FALSE(too_big.has_value());
  CHECK(too_big.error().message.find("larger than the quarantine budget of 10 bytes") != std::string::npos);
  CHECK(too_big.error().hint.find("--quarantine-budget") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "quarantine" / (a + ".download")));
  CHECK_FALSE(fs::exists(cache.part(a)));
}

TEST_CASE("cache: check_entry hashes only an entry that changed, and quarantines a bad one") {
  const auto dir = test::scratch("cache-check-entry");
  Cache cache(dir);
  REQUIRE(cache.ensure_layout().has_value());
  const std::string sha = put(cache, "artifact");
  auto c = cache.check_entry(sha, 8);
  CHECK(c.ok);
  CHECK_FALSE(c.rehashed); // published, so recorded: the no-op path does not hash
  // Same bytes, a new mtime: hashed once, then trusted again.
  fs::last_write_time(cache.entry(sha), fs::file_time_type::clock::now() - std::chrono::hours(2));
  c = cache.check_entry(sha, std::nullopt);
  CHECK(c.ok);
  CHECK(c.rehashed);
  CHECK_FALSE(cache.check_entry(sha, std::nullopt).rehashed);
  // A size other than the pin: refused without hashing.
  c = cache.check_entry(sha, 9);
  CHECK_FALSE(c.ok);
  CHECK_FALSE(c.rehashed);
  CHECK(c.problem.find("it is 8 bytes, the pinned size is 9") != std::string::npos);
  CHECK(fs::exists(dir / "quarantine" / (sha + ".corrupt")));
  CHECK_FALSE(cache.has(sha));
  // Changed in place, same size: hashed, and moved out.
  const std::string other = put(cache, "original");
  test::write(cache.entry(other), "changed!");
  c = cache.check_entry(other, 8);
  CHECK_FALSE(c.ok);
  CHECK(c.rehashed);
  CHECK(c.problem.find("hashes to " + sha_of("changed!")) != std::string::npos);
  CHECK(c.problem.find("moved to " + (dir / "quarantine" / (other + ".corrupt")).string()) != std::string::npos);
  // An entry from before the records (none written): hashed on first use, recorded.
  const std::string legacy = sha_of("legacy");
  test::write(cache.entry(legacy), "legacy");
  c = cache.check_entry(legacy, std::nullopt);
  CHECK((c.ok && c.rehashed));
  CHECK_FALSE(cache.check_entry(legacy, std::nullopt).rehashed);
}

TEST_CASE("cache verify: a corrupt entry that cannot be moved is reported as still in place") {
  const auto dir = test::scratch("cache-verify-move-fails");
  Cache cache(dir);
  REQUIRE(cache.ensure_layout().has_value());
  const std::string good = put(cache, "fine");
  const std::string bad = put(cache, "was fine");
  test::write(cache.entry(bad), "rotted"); // the bytes no longer match the name
  // quarantine/ is a file: the rename into it fails (ENOTDIR), even for root.
  fs::remove_all(dir / "quarantine");
  test::write(dir / "quarantine", "not a directory");
  int verified = 0;
  const auto problems = cache.verify(&verified);
  CHECK(verified == 1);
  REQUIRE(problems.size() == 1);
  const auto& p = problems[0];
  CHECK(p.sha256 == bad);
  CHECK(p.actual == sha_of("rotted"));
  CHECK(p.moved_to.empty());
  CHECK_FALSE(p.move_error.empty());
  const std::string line = p.describe(cache.entry(bad));
  CHECK(line.find("NOT moved") != std::string::npos);
  CHECK(line.find("; moved to") == std::string::npos);
  CHECK(fs::exists(cache.entry(bad))); // still there, as reported
  CHECK(cache.has(good));
}

TEST_CASE("cache verify: a corrupt entry is moved to quarantine and says so") {
  const auto dir = test::scratch("cache-verify-moves");
  Cache cache(dir);
  REQUIRE(cache.ensure_layout().has_value());
  const std::string bad = put(cache, "original");
  test::write(cache.entry(bad), "changed");
  const auto problems = cache.verify();
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].moved_to == dir / "quarantine" / (bad + ".corrupt"));
  CHECK(problems[0].describe(cache.entry(bad)).find("moved to " + problems[0].moved_to.string()) != std::string::npos);
  CHECK_FALSE(fs::exists(cache.entry(bad)));
}

TEST_CASE("cache gc: skips a .part a download holds and an entry a reader holds, and says so") {
  const auto dir = test::scratch("cache-gc-locks");
  Cache cache(dir);
  REQUIRE(cache.ensure_layout().has_value());
  const std::string kept = put(cache, "pinned");
  const std::string read = put(cache, "being read");
  const std::string unused = put(cache, "unused");
  const std::string busy = sha_of("downloading");
  const std::string idle = sha_of("abandoned");
  test::write(cache.part(busy), "downlo");
  test::write(cache.sidecar(busy), "{}");
  test::write(cache.part(idle), "aband");
  test::write(cache.sidecar(idle), "{}");
  test::write(dir / "quarantine" / "x.0", "junk");

  const Held download(cache.part(busy), LOCK_EX); // as fetch holds its .part
  auto reader = cache.lock_entry_shared(read);    // as bundle create (and install) hold an entry
  REQUIRE(reader.has_value());

  const auto r = cache.gc({kept});
  CHECK(fs::exists(cache.part(busy)));
  CHECK(fs::exists(cache.sidecar(busy)));
  CHECK(fs::exists(cache.entry(read)));
  CHECK_FALSE(fs::exists(cache.part(idle)));
  CHECK_FALSE(fs::exists(cache.sidecar(idle)));
  CHECK_FALSE(fs::exists(cache.entry(unused)));
  CHECK_FALSE(fs::exists(dir / "quarantine" / "x.0"));
  CHECK(cache.has(kept));
  CHECK(r.removed == 4);
  REQUIRE(r.skipped.size() == 3);
  for (const auto& s : r.skipped) {
    CAPTURE(s.path);
    CHECK(s.reason.find("skipped") != std::string::npos);
  }

  reader->reset(); // the reader is done: the next gc may take it
  const auto again = cache.gc({kept});
  CHECK_FALSE(fs::exists(cache.entry(read)));
  CHECK(again.skipped.size() == 2); // the download still runs
}

TEST_CASE("cache list: entries changing underneath never throw") {
  // Regression: list() used the throwing directory_entry overloads, and `cache list` died with
  // "internal error" when a fetch or gc beside it removed a file between readdir and stat.
  const auto dir = test::scratch("cache-list-churn");
  Cache cache(dir);
  REQUIRE(cache.ensure_layout().has_value());
  for (int i = 0; i < 20; ++i)
    put(cache, "stable " + std::to_string(i));
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int i = 0; !stop; ++i) {
      const fs::path p = dir / "sha256" / fmt_name(i % 50);
      test::write(p, "x");
      std::error_code ec;
      fs::remove(p, ec);
    }
  });
  for (int i = 0; i < 300; ++i) {
    std::vector<fetch::ListProblem> problems;
    std::vector<fetch::CacheEntry> entries;
    CHECK_NOTHROW(entries = cache.list(&problems));
    CHECK(entries.size() >= 20);
  }
  stop = true;
  churn.join();
}
