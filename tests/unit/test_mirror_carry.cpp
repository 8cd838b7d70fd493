#include "mirror/carry.hpp"
#include "recording_runner.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

using namespace hpcbake;

namespace {

using manifest::PackageManager;

// Counts requests and answers none: a snapshot that reached the network would show here.
class NoHttp final : public util::HttpClient {
public:
  Result<util::HttpResponse> get(const util::HttpRequest& request) override {
    urls.push_back(request.url);
    return fail(ErrorKind::fetch, "no network in this test: " + request.url);
  }
  std::vector<std::string> urls;
};

class NoEvents final : public fetch::Observer {
public:
  void on_event(const fetch::Event&) override { ++events; }
  int events = 0;
};

plan::Plan plan_with_repository(const std::string& arch, const std::string& uri) {
  plan::Plan p;
  p.size = "Standard_Test_v1";
  p.distro_id = "ubuntu-24.04";
  p.arch = arch;
  plan::RepositoryStep r;
  r.repository = "nvidia-cuda";
  r.manager = PackageManager::apt;
  r.uri = uri;
  r.key_urls = {uri + "key.asc"};
  r.suite = "/";
  p.steps.push_back({"repository:nvidia-cuda", "NVIDIA CUDA repository", {}, r});
  return p;
}

} // namespace

TEST_CASE("mirror: a plan's architecture by Debian's names for apt, rpm's for dnf and tdnf") {
  struct Case {
    PackageManager manager;
    const char* arch;
    const char* name;
  };
  for (const auto& c :
       {Case{PackageManager::apt, "x86_64", "amd64"}, Case{PackageManager::apt, "aarch64", "arm64"},
        Case{PackageManager::dnf, "x86_64", "x86_64"}, Case{PackageManager::dnf, "aarch64", "aarch64"},
        Case{PackageManager::tdnf, "x86_64", "x86_64"}, Case{PackageManager::tdnf, "aarch64", "aarch64"}}) {
    CAPTURE(manifest::to_string(c.manager));
    CAPTURE(c.arch);
    auto got = mirror::package_arch(c.manager, c.arch, "the plan");
    REQUIRE(got);
    CHECK(*got == c.name);
  }
}

TEST_CASE("mirror: another architecture is refused, naming where, what and the two there are") {
  // Debian's and rpm's own names are not plan architectures either: a plan says uname -m's.
  for (const char* arch : {"ppc64le", "riscv64", "arm64", "amd64", "", "X86_64"}) {
    CAPTURE(arch);
    for (const auto m : {PackageManager::apt, PackageManager::dnf}) {
      auto got = mirror::package_arch(m, arch, "repository nvidia-cuda of the plan for Standard_X on ubuntu-24.04");
      REQUIRE_FALSE(got);
      CHECK(got.error().kind == ErrorKind::unsupported);
      const std::string& msg = got.error().message;
      CHECK(msg.starts_with("repository nvidia-cuda of the plan for Standard_X on ubuntu-24.04: "));
      CHECK(msg.find(std::string("'") + arch + "'") != std::string::npos);
      CHECK(msg.find(std::string(manifest::to_string(m)) + " repositories for x86_64 and aarch64") !=
            std::string::npos);
      CHECK(got.error().hint.find("manifests/sizes/") != std::string::npos);
      CHECK(got.error().hint.find("arch: aarch64") != std::string::npos);
    }
  }
}

TEST_CASE("mirror: carry_repositories refuses a plan's architecture before any download") {
  NoHttp http;
  exec::RecordingRunner runner;
  NoEvents observer;
  fetch::Options fo;
  fo.cache_dir = "/nonexistent/hpcbake-test-cache";
  auto got =
      mirror::carry_repositories(plan_with_repository("ppc64le", "https://repo.invalid/"), http, runner, fo, observer);
  REQUIRE_FALSE(got);
  CHECK(got.error().kind == ErrorKind::unsupported);
  CHECK(got.error().message.find("repository nvidia-cuda of the plan for Standard_Test_v1 on ubuntu-24.04") == 0);
  CHECK(http.urls.empty());
  CHECK(runner.calls.empty());
  CHECK(observer.events == 0);
}

TEST_CASE("mirror: carry_repositories leaves a repository on the node's disk alone, whatever the architecture") {
  NoHttp http;
  exec::RecordingRunner runner;
  NoEvents observer;
  fetch::Options fo;
  fo.cache_dir = "/nonexistent/hpcbake-test-cache";
  auto got =
      mirror::carry_repositories(plan_with_repository("ppc64le", "file:///srv/repo/"), http, runner, fo, observer);
  REQUIRE(got);
  CHECK(got->jobs.empty());
  CHECK(got->index.empty());
  CHECK(http.urls.empty());
}

TEST_CASE("mirror: carry_repositories says so when TMPDIR is no directory, and fetches nothing") {
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", "/nonexistent/hpcbake-test-tmpdir", 1);
  NoHttp http;
  exec::RecordingRunner runner;
  NoEvents observer;
  fetch::Options fo;
  fo.cache_dir = "/nonexistent/hpcbake-test-cache";
  auto got =
      mirror::carry_repositories(plan_with_repository("aarch64", "https://repo.invalid/"), http, runner, fo, observer);
  if (old)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  REQUIRE_FALSE(got);
  CHECK(got.error().message.find("TMPDIR=/nonexistent/hpcbake-test-tmpdir") != std::string::npos);
  CHECK(got.error().hint.find("TMPDIR") != std::string::npos);
  CHECK(http.urls.empty());
}
