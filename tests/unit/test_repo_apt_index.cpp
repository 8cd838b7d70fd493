#include "repo/apt_index.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace hpcbake;

namespace {

// A Packages index in the shape of NVIDIA's flat CUDA repository: a pinning package, two driver
// versions, a virtual package, a dependency on the distribution (libc6), a Breaks.
const char* kPackages = R"(Package: nvidia-driver-pinning-580.126.16
Version: 580.126.16-1
Architecture: all
Filename: ./nvidia-driver-pinning-580.126.16_580.126.16-1_all.deb
Size: 1000
SHA256: 1111111111111111111111111111111111111111111111111111111111111111

Package: nvidia-open
Version: 580.126.16-1
Architecture: amd64
Depends: nvidia-kernel-open (= 580.126.16-1), libnvidia-compute (= 580.126.16-1), libc6 (>= 2.34)
Filename: ./nvidia-open_580.126.16-1_amd64.deb
Size: 2000
SHA256: 2222222222222222222222222222222222222222222222222222222222222222

Package: nvidia-open
Version: 580.126.20-1
Architecture: amd64
Depends: nvidia-kernel-open (= 580.126.20-1), libnvidia-compute (= 580.126.20-1)
Filename: ./nvidia-open_580.126.20-1_amd64.deb
Size: 2000
SHA256: 3333333333333333333333333333333333333333333333333333333333333333

Package: nvidia-kernel-open
Version: 580.126.16-1
Architecture: amd64
Pre-Depends: dkms | hpcbake-no-such-alternative
Provides: nvidia-kernel-open-580
Filename: ./nvidia-kernel-open_580.126.16-1_amd64.deb
Size: 3000
SHA256: 4444444444444444444444444444444444444444444444444444444444444444

Package: nvidia-kernel-open
Version: 580.126.20-1
Architecture: amd64
Filename: ./nvidia-kernel-open_580.126.20-1_amd64.deb
Size: 3000
SHA256: 5555555555555555555555555555555555555555555555555555555555555555

Package: libnvidia-compute
Version: 580.126.16-1
Architecture: amd64
Breaks: nvidia-fabricmanager (<< 580.126.16)
Filename: ./libnvidia-compute_580.126.16-1_amd64.deb
Size: 4000
SHA256: 6666666666666666666666666666666666666666666666666666666666666666

Package: libnvidia-compute
Version: 580.126.20-1
Architecture: amd64
Filename: ./libnvidia-compute_580.126.20-1_amd64.deb
Size: 4000
SHA256: 7777777777777777777777777777777777777777777777777777777777777777

Package: nvidia-fabricmanager
Version: 580.126.09-1
Architecture: amd64
Filename: ./nvidia-fabricmanager_580.126.09-1_amd64.deb
Size: 5000
SHA256: 8888888888888888888888888888888888888888888888888888888888888888

Package: cuda-arm64-only
Version: 1.0
Architecture: arm64
Filename: ./cuda-arm64-only_1.0_arm64.deb
Size: 1
SHA256: 9999999999999999999999999999999999999999999999999999999999999999
)";

std::vector<repo::Package> index() {
  auto p = repo::parse_packages(kPackages, "amd64", "Packages");
  REQUIRE_MESSAGE(p, (p ? std::string() : p.error().message));
  return *p;
}

std::vector<std::string> chosen(const repo::Resolution& r) {
  std::vector<std::string> out;
  for (const auto& p : r.selected)
    out.push_back(p.name + "=" + p.version);
  return out;
}

} // namespace

TEST_CASE("debian versions: dpkg's order (epoch, ~, letters before symbols, revision)") {
  using repo::compare_debian_versions;
  CHECK(compare_debian_versions("1.0~rc1", "1.0") < 0);
  CHECK(compare_debian_versions("1.0", "1.0+b1") < 0);
  CHECK(compare_debian_versions("1:1.0", "2.0") > 0);
  CHECK(compare_debian_versions("580.126.16-1", "580.126.9-1") > 0);
  CHECK(compare_debian_versions("580.126.16-1", "580.126.16-1") == 0);
  CHECK(compare_debian_versions("1.0-1", "1.0-1ubuntu1") < 0);
  CHECK(compare_debian_versions("1.0a", "1.0+") < 0);
  CHECK(compare_debian_versions("1:4.5.2-1", "1:4.6.0-1") < 0);
  CHECK(compare_debian_versions("0001.0", "1.0") == 0);
  CHECK(compare_debian_versions("1.0~~", "1.0~") < 0);
}

TEST_CASE("release files: the SHA256 list, relative to the Release") {
  auto f = repo::release_files("Origin: NVIDIA\nSHA256:\n " + std::string(64, 'a') + " 12 Packages\n " +
                                   std::string(64, 'B') + " 5 Packages.gz\nSHA512:\n x 1 y\n",
                               "InRelease");
  REQUIRE(f);
  REQUIRE(f->size() == 2);
  CHECK((*f)[0].path == "Packages");
  CHECK((*f)[0].size == 12);
  CHECK((*f)[1].sha256 == std::string(64, 'b'));
  CHECK_FALSE(repo::release_files("Origin: x\nMD5Sum:\n abc 1 Packages\n", "InRelease"));
  CHECK_FALSE(repo::release_files("SHA256:\n nothex 1 Packages\n", "InRelease"));
}

TEST_CASE("packages index: this architecture and all, relations, a path that leaves the repository is refused") {
  auto p = index();
  CHECK(p.size() == 8); // the arm64 package is not for amd64
  CHECK(p[0].filename == "nvidia-driver-pinning-580.126.16_580.126.16-1_all.deb");
  CHECK(p[1].depends.size() == 3);
  CHECK(p[1].depends[0][0].text() == "nvidia-kernel-open (= 580.126.16-1)");
  CHECK(p[3].depends[0].size() == 2); // dkms | hpcbake-no-such-alternative
  CHECK(p[5].conflicts[0].text() == "nvidia-fabricmanager (<< 580.126.16)");
  for (const char* bad : {"../../etc/passwd", "/abs.deb", "a/../b.deb", "a b.deb"}) {
    const std::string text = std::string("Package: x\nVersion: 1\nArchitecture: all\nFilename: ") + bad +
                             "\nSize: 1\nSHA256: " + std::string(64, '1') + "\n";
    auto r = repo::parse_packages(text, "amd64", "Packages");
    CHECK_FALSE(r);
    if (!r) CHECK(r.error().message.find("not a relative path inside the repository") != std::string::npos);
  }
  CHECK_FALSE(repo::parse_packages("Package: x\nVersion: 1\nArchitecture: all\nFilename: x.deb\n", "amd64", "P"));
  auto rel = repo::parse_relations("a:any (>= 1.0) | b [amd64], c (<< 2)", "t");
  REQUIRE(rel);
  CHECK((*rel)[0][0].name == "a");
  CHECK((*rel)[0][1].name == "b");
  CHECK((*rel)[1][0].op == "<<");
  CHECK_FALSE(repo::parse_relations("a (~= 1)", "t"));
}

TEST_CASE("preferences: version pins kept, release and origin pins left out") {
  auto pins =
      repo::parse_preferences("Package: nvidia-open* libnvidia-*\nPin: version 580.126.16*\nPin-Priority: 1000\n\n"
                              "Package: *\nPin: origin developer.download.nvidia.com\nPin-Priority: 600\n");
  REQUIRE(pins.size() == 1);
  CHECK(pins[0].packages.size() == 2);
  CHECK(pins[0].version == "580.126.16*");
  CHECK(pins[0].priority == 1000);
}

TEST_CASE("preferences files: only the names apt reads") {
  CHECK(repo::apt_reads_preferences_file("nvidia-driver-pinning"));
  CHECK(repo::apt_reads_preferences_file("nvidia-driver-pinning-580.pref"));
  CHECK(repo::apt_reads_preferences_file("hpcbake-nvidia-fabricmanager.pref"));
  CHECK_FALSE(repo::apt_reads_preferences_file("nvidia-driver-pinning-580.126.16")); // extension "16"
  CHECK_FALSE(repo::apt_reads_preferences_file("pins.conf"));
  CHECK_FALSE(repo::apt_reads_preferences_file("a b"));
  CHECK_FALSE(repo::apt_reads_preferences_file(".pref"));
}

TEST_CASE("resolve: without pins apt takes the newest, and the pinning package's preferences keep the pinned branch") {
  const auto idx = index();
  auto newest = repo::resolve(idx, {"nvidia-open"}, {}, nullptr);
  REQUIRE(newest);
  CHECK(chosen(*newest) == std::vector<std::string>{"nvidia-open=580.126.20-1", "nvidia-kernel-open=580.126.20-1",
                                                    "libnvidia-compute=580.126.20-1"});
  // The pinning package ships preferences (read by `inspect` as it is chosen): what follows honors them.
  int inspected = 0;
  auto inspect = [&](const repo::Package& p) -> Result<std::vector<repo::Pin>> {
    ++inspected;
    if (p.name.starts_with("nvidia-driver-pinning-"))
      return repo::parse_preferences("Package: nvidia-open libnvidia-compute nvidia-kernel-open\n"
                                     "Pin: version 580.126.16-1\nPin-Priority: 1000\n");
    return std::vector<repo::Pin>{};
  };
  auto pinned = repo::resolve(idx, {"nvidia-driver-pinning-580.126.16", "nvidia-open"}, {}, inspect);
  REQUIRE(pinned);
  CHECK(chosen(*pinned) == std::vector<std::string>{"nvidia-driver-pinning-580.126.16=580.126.16-1",
                                                    "nvidia-open=580.126.16-1", "nvidia-kernel-open=580.126.16-1",
                                                    "libnvidia-compute=580.126.16-1"});
  CHECK(inspected == 4);
  // What the repository does not have is left to the distribution, by relation.
  CHECK(pinned->other == std::vector<std::string>{"dkms | hpcbake-no-such-alternative", "libc6 (>= 2.34)"});
}

TEST_CASE("resolve: exact requests, a version the repository lacks, a Breaks, a conflict between pins") {
  const auto idx = index();
  auto exact = repo::resolve(idx, {"libnvidia-compute=580.126.16-1"}, {}, nullptr);
  REQUIRE(exact);
  CHECK(chosen(*exact) == std::vector<std::string>{"libnvidia-compute=580.126.16-1"});

  auto gone = repo::resolve(idx, {"nvidia-open=580.126.99-1"}, {}, nullptr);
  REQUIRE_FALSE(gone);
  CHECK(gone.error().message == "the repository has no nvidia-open (= 580.126.99-1) that can be installed (it has "
                                "580.126.16-1, 580.126.20-1)");
  CHECK_FALSE(repo::resolve(idx, {"no-such-package"}, {}, nullptr));

  // libnvidia-compute 580.126.16-1 Breaks nvidia-fabricmanager (<< 580.126.16): the only one there.
  auto broken = repo::resolve(idx, {"libnvidia-compute=580.126.16-1", "nvidia-fabricmanager"}, {}, nullptr);
  CHECK_FALSE(broken);

  // nvidia-open 580.126.20-1 needs nvidia-kernel-open 580.126.20-1, but 580.126.16-1 is chosen.
  auto clash = repo::resolve(idx, {"nvidia-kernel-open=580.126.16-1", "nvidia-open=580.126.20-1"}, {}, nullptr);
  REQUIRE_FALSE(clash);
  CHECK(clash.error().message.find("already chosen") != std::string::npos);

  // A virtual package, from its provider; a negative priority never installs.
  auto virt = repo::resolve(idx, {"nvidia-kernel-open-580"}, {}, nullptr);
  REQUIRE(virt);
  CHECK(chosen(*virt) == std::vector<std::string>{"nvidia-kernel-open=580.126.16-1"});
  auto never = repo::resolve(
      idx, {"nvidia-fabricmanager"},
      repo::parse_preferences("Package: nvidia-fabricmanager\nPin: version *\nPin-Priority: -1\n"), nullptr);
  CHECK_FALSE(never);
}

TEST_CASE(
    "resolve: versioned provides, two relations on one name, the next alternative, a known package that cannot fit") {
  auto idx = repo::parse_packages(R"(Package: fm
Version: 2.0-1
Architecture: all
Depends: kmod-a (>= 1.0), kmod-a (<< 2.0), virt (= 5), lib (= 9) | lib-alt
Filename: fm.deb
Size: 1
SHA256: 1111111111111111111111111111111111111111111111111111111111111111

Package: kmod-a
Version: 1.5
Architecture: all
Filename: a15.deb
Size: 1
SHA256: 2222222222222222222222222222222222222222222222222222222222222222

Package: kmod-a
Version: 2.5
Architecture: all
Filename: a25.deb
Size: 1
SHA256: 3333333333333333333333333333333333333333333333333333333333333333

Package: provider
Version: 1
Architecture: all
Provides: virt (= 5)
Filename: p.deb
Size: 1
SHA256: 4444444444444444444444444444444444444444444444444444444444444444

Package: lib
Version: 8
Architecture: all
Filename: lib8.deb
Size: 1
SHA256: 5555555555555555555555555555555555555555555555555555555555555555

Package: lib-alt
Version: 1
Architecture: all
Filename: libalt.deb
Size: 1
SHA256: 6666666666666666666666666666666666666666666666666666666666666666

Package: needs-old-kmod
Version: 1
Architecture: all
Depends: kmod-a (= 2.5)
Filename: n.deb
Size: 1
SHA256: 7777777777777777777777777777777777777777777777777777777777777777
)",
                                  "amd64", "Packages");
  REQUIRE(idx);
  auto r = repo::resolve(*idx, {"fm"}, {}, nullptr);
  REQUIRE(r);
  // kmod-a fits both relations only at 1.5; virt (= 5) comes from its provider; lib 8 does not
  // fit (= 9), so the next alternative is taken.
  CHECK(chosen(*r) == std::vector<std::string>{"fm=2.0-1", "kmod-a=1.5", "provider=1", "lib-alt=1"});
  CHECK(r->other.empty());
  // kmod-a is chosen at 1.5; another package needing 2.5 of it cannot be met: an error naming it.
  auto clash = repo::resolve(*idx, {"fm", "needs-old-kmod"}, {}, nullptr);
  REQUIRE_FALSE(clash);
  CHECK(clash.error().message.find("needs-old-kmod 1 needs kmod-a (= 2.5) (1.5 is chosen)") != std::string::npos);
}

// Found by fuzz_apt_index (issue 40): a package already chosen at one version could be chosen again
// at another as the provider of a virtual package, so the bundle carried two versions of one
// package, which apt cannot install together. apt installs one version of a package: a provider
// whose name is chosen at another version is not a candidate.
TEST_CASE("resolve: a package chosen at one version is never chosen again at another as a provider") {
  auto idx = repo::parse_packages(R"(Package: b
Version: 1
Architecture: all
Filename: b1.deb
Size: 1
SHA256: 1111111111111111111111111111111111111111111111111111111111111111

Package: b
Version: 2
Architecture: all
Provides: virt
Filename: b2.deb
Size: 1
SHA256: 2222222222222222222222222222222222222222222222222222222222222222

Package: a
Version: 1
Architecture: all
Depends: virt
Filename: a.deb
Size: 1
SHA256: 3333333333333333333333333333333333333333333333333333333333333333
)",
                                  "all", "Packages");
  REQUIRE(idx);
  auto r = repo::resolve(*idx, {"b=1", "a"}, {}, nullptr);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("a 1 needs virt") != std::string::npos);
  auto ok = repo::resolve(*idx, {"b=2", "a"}, {}, nullptr);
  REQUIRE(ok);
  CHECK(chosen(*ok) == std::vector<std::string>{"b=2", "a=1"});
}
