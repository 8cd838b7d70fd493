// makeself archives, made here by Debian's real `makeself` (gzip, xz, uncompressed, with
// and without SHA-256) and by hand in the older 2.1 style NVIDIA ships, are extracted
// natively. A flipped payload byte is refused naming the checksum; a truncated file is
// refused; neither leaves anything behind.
#include "archive/makeself.hpp"
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

namespace fs = std::filesystem;
using namespace hpcbake::archive;

namespace {

// Runs a shell command line; its output goes to `log` so a failure can show it.
int sh(const std::string& cmd, const fs::path& log) {
  const std::string full = cmd + " >" + log.string() + " 2>&1";
  return std::system(full.c_str());
}

// The test needs the real tool: without it, it must fail, not pass vacuously.
void require_makeself() {
  const bool found = std::system("command -v makeself >/dev/null 2>&1") == 0;
  REQUIRE_MESSAGE(found, "makeself is not installed: apt-get install makeself (scripts/deps installs it)");
}

// A payload tree: a script, a nested file, a binary blob.
fs::path make_tree(const fs::path& base) {
  const fs::path src = base / "src";
  test::write(src / "setup.sh", "#!/bin/sh\necho installing\n");
  fs::permissions(src / "setup.sh", fs::perms(0755));
  test::write(src / "kernel/nvidia.c", "int nvidia_init(void) { return 0; }\n");
  std::string blob(200000, '\0');
  for (std::size_t i = 0; i < blob.size(); ++i)
    blob[i] = static_cast<char>((i * 2654435761u) >> 13);
  test::write(src / "lib/libnvidia.so", blob);
  return src;
}

void check_tree(const fs::path& src, const fs::path& dest) {
  for (const auto* rel : {"setup.sh", "kernel/nvidia.c", "lib/libnvidia.so"}) {
    INFO(rel);
    REQUIRE(fs::is_regular_file(dest / rel));
    CHECK(test::slurp(dest / rel) == test::slurp(src / rel));
  }
  CHECK((fs::status(dest / "setup.sh").permissions() & fs::perms::owner_exec) != fs::perms::none);
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir))
      names.insert(e.path().filename().string());
  return names;
}

fs::path makeself(const fs::path& base, const fs::path& src, const std::string& flags, const std::string& name) {
  const fs::path run = base / name;
  const int rc = sh("makeself --quiet " + flags + " " + src.string() + " " + run.string() +
                        " 'Test driver \"1.0\"' ./setup.sh --silent",
                    base / (name + ".log"));
  REQUIRE_MESSAGE(rc == 0, test::slurp(base / (name + ".log")));
  return run;
}

void flip_byte(const fs::path& p, std::uint64_t at) {
  std::string bytes = test::slurp(p);
  REQUIRE(at < bytes.size());
  bytes[at] = static_cast<char>(bytes[at] ^ 0x01);
  test::write(p, bytes);
}

} // namespace

TEST_CASE("archive makeself: real makeself archives extract natively") {
  require_makeself();
  const fs::path base = test::scratch("archive-makeself-real");
  const fs::path src = make_tree(base);
  struct Variant {
    const char* name;
    const char* flags;
    const char* compression;
  };
  for (const auto& v : {Variant{"gzip-sha", "--gzip --sha256", "gzip"}, Variant{"xz-sha", "--xz --sha256", "xz"},
                        Variant{"nocomp-sha", "--nocomp --sha256", "none"}, Variant{"gzip-md5-crc", "", "gzip"},
                        Variant{"xz-crc-only", "--xz --nomd5", "xz"}}) {
    SUBCASE(v.name) {
      const fs::path run = makeself(base, src, v.flags, std::string(v.name) + ".run");
      const auto info = read_makeself_header(run);
      REQUIRE_MESSAGE(info.has_value(), (info ? std::string() : info.error().message));
      CHECK(info->makeself_version == "2.4.5");
      CHECK(info->compression == v.compression);
      CHECK(info->label == "Test driver \"1.0\"");
      CHECK(info->script == "./setup.sh --silent");
      REQUIRE(info->filesizes.size() == 1);
      CHECK(info->payload_offset + info->filesizes[0] == fs::file_size(run));
      CHECK(info->sha256.empty() == (std::string(v.flags).find("--sha256") == std::string::npos));
      const fs::path dest = base / "out" / v.name;
      const auto r = extract_makeself(run, dest, {});
      REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
      check_tree(src, dest);
    }
  }
}

TEST_CASE("archive makeself: the CRC is POSIX cksum's") {
  const fs::path base = test::scratch("archive-makeself-cksum");
  for (const std::size_t n : {0u, 1u, 7u, 8u, 255u, 256u, 65537u}) {
    std::string data(n, '\0');
    for (std::size_t i = 0; i < n; ++i)
      data[i] = static_cast<char>(i * 131 + 7);
    test::write(base / "f", data);
    REQUIRE(sh("cksum < " + (base / "f").string() + " | cut -d' ' -f1", base / "sum") == 0);
    std::string expected = test::slurp(base / "sum");
    while (!expected.empty() && expected.back() == '\n')
      expected.pop_back();
    CHECK(std::to_string(posix_cksum(data.data(), data.size())) == expected);
  }
}

TEST_CASE("archive makeself: a flipped payload byte is refused naming the checksum") {
  require_makeself();
  const fs::path base = test::scratch("archive-makeself-corrupt");
  const fs::path src = make_tree(base);
  struct Variant {
    const char* flags;
    const char* checksum;
  };
  for (const auto& v : {Variant{"--gzip --sha256 --nomd5 --nocrc", "SHA-256"}, Variant{"--xz --nocrc", "MD5"},
                        Variant{"--nocomp --nomd5", "CRC"}}) {
    SUBCASE(v.checksum) {
      const fs::path run = makeself(base, src, v.flags, "c.run");
      const auto info = read_makeself_header(run);
      REQUIRE(info.has_value());
      flip_byte(run, info->payload_offset + info->filesizes[0] / 2);
      const fs::path out = base / "out";
      fs::create_directories(out);
      const auto r = extract_makeself(run, out / "dest", {});
      REQUIRE_FALSE(r.has_value());
      INFO(r.error().message);
      CHECK(r.error().message.find(std::string(v.checksum) + " checksum mismatch") != std::string::npos);
      const std::string expected = std::string(v.checksum) == "SHA-256" ? info->sha256
                                   : std::string(v.checksum) == "MD5"   ? info->md5
                                                                        : info->crc;
      CHECK(r.error().message.find(expected) != std::string::npos);
      CHECK(listing(out).empty());
    }
  }
}

TEST_CASE("archive makeself: a truncated file is refused") {
  require_makeself();
  const fs::path base = test::scratch("archive-makeself-truncated");
  const fs::path src = make_tree(base);
  const fs::path run = makeself(base, src, "--gzip --sha256", "t.run");
  fs::resize_file(run, fs::file_size(run) - 100);
  const fs::path out = base / "out";
  fs::create_directories(out);
  const auto r = extract_makeself(run, out / "dest", {});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("truncated") != std::string::npos);
  CHECK(listing(out).empty());
  // Cut inside the header: not a usable makeself archive at all.
  fs::resize_file(run, 300);
  const auto h = extract_makeself(run, out / "dest", {});
  REQUIRE_FALSE(h.has_value());
  CHECK(listing(out).empty());
}

namespace {

// A makeself 2.1-style header, as older NVIDIA installers have: no skip= variable, the line
// count written into `head -n NNN "$0"`; or, with `bare_skip`, an unquoted skip=NNN.
std::string old_header(const std::string& filesizes, const std::string& crc, const std::string& md5, bool bare_skip) {
  std::string h = "#!/bin/sh\n"
                  "# This script was generated using Makeself 2.1.5\n"
                  "\n"
                  "CRCsum=\"" +
                  crc +
                  "\"\n"
                  "MD5=\"" +
                  md5 +
                  "\"\n"
                  "TMPROOT=${TMPDIR:=/tmp}\n"
                  "\n"
                  "label=\"NVIDIA Accelerated Graphics Driver for Linux-x86_64 535.104.05\"\n"
                  "script=\"./nvidia-installer\"\n"
                  "scriptargs=\"\"\n"
                  "targetdir=\"NVIDIA-Linux-x86_64-535.104.05\"\n"
                  "filesizes=\"" +
                  filesizes +
                  "\"\n"
                  "keep=y\n";
  h += bare_skip ? "skip=24\n" : "\n";
  h += "MS_Check()\n"
       "{\n"
       "    offset=`head -n 24 \"$1\" | wc -c | tr -d \" \"`\n"
       "    echo checking\n"
       "}\n"
       "location=\"`pwd`\"\n"
       "offset=`head -n 24 \"$0\" | wc -c | tr -d \" \"`\n"
       "for s in $filesizes; do MS_dd \"$0\" $offset $s | gzip -cd | tar xvf - ; done\n"
       "exit 0\n";
  // Pad to the declared 24 lines.
  std::size_t lines = 0;
  for (const char c : h)
    lines += c == '\n';
  REQUIRE(lines <= 24);
  for (; lines < 24; ++lines)
    h += "#\n";
  return h;
}

// The command's output, trimmed; never empty (an empty checksum would mean "absent").
std::string run_out(const std::string& cmd, const fs::path& base) {
  REQUIRE(sh(cmd, base / "cmd.out") == 0);
  std::string s = test::slurp(base / "cmd.out");
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  REQUIRE_FALSE(s.empty());
  return s;
}

} // namespace

TEST_CASE("archive makeself: hand-written 2.1-style headers (head -n NNN, skip=NNN, two payloads)") {
  const fs::path base = test::scratch("archive-makeself-old");
  const fs::path src = make_tree(base);
  const std::string tgz = (base / "p.tar.gz").string();
  REQUIRE(sh("tar -C " + src.string() + " -czf " + tgz + " .", base / "tar.log") == 0);
  // Checksums from the system's own tools, not from the code under test.
  const std::string crc = run_out("cksum < " + tgz + " | cut -d' ' -f1", base);
  const std::string md5 = run_out("md5sum < " + tgz + " | cut -c1-32", base);
  const std::string size = std::to_string(fs::file_size(tgz));
  const std::string payload = test::slurp(tgz);

  for (const bool bare_skip : {false, true}) {
    SUBCASE(bare_skip ? "skip=NNN" : "head -n NNN") {
      const std::string header = old_header(size, crc, md5, bare_skip);
      const fs::path run = base / "NVIDIA-Linux-x86_64-535.104.05.run";
      test::write(run, header + payload);
      const auto info = read_makeself_header(run);
      REQUIRE_MESSAGE(info.has_value(), (info ? "" : info.error().message));
      CHECK(info->makeself_version == "2.1.5");
      CHECK(info->header_lines == 24);
      CHECK(info->payload_offset == header.size());
      CHECK(info->compression == "gzip");
      CHECK(info->crc == crc);
      CHECK(info->md5 == md5);
      CHECK(info->script == "./nvidia-installer");
      CHECK(info->target_dir == "NVIDIA-Linux-x86_64-535.104.05");
      const auto r = extract_makeself(run, base / "out" / (bare_skip ? "skip" : "head"), {});
      REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
      check_tree(src, base / "out" / (bare_skip ? "skip" : "head"));
    }
  }

  SUBCASE("two payloads, the second corrupt") {
    const fs::path src2 = base / "src2";
    test::write(src2 / "extra/readme", "second payload\n");
    const std::string tgz2 = (base / "q.tar.gz").string();
    REQUIRE(sh("tar -C " + src2.string() + " -czf " + tgz2 + " .", base / "tar.log") == 0);
    const std::string crc2 = run_out("cksum < " + tgz2 + " | cut -d' ' -f1", base);
    const std::string md52 = run_out("md5sum < " + tgz2 + " | cut -c1-32", base);
    const std::string sizes = size + " " + std::to_string(fs::file_size(tgz2));
    const fs::path run = base / "two.run";
    test::write(run, old_header(sizes, crc + " " + crc2, md5 + " " + md52, false) + payload + test::slurp(tgz2));
    const auto r = extract_makeself(run, base / "out" / "two", {});
    REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
    check_tree(src, base / "out" / "two");
    CHECK(test::slurp(base / "out" / "two" / "extra/readme") == "second payload\n");

    flip_byte(run, fs::file_size(run) - 30);
    const auto bad = extract_makeself(run, base / "out" / "two-bad", {});
    REQUIRE_FALSE(bad.has_value());
    CHECK(bad.error().message.find("payload 2 of 2") != std::string::npos);
    CHECK(bad.error().message.find("checksum mismatch") != std::string::npos);
    CHECK_FALSE(fs::exists(base / "out" / "two-bad"));
  }

  SUBCASE("not makeself") {
    test::write(base / "plain.sh", "#!/bin/sh\necho hello\n");
    const auto r = read_makeself_header(base / "plain.sh");
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("not a usable makeself archive") != std::string::npos);
  }
}

namespace {

// `text` with the line that starts with `prefix` replaced by `line`; `at` gets its number.
std::string replace_line(const std::string& text, const std::string& prefix, const std::string& line, std::size_t& at) {
  std::size_t pos = 0;
  at = 1;
  while (pos < text.size() && text.compare(pos, prefix.size(), prefix) != 0) {
    pos = text.find('\n', pos);
    REQUIRE(pos != std::string::npos);
    ++pos;
    ++at;
  }
  REQUIRE(pos < text.size());
  return text.substr(0, pos) + line + text.substr(text.find('\n', pos));
}

} // namespace

TEST_CASE("archive makeself: a bad header field is named with its line and column") {
  require_makeself();
  const fs::path base = test::scratch("archive-makeself-bad-field");
  const fs::path src = make_tree(base);
  const std::string good = test::slurp(makeself(base, src, "--gzip", "good.run"));
  struct Case {
    const char* prefix;
    const char* line;
    const char* says;
  };
  for (const Case& c : {Case{"skip=\"", "skip=\"7x6\"", "skip=\"7x6\" is not a line count"},
                        Case{"filesizes=\"", "filesizes=\"12 ab\"", "filesizes=\"12 ab\""},
                        Case{"totalsize=\"", "totalsize=\"1\"", "totalsize=\"1\" is not the sum"},
                        Case{"MD5=\"", "MD5=\"0123 4567\"", "MD5 lists 2 checksums for 1 payloads"},
                        Case{"filesizes=\"", "filesizes=\"\"", "filesizes= is empty"}}) {
    SUBCASE(c.line) {
      std::size_t line = 0;
      const fs::path run = base / "bad.run";
      test::write(run, replace_line(good, c.prefix, c.line, line));
      const auto r = read_makeself_header(run);
      REQUIRE_FALSE(r.has_value());
      INFO(r.error().message);
      // file:line:column of the field's value, then what is wrong with it.
      const std::string where = run.string() + ":" + std::to_string(line) + ":";
      CHECK(r.error().message.rfind(where, 0) == 0);
      CHECK(r.error().message.find(c.says) != std::string::npos);
      const auto x = extract_makeself(run, base / "out", {});
      REQUIRE_FALSE(x.has_value());
      CHECK(x.error().message == r.error().message);
      CHECK_FALSE(fs::exists(base / "out"));
    }
  }
}

TEST_CASE("archive makeself: the checksums verified are the ones the header carries, and only those") {
  require_makeself();
  const fs::path base = test::scratch("archive-makeself-verified");
  const fs::path src = make_tree(base);
  struct Case {
    const char* flags;
    std::vector<std::string> verified;
  };
  for (const Case& c :
       {Case{"--gzip --nomd5 --nocrc", {}}, Case{"--gzip", {"MD5", "CRC"}},
        Case{"--xz --sha256", {"SHA-256", "MD5", "CRC"}}, Case{"--sha256 --nomd5 --nocrc", {"SHA-256"}}}) {
    SUBCASE(c.flags) {
      const fs::path run = makeself(base, src, c.flags, "v.run");
      const auto r = extract_makeself(run, base / "out", {});
      REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
      CHECK(r->verified == c.verified);
      check_tree(src, base / "out");
    }
  }
}

TEST_CASE("archive makeself: a bomb in the payload is stopped by the expansion ratio") {
  require_makeself();
  const fs::path base = test::scratch("archive-makeself-bomb");
  test::write(base / "src/readme", "a real file first\n");
  // 96 MiB of zeros: the payload is about 100 KB of gzip.
  test::write(base / "src/zeros.img", "");
  fs::resize_file(base / "src/zeros.img", 96u << 20);
  const fs::path run = makeself(base, base / "src", "--gzip", "bomb.run");
  fs::remove(base / "src/zeros.img");
  const auto r = extract_makeself(run, base / "out", {});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("'./zeros.img'") != std::string::npos);
  CHECK(r.error().message.find("expands more than 100 times") != std::string::npos);
  CHECK(r.error().hint.find("--max-ratio") != std::string::npos);
  CHECK_FALSE(fs::exists(base / "out"));
  ExtractOptions unchecked;
  unchecked.limits.max_ratio = 0;
  const auto ok = extract_makeself(run, base / "out", unchecked);
  REQUIRE_MESSAGE(ok.has_value(), (ok ? "" : ok.error().message));
  CHECK(fs::file_size(base / "out/zeros.img") == 96u << 20);
  CHECK(ok->read <= fs::file_size(run));
}
