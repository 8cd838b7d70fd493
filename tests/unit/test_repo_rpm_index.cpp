#include "repo/rpm_index.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

using namespace hpcbake;

namespace {

const std::string kSha(64, 'a');

std::string package(const std::string& name, const std::string& arch, const std::string& ver,
                    const std::string& location, const std::string& extra = "") {
  return R"(<package type="rpm"><name>)" + name + "</name><arch>" + arch + R"(</arch><version epoch="0" ver=")" + ver +
         R"(" rel="1"/><checksum type="sha256" pkgid="YES">)" + kSha + R"(</checksum><location href=")" + location +
         R"("/><size package="100" installed="1" archive="1"/><format>)" + extra + "</format></package>";
}

std::vector<repo::RpmPackage> parse(const std::string& body, std::size_t chunk = 7) {
  const std::string xml = R"(<?xml version="1.0" encoding="UTF-8"?>
<metadata xmlns="http://linux.duke.edu/metadata/common" xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="3">)" +
                          body + "</metadata>";
  repo::PrimaryParser p("x86_64", "primary.xml");
  for (std::size_t i = 0; i < xml.size(); i += chunk) // fed in small pieces, as it streams
    REQUIRE(p.feed(std::string_view(xml).substr(i, chunk), false));
  REQUIRE(p.feed({}, true));
  return p.take();
}

} // namespace

TEST_CASE("rpm versions: rpmvercmp's order of epoch, version and release") {
  using repo::compare_rpm_evr;
  CHECK(compare_rpm_evr("0", "580.126.20", "1", "0", "580.126.9", "1") > 0);
  CHECK(compare_rpm_evr("1", "1.0", "1", "0", "9.0", "1") > 0);
  CHECK(compare_rpm_evr("0", "1.0~rc1", "1", "0", "1.0", "1") < 0);
  CHECK(compare_rpm_evr("0", "1.0^git1", "1", "0", "1.0", "1") > 0);
  CHECK(compare_rpm_evr("0", "1.0", "1.el9", "0", "1.0", "2.el9") < 0);
  CHECK(compare_rpm_evr("0", "1.0a", "1", "0", "1.0.1", "1") < 0);
  CHECK(compare_rpm_evr("0", "1.0", "", "0", "1.0", "7") == 0); // no release asked: any matches
}

TEST_CASE("repomd: data files with their SHA-256, a location outside the repository refused") {
  auto d = repo::parse_repomd(R"(<repomd xmlns="http://linux.duke.edu/metadata/repo"><revision>1</revision>
<data type="primary"><checksum type="sha256">)" +
                                  kSha + R"(</checksum><location href="repodata/p.xml.gz"/><size>42</size></data>
<data type="other"><checksum type="sha1">abc</checksum><location href="repodata/o.xml.gz"/><size>1</size></data></repomd>)",
                              "repomd.xml");
  REQUIRE(d);
  REQUIRE(d->size() == 2);
  CHECK((*d)[0].type == "primary");
  CHECK((*d)[0].sha256 == kSha);
  CHECK((*d)[0].size == 42);
  CHECK((*d)[1].sha256.empty()); // sha1: the caller refuses it
  CHECK_FALSE(
      repo::parse_repomd(R"(<repomd><data type="primary"><location href="../../etc/passwd"/></data></repomd>)", "r"));
  CHECK_FALSE(repo::parse_repomd("<repomd><data", "r"));
}

// Found by fuzz_rpm_index (issue 40): a sha256 checksum that was not 64 hex digits was kept as
// read, and the digest names the file in the cache (fetch::Cache::entry): 64 characters of "../"
// named a path outside it. Upper-case hex is the same digest, in the cache's spelling.
TEST_CASE("repomd: a SHA-256 checksum that is not 64 hex digits is refused, upper case is read as lower") {
  const auto repomd = [](const std::string& sum) {
    return R"(<repomd><data type="primary"><checksum type="sha256">)" + sum +
           R"(</checksum><location href="repodata/p.xml.gz"/></data></repomd>)";
  };
  std::string dots;
  while (dots.size() < 61)
    dots += "../";
  dots = dots.substr(0, 61) + "etc";
  for (const std::string& sum : {dots, std::string(63, 'a') + "s", std::string(63, 'a'), std::string()}) {
    auto d = repo::parse_repomd(repomd(sum), "repomd.xml");
    REQUIRE_FALSE(d);
    CHECK(d.error().message.find("not 64 hex digits") != std::string::npos);
  }
  auto upper = repo::parse_repomd(repomd(std::string(64, 'A')), "repomd.xml");
  REQUIRE(upper);
  CHECK((*upper)[0].sha256 == std::string(64, 'a'));
}

TEST_CASE("primary: packages for this arch and noarch, provides and requires, streamed in pieces") {
  auto pk = parse(
      package(
          "nvidia-fabricmanager", "x86_64", "580.126.20", "Packages/fm.rpm",
          R"x(<rpm:requires><rpm:entry name="libc.so.6()(64bit)"/><rpm:entry name="dep" flags="GE" epoch="0" ver="1"/></rpm:requires>)x") +
      package("dep", "noarch", "1", "dep.rpm",
              R"(<rpm:provides><rpm:entry name="virtual-dep"/></rpm:provides><file>/usr/bin/dep</file>)") +
      package("arm-only", "aarch64", "1", "arm.rpm"));
  REQUIRE(pk.size() == 2);
  CHECK(pk[0].requirements.size() == 2);
  CHECK(pk[0].requirements[1].text() == "dep >= 1");
  CHECK(pk[1].files == std::vector<std::string>{"/usr/bin/dep"});
  repo::PrimaryParser bad("x86_64", "primary.xml");
  CHECK_FALSE(bad.feed("<metadata>" + package("x", "noarch", "1", "../x.rpm") + "</metadata>", true));
}

// Found by fuzz_rpm_index's chunking property (issue 40): text was kept up to "about" 4096 bytes,
// whichever call from expat crossed the limit adding all it had, so a <name> longer than that read
// differently depending on where the download's pieces ended.
TEST_CASE("primary: a name over 4096 bytes is refused, whatever the pieces it arrives in") {
  const std::string xml = "<metadata>" + package(std::string(5000, 'n'), "noarch", "1", "n.rpm") + "</metadata>";
  for (const std::size_t piece : {xml.size(), std::size_t{61}, std::size_t{1000}}) {
    repo::PrimaryParser p("x86_64", "primary.xml");
    Status st;
    for (std::size_t at = 0; at < xml.size() && st; at += piece)
      st = p.feed(std::string_view(xml).substr(at, piece), at + piece >= xml.size());
    REQUIRE_FALSE(st);
    CHECK(st.error().message.find("a <name> longer than 4096 bytes") != std::string::npos);
  }
  const std::string fits = "<metadata>" + package(std::string(4096, 'n'), "noarch", "1", "n.rpm") + "</metadata>";
  CHECK(parse(fits).at(0).name == std::string(4096, 'n'));
}

TEST_CASE("rpm closure: the highest version, dependencies by name, provide or file, the rest the distribution's") {
  auto idx = parse(
      package(
          "dkms", "noarch", "3.1.6", "dkms-3.1.6.rpm",
          R"x(<rpm:requires><rpm:entry name="gcc"/><rpm:entry name="/usr/bin/dep"/><rpm:entry name="(kernel-devel or kernel-headers)"/></rpm:requires>)x") +
      package("dkms", "noarch", "3.0.1", "dkms-3.0.1.rpm") +
      package("dep", "noarch", "1", "dep.rpm", "<file>/usr/bin/dep</file>"));
  auto r = repo::resolve_rpm(idx, {"dkms"}, false);
  REQUIRE(r);
  REQUIRE(r->selected.size() == 2);
  CHECK(r->selected[0].ver == "3.1.6");
  CHECK(r->selected[1].name == "dep");
  CHECK(r->other == std::vector<std::string>{"(kernel-devel or kernel-headers)", "gcc"});
  auto exact = repo::resolve_rpm(idx, {"dkms-3.0.1-1"}, false);
  REQUIRE(exact);
  CHECK(exact->selected[0].ver == "3.0.1");
  CHECK_FALSE(repo::resolve_rpm(idx, {"dkms-9.9-1"}, false));
  // NAME-VER-REL at the package's own epoch, as dnf reads it (NVIDIA's rpms carry Epoch 3).
  auto epoch3 = parse(package("nvidia-fabricmanager", "x86_64", "580.126.20", "fm.rpm"));
  epoch3[0].epoch = "3";
  auto fm = repo::resolve_rpm(epoch3, {"nvidia-fabricmanager-580.126.20-1"}, false);
  REQUIRE(fm);
  CHECK(fm->selected.size() == 1);
  auto soft = repo::resolve_rpm(idx, {"gcc", "make", "dkms"}, true); // the build tools: EPEL has only dkms
  REQUIRE(soft);
  CHECK(soft->selected.size() == 2);
  CHECK(std::find(soft->other.begin(), soft->other.end(), "make") != soft->other.end());
}

// NVIDIA's container toolkit repository lists SHA-512 only (NVIDIA/libnvidia-container gh-pages
// stable/rpm/x86_64/repodata/repomd.xml: <checksum type="sha512">, 128 hex digits): read, checked
// for shape; any other digest of a package is still refused.
TEST_CASE("repomd and primary: SHA-512 digests are read, a malformed one or none refused") {
  const std::string sha512(128, 'B');
  auto d = repo::parse_repomd(R"(<repomd><data type="primary"><checksum type="sha512">)" + sha512 +
                                  R"(</checksum><location href="repodata/p.xml.gz"/><size>42</size></data></repomd>)",
                              "repomd.xml");
  REQUIRE(d);
  CHECK((*d)[0].sha256.empty());
  CHECK((*d)[0].sha512 == std::string(128, 'b'));
  auto bad = repo::parse_repomd(R"(<repomd><data type="primary"><checksum type="sha512">abc</checksum>)"
                                R"(<location href="repodata/p.xml.gz"/></data></repomd>)",
                                "repomd.xml");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("not 128 hex digits") != std::string::npos);

  auto with = [&](const std::string& type, const std::string& digest) {
    std::string body = package("nvidia-container-toolkit", "x86_64", "1.20.0", "nvidia-container-toolkit.rpm");
    const auto at = body.find(R"(<checksum type="sha256" pkgid="YES">)" + kSha);
    body.replace(at, std::string(R"(<checksum type="sha256" pkgid="YES">)").size() + kSha.size(),
                 R"(<checksum type=")" + type + R"(" pkgid="YES">)" + digest);
    return body;
  };
  const auto pkgs = parse(with("sha512", sha512));
  REQUIRE(pkgs.size() == 1);
  CHECK(pkgs[0].sha256.empty());
  CHECK(pkgs[0].sha512 == std::string(128, 'b'));
  for (const auto& [type, digest] :
       {std::pair<std::string, std::string>{"md5", std::string(32, 'a')}, {"sha512", std::string(64, 'a')}}) {
    CAPTURE(type);
    const std::string xml = "<metadata>" + with(type, digest) + "</metadata>";
    repo::PrimaryParser p("x86_64", "primary.xml");
    auto fed = p.feed(xml, true);
    REQUIRE_FALSE(fed);
    CHECK(fed.error().message.find("no SHA-256 or SHA-512 digest") != std::string::npos);
  }
}
