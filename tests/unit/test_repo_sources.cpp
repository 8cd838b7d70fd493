#include "repo/sources.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;

namespace {

manifest::RepositoryManifest vendor_repo() {
  manifest::RepositoryManifest r;
  r.id = "vendor";
  r.file = "repositories/vendor.yaml";
  r.description = "Vendor packages";
  manifest::RepositoryVariant v;
  v.distros = {"debian-12"};
  v.uri = "https://repo.example.invalid/debian12/x86_64/";
  v.suite = "/";
  v.key.urls = {"https://repo.example.invalid/key.pub"};
  v.key.fingerprint = "C607052566F81BB2813915641787F05C5250046E";
  r.variants.push_back(v);
  return r;
}

} // namespace

TEST_CASE("sources: apt gets a deb822 file whose Signed-By is the pinned key alone") {
  const auto r = vendor_repo();
  auto f = repo::source_files(r, r.variants[0], manifest::PackageManager::apt);
  REQUIRE(f);
  CHECK(f->key_path == "/usr/share/keyrings/hpcbake-vendor.gpg");
  CHECK(f->source_path == "/etc/apt/sources.list.d/hpcbake-vendor.sources");
  CHECK(f->source.find("Types: deb\nURIs: https://repo.example.invalid/debian12/x86_64/\nSuites: /\n"
                       "Signed-By: /usr/share/keyrings/hpcbake-vendor.gpg\n") != std::string::npos);
  auto v = r.variants[0];
  v.suite = "bookworm";
  v.components = {"main", "contrib"};
  auto suite = repo::source_files(r, v, manifest::PackageManager::apt);
  REQUIRE(suite);
  CHECK(suite->source.find("Suites: bookworm\nComponents: main contrib\n") != std::string::npos);
}

TEST_CASE("sources: dnf gets a .repo with gpgcheck and the pinned key file") {
  auto r = vendor_repo();
  r.variants[0].repo_gpgcheck = true;
  auto f = repo::source_files(r, r.variants[0], manifest::PackageManager::dnf);
  REQUIRE(f);
  CHECK(f->key_path == "/etc/pki/rpm-gpg/RPM-GPG-KEY-hpcbake-vendor");
  CHECK(f->source_path == "/etc/yum.repos.d/hpcbake-vendor.repo");
  CHECK(f->source.find(
            "[hpcbake-vendor]\nname=Vendor packages\nbaseurl=https://repo.example.invalid/debian12/x86_64/\n"
            "enabled=1\ngpgcheck=1\nrepo_gpgcheck=1\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-hpcbake-vendor\n") !=
        std::string::npos);
}

TEST_CASE("sources: a value that would add a line or a field is refused") {
  auto r = vendor_repo();
  r.variants[0].uri = "https://repo.example.invalid/\nSigned-By: /tmp/evil.gpg";
  CHECK_FALSE(repo::source_files(r, r.variants[0], manifest::PackageManager::apt));
  r = vendor_repo();
  r.variants[0].uri = "http://repo.example.invalid/";
  CHECK_FALSE(repo::source_files(r, r.variants[0], manifest::PackageManager::apt));
  r = vendor_repo();
  r.variants[0].suite = "bookworm main";
  CHECK_FALSE(repo::source_files(r, r.variants[0], manifest::PackageManager::apt));
  r = vendor_repo();
  r.id = "a]\n[b";
  CHECK_FALSE(repo::source_files(r, r.variants[0], manifest::PackageManager::dnf));
  r = vendor_repo();
  r.description = "multi\nline";
  auto f = repo::source_files(r, r.variants[0], manifest::PackageManager::dnf);
  REQUIRE(f); // free text is flattened, never a new line
  CHECK(f->source.find("name=multi line\n") != std::string::npos);
  r = vendor_repo();
  r.variants[0].key.fingerprint.clear();
  CHECK_FALSE(repo::source_files(r, r.variants[0], manifest::PackageManager::apt));
}

TEST_CASE("apt preferences: each name=version package at exactly its version, the rest left to the repository") {
  auto p = repo::apt_preferences("nvidia-dcgm", "nvidia-cuda",
                                 {"datacenter-gpu-manager-4-core=1:4.5.2-1", "nvidia-open", "=1.0",
                                  "bad=", "datacenter-gpu-manager-4-cuda13=1:4.5.2-1"});
  REQUIRE(p);
  CHECK(p->path == "/etc/apt/preferences.d/hpcbake-nvidia-dcgm.pref");
  CHECK(p->content == "# Written by hpcbake: nvidia-dcgm from the nvidia-cuda repository, each package at exactly "
                      "its pinned\n# version.\n"
                      "\nPackage: datacenter-gpu-manager-4-core\nPin: version 1:4.5.2-1\nPin-Priority: 1001\n"
                      "\nPackage: datacenter-gpu-manager-4-cuda13\nPin: version 1:4.5.2-1\nPin-Priority: 1001\n");
  // Nothing with a version: no file (nvidia-driver-pinning-<version> ships its own preferences).
  CHECK_FALSE(
      repo::apt_preferences("nvidia-cuda-driver", "nvidia-cuda", {"nvidia-driver-pinning-580.126.16", "nvidia-open"}));
  // A value that would add a field or a line is never written.
  CHECK_FALSE(repo::apt_preferences("x", "r", {"a=1\nPin-Priority: -1"}));
  CHECK_FALSE(repo::apt_preferences("x y", "r", {"a=1"}));
  CHECK_FALSE(repo::apt_preferences("x+y", "r", {"a=1"})); // apt skips a file named hpcbake-x+y.pref
}

// NVIDIA's container toolkit rpm repository signs repomd.xml, not its packages
// (NVIDIA/libnvidia-container@0ae7307 stable/rpm/nvidia-container-toolkit.repo: repo_gpgcheck=1,
// gpgcheck=0): where the manifest says so, the .repo says exactly that, and why, and nothing else.
TEST_CASE("sources: signatures metadata gives repo_gpgcheck=1 and gpgcheck=0 with the pinned key, and says why") {
  auto r = vendor_repo();
  r.variants[0].metadata_only = true;
  r.variants[0].metadata_only_source = "the vendor's .repo file";
  auto f = repo::source_files(r, r.variants[0], manifest::PackageManager::dnf);
  REQUIRE(f);
  CHECK(f->source.find("enabled=1\ngpgcheck=0\nrepo_gpgcheck=1\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-hpcbake-"
                       "vendor\n") != std::string::npos);
  CHECK(f->source.find("# The vendor signs repomd.xml, not its packages") != std::string::npos);
  // Without the manifest's word there is no gpgcheck=0: the default checks every package.
  auto plain = vendor_repo();
  auto g = repo::source_files(plain, plain.variants[0], manifest::PackageManager::dnf);
  REQUIRE(g);
  CHECK(g->source.find("gpgcheck=1\nrepo_gpgcheck=0\n") != std::string::npos);
  CHECK(g->source.find("\ngpgcheck=0") == std::string::npos);
  // Never without its source, never for apt (whose InRelease is signed anyway).
  r.variants[0].metadata_only_source.clear();
  CHECK_FALSE(repo::source_files(r, r.variants[0], manifest::PackageManager::dnf));
  r.variants[0].metadata_only_source = "s";
  auto apt = repo::source_files(r, r.variants[0], manifest::PackageManager::apt);
  REQUIRE_FALSE(apt);
  CHECK(apt.error().message.find("signatures: metadata is a dnf setting") != std::string::npos);
}
