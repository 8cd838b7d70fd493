// The prebuilt-modules file (driver/prebuilt.hpp): written and read back, and refused when it is
// hostile or damaged: path escapes, links, wrong digests or sizes, truncation, duplicate or
// unlisted members, a manifest that is not first or not of this format. The real modules go
// through it in tests/cli/test_cli_prebuilt.py.
#include "driver/prebuilt.hpp"
#include "helpers.hpp"
#include "util/sha256.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <doctest/doctest.h>

#include <vector>

#include <sys/stat.h>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

struct Member {
  std::string name, content;
  unsigned type = AE_IFREG;
  std::string link{}; // a symlink's or hardlink's target
  bool hardlink = false;
};

// A tar with exactly these members, as a hostile or careless writer could make it.
void write_tar(const fs::path& out, const std::vector<Member>& members) {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  REQUIRE(archive_write_open_filename(a, out.c_str()) == ARCHIVE_OK);
  for (const auto& m : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.name.c_str());
    archive_entry_set_filetype(e, m.type);
    archive_entry_set_perm(e, 0644);
    if (m.hardlink) archive_entry_set_hardlink(e, m.link.c_str());
    if (m.type == AE_IFLNK) archive_entry_set_symlink(e, m.link.c_str());
    archive_entry_set_size(e, m.type == AE_IFREG && !m.hardlink ? static_cast<la_int64_t>(m.content.size()) : 0);
    REQUIRE(archive_write_header(a, e) == ARCHIVE_OK);
    if (m.type == AE_IFREG && !m.hardlink) archive_write_data(a, m.content.data(), m.content.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

std::string sha(const std::string& s) {
  return *util::sha256_of(s);
}

const std::string kKo = std::string("\x7f"
                                    "ELF fake module bytes ") +
                        std::string(3000, 'x');
const std::string kKo2 = "\x7f"
                         "ELF the second module";

driver::PrebuiltManifest manifest() {
  driver::PrebuiltManifest m;
  m.created_by = "hpcbake test";
  m.kernel = "6.1.0-56-amd64";
  m.arch = "x86_64";
  m.distro = "debian-12";
  m.is_signed = true;
  m.signer = "hpcbake module signing key";
  m.serial = "1c5b";
  driver::PrebuiltPackage p{"hpcbake-fixture",         "hpcbake-fixture",    "1.0",
                            "hpcbake-fixture-1.0.run", std::string(64, 'a'), {}};
  p.modules.push_back({"hpcbake_fixture", "hpcbake_fixture.ko", sha(kKo), kKo.size(),
                       "6.1.0-56-amd64 SMP preempt mod_unload modversions ", "hpcbake module signing key", "1C:5B"});
  p.modules.push_back({"hpcbake_two", "hpcbake_two.ko", sha(kKo2), kKo2.size(), "6.1.0-56-amd64 SMP ", "", ""});
  m.packages.push_back(p);
  return m;
}

std::string manifest_text(const driver::PrebuiltManifest& m) {
  return driver::to_json(m).dump(2);
}

// A well-formed bundle's members, for tests to spoil one at a time.
std::vector<Member> good_members() {
  return {{"manifest.json", manifest_text(manifest())},
          {"modules/hpcbake-fixture/1.0/hpcbake_fixture.ko", kKo},
          {"modules/hpcbake-fixture/1.0/hpcbake_two.ko", kKo2}};
}

std::string refusal(const fs::path& tar, const fs::path& out) {
  auto r = driver::extract_prebuilt(tar, out);
  REQUIRE_FALSE(r.has_value());
  return r.error().message;
}

} // namespace

TEST_CASE("prebuilt: written, then read back byte for byte") {
  const auto dir = test::scratch("prebuilt-roundtrip");
  test::write(dir / "a.ko", kKo);
  test::write(dir / "b.ko", kKo2);
  const auto m = manifest();
  REQUIRE(driver::write_prebuilt(dir / "mods.tar", m,
                                 {{"modules/hpcbake-fixture/1.0/hpcbake_fixture.ko", dir / "a.ko"},
                                  {"modules/hpcbake-fixture/1.0/hpcbake_two.ko", dir / "b.ko"}}));
  CHECK_FALSE(fs::exists(dir / ("mods.tar.tmp." + std::to_string(::getpid()))));
  auto head = driver::read_prebuilt_manifest(dir / "mods.tar");
  REQUIRE(head.has_value());
  CHECK(driver::to_json(*head) == driver::to_json(m));
  auto got = driver::extract_prebuilt(dir / "mods.tar", dir / "out");
  REQUIRE(got.has_value());
  CHECK(test::read(dir / "out/hpcbake-fixture/1.0/hpcbake_fixture.ko") == kKo);
  CHECK(test::read(dir / "out/hpcbake-fixture/1.0/hpcbake_two.ko") == kKo2);
  // A second extraction into the same place refuses to overwrite what is there.
  CHECK_FALSE(driver::extract_prebuilt(dir / "mods.tar", dir / "out").has_value());
}

TEST_CASE("prebuilt: the writer refuses a file that is not what the manifest says, and leaves nothing") {
  const auto dir = test::scratch("prebuilt-write-bad");
  test::write(dir / "a.ko", kKo + "changed");
  test::write(dir / "b.ko", kKo2);
  auto r = driver::write_prebuilt(dir / "mods.tar", manifest(),
                                  {{"modules/hpcbake-fixture/1.0/hpcbake_fixture.ko", dir / "a.ko"},
                                   {"modules/hpcbake-fixture/1.0/hpcbake_two.ko", dir / "b.ko"}});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("changed while it was packed") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "mods.tar"));
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("prebuilt: hostile and damaged files are refused, naming the member") {
  const auto dir = test::scratch("prebuilt-hostile");
  const auto tar = dir / "x.tar";
  auto members = good_members();
  std::string expect;
  SUBCASE("a path that escapes") {
    members[1].name = "modules/hpcbake-fixture/1.0/../../../../etc/cron.d/evil";
    expect = "is not a module the manifest lists";
  }
  SUBCASE("an absolute path") {
    members[1].name = "/etc/cron.d/evil";
    expect = "is not a module the manifest lists";
  }
  SUBCASE("a member the manifest does not list") {
    members.push_back({"modules/hpcbake-fixture/1.0/extra.ko", "x"});
    expect = "'modules/hpcbake-fixture/1.0/extra.ko' is not a module the manifest lists";
  }
  SUBCASE("a member twice") {
    members.push_back(members[1]);
    expect = "appears twice";
  }
  SUBCASE("a symlink in place of a module") {
    members[1] = {"modules/hpcbake-fixture/1.0/hpcbake_fixture.ko", "", AE_IFLNK, "/etc/shadow"};
    expect = "is not a regular file";
  }
  SUBCASE("a hardlink in place of a module") {
    members[1] = {"modules/hpcbake-fixture/1.0/hpcbake_fixture.ko", "", AE_IFREG, "manifest.json", true};
    expect = "is not a regular file";
  }
  SUBCASE("a module whose bytes differ from its digest") {
    members[1].content[10] ^= 1;
    expect = "has SHA-256 ";
  }
  SUBCASE("a module longer than the manifest says") {
    members[2].content += "more";
    expect = "holds more than the";
  }
  SUBCASE("a module shorter than the manifest says") {
    members[2].content.pop_back();
    expect = "bytes, the manifest says";
  }
  SUBCASE("a listed module missing") {
    members.pop_back();
    expect = "modules/hpcbake-fixture/1.0/hpcbake_two.ko is listed but missing";
  }
  SUBCASE("the manifest not first") {
    std::swap(members[0], members[1]);
    expect = "not manifest.json";
  }
  SUBCASE("another format") {
    members[0].content = R"({"format": "something-else", "schema": 1})";
    expect = "not a prebuilt-modules file";
  }
  SUBCASE("a manifest that names a module file outside its directory") {
    auto m = manifest();
    m.packages[0].modules[0].file = "../../../etc/cron.d/evil.ko";
    members[0].content = manifest_text(m);
    expect = "is not a module file name";
  }
  SUBCASE("a manifest whose DKMS name is a path") {
    auto m = manifest();
    m.packages[0].dkms_name = "../../x";
    members[0].content = manifest_text(m);
    expect = "cannot be a directory name";
  }
  SUBCASE("a manifest that lists a package twice") {
    auto m = manifest();
    m.packages.push_back(m.packages[0]);
    members[0].content = manifest_text(m);
    expect = "listed twice";
  }
  SUBCASE("a manifest that is not JSON") {
    members[0].content = "{\"format\": ";
    expect = "not a JSON object";
  }
  write_tar(tar, members);
  const std::string msg = refusal(tar, dir / "out");
  CHECK_MESSAGE(msg.find(expect) != std::string::npos, msg);
  CHECK(msg.find(tar.string()) != std::string::npos);
  // Nothing outside the output directory was written.
  CHECK_FALSE(fs::exists(dir / "etc"));
}

TEST_CASE("prebuilt: a truncated file is refused, at every cut") {
  const auto dir = test::scratch("prebuilt-truncated");
  write_tar(dir / "good.tar", good_members());
  const std::string whole = test::read(dir / "good.tar");
  REQUIRE(driver::extract_prebuilt(dir / "good.tar", dir / "ok").has_value());
  // In the first header, the manifest, the first module, the second header and the second module.
  REQUIRE(whole.size() > 6000);
  for (std::size_t cut : {100, 700, 2500, 5300, 5700}) {
    CAPTURE(cut);
    test::write(dir / "cut.tar", whole.substr(0, cut));
    fs::remove_all(dir / "out");
    auto r = driver::extract_prebuilt(dir / "cut.tar", dir / "out");
    CHECK_FALSE(r.has_value());
  }
  test::write(dir / "empty.tar", "");
  CHECK_FALSE(driver::read_prebuilt_manifest(dir / "empty.tar").has_value());
  CHECK_FALSE(driver::read_prebuilt_manifest(dir / "missing.tar").has_value());
}

TEST_CASE("prebuilt: another schema is refused as unsupported") {
  auto j = driver::to_json(manifest());
  j["schema"] = 2;
  auto r = driver::parse_prebuilt_manifest(j.dump(), "f.tar");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().kind == ErrorKind::unsupported);
  CHECK(r.error().message.find("schema 2") != std::string::npos);
}

TEST_CASE("prebuilt: a \"format\" of another type is refused with the reason, not thrown") {
  // The fuzzer's finding (fuzz/regressions/prebuilt): a second "format" key holding a number.
  for (const char* format : {"1", "null", "[]", "{}", "true"}) {
    auto j = driver::to_json(manifest());
    j["format"] = nlohmann::json::parse(format);
    auto r = driver::parse_prebuilt_manifest(j.dump(), "f.tar");
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("not a prebuilt-modules file") != std::string::npos);
  }
}

TEST_CASE("prebuilt: what fits a node, and why not") {
  const auto m = manifest();
  driver::PrebuiltWant w{"6.1.0-56-amd64",    "x86_64", "hpcbake-fixture", "1.0", std::string(64, 'a'),
                         {"hpcbake_fixture"}, true};
  CHECK(driver::prebuilt_mismatch(m, w).empty());
  auto other = w;
  other.kernel = "6.1.0-57-amd64";
  CHECK(driver::prebuilt_mismatch(m, other) == "built for kernel 6.1.0-56-amd64, the target kernel is 6.1.0-57-amd64");
  other = w;
  other.arch = "aarch64";
  CHECK(driver::prebuilt_mismatch(m, other).find("built for x86_64") != std::string::npos);
  other = w;
  other.version = "1.1";
  CHECK(driver::prebuilt_mismatch(m, other) == "holds hpcbake-fixture 1.0, the plan installs 1.1");
  other = w;
  other.source_sha256 = std::string(64, 'b');
  CHECK(driver::prebuilt_mismatch(m, other).find("built from a source with SHA-256") != std::string::npos);
  other.source_after_unpack = true; // a package's sources: install compares their tree later
  CHECK(driver::prebuilt_mismatch(m, other).empty());
  other = w;
  other.modules.push_back("nvidia-uvm");
  CHECK(driver::prebuilt_mismatch(m, other) == "lacks module nvidia-uvm");
  other = w;
  other.dkms_name = "nvidia";
  CHECK(driver::prebuilt_mismatch(m, other) == "holds no nvidia modules");
  auto unsigned_m = m;
  unsigned_m.is_signed = false;
  CHECK(driver::prebuilt_mismatch(unsigned_m, w).find("unsigned") != std::string::npos);
  w.signing = false;
  CHECK(driver::prebuilt_mismatch(unsigned_m, w).empty());
}

TEST_CASE("prebuilt: a package's source tree digest is its paths, contents and links, nothing else") {
  const fs::path a = test::scratch("tree-a");
  fs::create_directories(a / "src/sub");
  test::write(a / "dkms.conf", "PACKAGE_NAME=\"nvidia\"\n");
  test::write(a / "src/sub/nv.c", "int x;\n");
  fs::create_symlink("sub/nv.c", a / "src/link.c");
  fs::create_directories(a / "empty");
  auto first = driver::source_tree_sha256(a);
  REQUIRE(first);
  CHECK(first->size() == 64);
  // The definition, computed here independently: sorted paths, each "path\0sha256\n" or "path\0->target\n".
  util::Sha256 by_hand;
  for (std::string line : {std::string("dkms.conf") + '\0' + *util::sha256_file(a / "dkms.conf") + '\n',
                           std::string("src/link.c") + '\0' + "->sub/nv.c\n",
                           std::string("src/sub/nv.c") + '\0' + *util::sha256_file(a / "src/sub/nv.c") + '\n'})
    REQUIRE(by_hand.update(line.data(), line.size()));
  CHECK(*first == *by_hand.hex());
  // Modes and empty directories are not part of it.
  fs::permissions(a / "src/sub/nv.c", fs::perms::owner_all);
  fs::remove(a / "empty");
  CHECK(*driver::source_tree_sha256(a) == *first);
  // A changed byte, a new file and a retargeted link each change it.
  test::write(a / "src/sub/nv.c", "int y;\n");
  CHECK(*driver::source_tree_sha256(a) != *first);
  test::write(a / "src/sub/nv.c", "int x;\n");
  REQUIRE(*driver::source_tree_sha256(a) == *first);
  test::write(a / "extra.h", "");
  CHECK(*driver::source_tree_sha256(a) != *first);
  fs::remove(a / "extra.h");
  fs::remove(a / "src/link.c");
  fs::create_symlink("../dkms.conf", a / "src/link.c");
  CHECK(*driver::source_tree_sha256(a) != *first);
  // Not a directory, or a fifo inside: refused, naming the path.
  CHECK(!driver::source_tree_sha256(a / "missing"));
  REQUIRE(::mkfifo((a / "fifo").c_str(), 0600) == 0);
  auto fifo = driver::source_tree_sha256(a);
  REQUIRE(!fifo);
  CHECK(fifo.error().message.find("fifo") != std::string::npos);
}
