// Offline bundles: create then read back into another cache, a tampered member refused by
// name, jobs sharing a SHA-256 each getting a result, and files changing underneath reported.
#include "fetch/bundle.hpp"
#include "helpers.hpp"
#include "util/sha256.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

using namespace hpcbake;
using namespace hpcbake::fetch;
namespace fs = std::filesystem;

namespace {

struct Quiet : Observer {
  void on_event(const Event&) override {}
};

std::string sha_of(const std::string& s) {
  return util::sha256_of(s).value();
}

std::string put(const Cache& cache, const std::string& content) {
  const std::string sha = sha_of(content);
  test::write(cache.part(sha), content);
  REQUIRE(cache.publish(sha).has_value());
  return sha;
}

// A manifest set as bundle create expects: manifests/ and drivers/ beside it.
fs::path manifest_set(const fs::path& base) {
  test::write(base / "manifests" / "sizes.yaml", "sizes: []\n");
  test::write(base / "drivers" / "nvidia.yaml", "kind: recipe\n");
  return base / "manifests";
}

// A bundle written by hand: an index, and members whose bytes need not match their names.
void write_tar(const fs::path& out, const std::vector<std::pair<std::string, std::string>>& members) {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  REQUIRE(archive_write_open_filename(a, out.c_str()) == ARCHIVE_OK);
  for (const auto& [name, data] : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    REQUIRE(archive_write_header(a, e) == ARCHIVE_OK);
    REQUIRE(archive_write_data(a, data.data(), data.size()) == static_cast<la_ssize_t>(data.size()));
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

} // namespace

TEST_CASE("bundle: create, then fetch from it into an empty cache") {
  const auto dir = test::scratch("bundle-roundtrip");
  Cache from(dir / "cache-a");
  REQUIRE(from.ensure_layout().has_value());
  const std::string a = put(from, "artifact A");
  const std::string b = put(from, "artifact B");
  const std::vector<Job> jobs = {{"a.run", {}, a, 10}, {"b.tar", {}, b, {}}};
  REQUIRE(create_bundle(dir / "out.tar", jobs, from, manifest_set(dir / "set")).has_value());
  CHECK(fs::exists(dir / "out.tar"));
  CHECK_FALSE(fs::exists(dir / "out.tar.tmp"));

  Cache to(dir / "cache-b");
  Quiet quiet;
  auto rep = fetch_from_bundle(dir / "out.tar", jobs, to, quiet);
  REQUIRE(rep.has_value());
  REQUIRE(rep->results.size() == 2);
  CHECK(rep->ok());
  CHECK(test::slurp(to.entry(a)) == "artifact A");
  CHECK(test::slurp(to.entry(b)) == "artifact B");
}

TEST_CASE("bundle: a tampered member is refused by name and never reaches the cache") {
  const auto dir = test::scratch("bundle-tampered");
  const std::string sha = sha_of("the real bytes");
  write_tar(dir / "evil.tar",
            {{"index.json", R"({"schema":1,"artifacts":[{"name":"driver.run","sha256":")" + sha + R"(","size":14}]})"},
             {"artifacts/" + sha, "evil bytes!!!!"}});
  Cache cache(dir / "cache");
  Quiet quiet;
  auto rep = fetch_from_bundle(dir / "evil.tar", {{"driver.run", {}, sha, 14}}, cache, quiet);
  REQUIRE(rep.has_value());
  REQUIRE(rep->results.size() == 1);
  CHECK_FALSE(rep->results[0].ok);
  CHECK(rep->results[0].error.find("driver.run") != std::string::npos);
  CHECK(rep->results[0].error.find("tampered or corrupt") != std::string::npos);
  CHECK_FALSE(cache.has(sha));
  CHECK_FALSE(fs::exists(cache.part(sha)));
}

TEST_CASE("bundle and download: jobs that share a SHA-256 each get a result") {
  // Regression: jobs were deduplicated by digest and the later ones got no result at all.
  const auto dir = test::scratch("bundle-twins");
  Cache from(dir / "cache-a");
  REQUIRE(from.ensure_layout().has_value());
  const std::string sha = put(from, "same bytes");
  const std::vector<Job> jobs = {{"first.run", {}, sha, {}}, {"second.run", {}, sha, {}}};
  REQUIRE(create_bundle(dir / "out.tar", jobs, from, manifest_set(dir / "set")).has_value());
  Cache to(dir / "cache-b");
  Quiet quiet;
  auto rep = fetch_from_bundle(dir / "out.tar", jobs, to, quiet);
  REQUIRE(rep.has_value());
  REQUIRE(rep->results.size() == 2);
  CHECK(rep->results[0].name == "first.run");
  CHECK(rep->results[1].name == "second.run");
  for (const auto& r : rep->results)
    CHECK(r.ok);

  // The rule itself, as the downloader applies it after its loop.
  std::vector<JobResult> results = {{"first.run", sha, to.entry(sha), true, false, 10, {}}};
  give_twins_results(jobs, results);
  REQUIRE(results.size() == 2);
  CHECK(results[1].name == "second.run");
  CHECK(results[1].ok);
  CHECK(results[1].bytes_transferred == 0);
  // Two jobs of one name and digest (one artifact in two variants) are two jobs too.
  std::vector<JobResult> once = {{"x", sha, {}, true, false, 0, {}}};
  give_twins_results({{"x", {}, sha, {}}, {"x", {}, sha, {}}}, once);
  CHECK(once.size() == 2);
}

TEST_CASE("bundle create: an entry that vanishes is an error naming it, never an exception") {
  // Regression: fs::file_size threw, and `bundle create` died with "internal error".
  const auto dir = test::scratch("bundle-vanish");
  Cache cache(dir / "cache");
  REQUIRE(cache.ensure_layout().has_value());
  const auto set = manifest_set(dir / "set");
  std::vector<Job> jobs;
  for (int i = 0; i < 30; ++i)
    jobs.push_back({"f" + std::to_string(i), {}, put(cache, "file " + std::to_string(i)), {}});
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int i = 0; !stop; ++i) {
      const auto& j = jobs[static_cast<std::size_t>(i) % jobs.size()];
      std::error_code ec;
      fs::remove(cache.entry(j.sha256), ec);
      test::write(cache.entry(j.sha256), "file " + j.name.substr(1));
    }
  });
  // Whether a run fails depends on timing; what matters is that none throws and every failure
  // says what and what to do.
  for (int i = 0; i < 40; ++i) {
    Status s;
    CHECK_NOTHROW(s = create_bundle(dir / "out.tar", jobs, cache, set));
    if (!s) {
      CHECK_FALSE(s.error().message.empty());
      CHECK_FALSE(s.error().hint.empty());
    }
  }
  stop = true;
  churn.join();
}
