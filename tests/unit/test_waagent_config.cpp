#include "waagent/config.hpp"

#include "exec/runner.hpp"
#include "util/hostfs.hpp"
#include "waagent/rdma.hpp"

#include "helpers.hpp"
#include "recording_runner.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

using hpcbake::waagent::effective_value;

TEST_CASE("the real Debian waagent.conf ships OS.EnableRDMA commented out") {
  // Byte-identical copy of /etc/waagent.conf from Debian 12's waagent 2.7.3.0-4.1 package.
  const auto conf = test::slurp(test::host_fixture("nd96isr_h100_v5") / "etc/waagent.conf");
  REQUIRE(conf.find("# OS.EnableRDMA=y") != std::string::npos);
  CHECK_FALSE(effective_value(conf, "OS.EnableRDMA").has_value());
  CHECK(effective_value(conf, "Provisioning.Agent") == "cloud-init");
}

TEST_CASE("parsed the way waagent 2.7.3 conf.py parses it") {
  CHECK(effective_value("OS.EnableRDMA=y\n", "OS.EnableRDMA") == "y");
  CHECK(effective_value("OS.EnableRDMA=n\nOS.EnableRDMA=y\n", "OS.EnableRDMA") == "y"); // the last one wins
  CHECK(effective_value("OS.EnableRDMA = \"y\" # comment\n", "OS.EnableRDMA") == "y");
  CHECK_FALSE(effective_value("OS.EnableRDMA=None\n", "OS.EnableRDMA").has_value());
  CHECK_FALSE(effective_value("#OS.EnableRDMA=y\n", "OS.EnableRDMA").has_value());
  // Only a '#' in column 0 comments a line out; here the agent sees the key "# OS.EnableRDMA", not ours.
  CHECK_FALSE(effective_value("  # OS.EnableRDMA=y\n", "OS.EnableRDMA").has_value());
  CHECK(effective_value("  OS.EnableRDMA=y\n", "OS.EnableRDMA") == "y");
}

namespace {

// Every character Python 3's str.isspace() is true for, UTF-8 encoded: what str.strip()
// with no argument removes ([c for c in range(0x110000) if chr(c).isspace()], Python 3.11),
// except '\n', which ends the line before the agent strips anything.
const char* const kPythonSpaces[] = {
    "\t",           "\v",           "\f",
    "\r",           "\x1c",         "\x1d",
    "\x1e",         "\x1f",         " ",
    "\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80",
    "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82",
    "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85",
    "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88",
    "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8",
    "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f",
    "\xe3\x80\x80",
};

std::string hex_of(std::string_view s) {
  std::string out;
  for (const char c : s)
    out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
  return out;
}

} // namespace

TEST_CASE("every character Python's str.strip() removes is whitespace around the key and the value") {
  for (const std::string ws : kPythonSpaces) {
    INFO("whitespace ", hex_of(ws));
    CHECK(effective_value("OS.EnableRDMA=" + ws + "y\n", "OS.EnableRDMA") == "y");
    CHECK(effective_value("OS.EnableRDMA=y" + ws + "\n", "OS.EnableRDMA") == "y");
    CHECK(effective_value("OS.EnableRDMA=y" + ws + "# note\n", "OS.EnableRDMA") == "y");
    CHECK(effective_value("OS.EnableRDMA" + ws + "=y\n", "OS.EnableRDMA") == "y");
    CHECK(effective_value(ws + "OS.EnableRDMA=y\n", "OS.EnableRDMA") == "y");
    CHECK_FALSE(effective_value("OS.EnableRDMA=" + ws + "None" + ws + "\n", "OS.EnableRDMA").has_value());
    // Quotes go first (strip('" ')), then whitespace: inside the quotes it is stripped...
    CHECK(effective_value("OS.EnableRDMA=\"" + ws + "y" + ws + "\"\n", "OS.EnableRDMA") == "y");
    // ...outside them only a plain space lets strip('" ') reach the quote.
    CHECK(effective_value("OS.EnableRDMA=" + ws + "\"y\"\n", "OS.EnableRDMA") == (ws == " " ? "y" : "\"y"));
    // Whitespace inside the key or the value is kept.
    CHECK_FALSE(effective_value("OS." + ws + "EnableRDMA=y\n", "OS.EnableRDMA").has_value());
    CHECK(effective_value("OS.EnableRDMA=y" + ws + "y\n", "OS.EnableRDMA") == "y" + ws + "y");
  }
  // Characters that are not whitespace to Python stay: a zero-width space, a BOM, U+180E.
  for (const std::string other : {"\xe2\x80\x8b", "\xef\xbb\xbf", "\xe1\xa0\x8e", "\xc2\xad"}) {
    INFO("not whitespace ", hex_of(other));
    CHECK(effective_value("OS.EnableRDMA=" + other + "y\n", "OS.EnableRDMA") == other + "y");
    CHECK_FALSE(effective_value("OS.EnableRDMA" + other + "=y\n", "OS.EnableRDMA").has_value());
  }
}

TEST_CASE("rdma edits find the agent's line whatever Python whitespace surrounds the key or the value") {
  using namespace hpcbake::waagent;
  for (const std::string ws : kPythonSpaces) {
    INFO("whitespace ", hex_of(ws));
    // On to the agent: disable must edit that line in place, not report "nothing changed".
    const std::string on = "A=1\nOS.EnableRDMA=" + ws + "y\nB=2\n";
    const auto disabled = plan_edit(on, rdma_settings(RdmaMode::off));
    REQUIRE(disabled.edits.size() == 1);
    CHECK(disabled.edits[0].line == 2);
    CHECK(disabled.edits[0].how == Edit::How::in_place);
    CHECK(disabled.text == "A=1\nOS.EnableRDMA=" + ws + "n\nB=2\n");
    CHECK(effective_value(disabled.text, kEnableRdma) == "n");
    // A key with whitespace before '=' is the agent's key: enable edits it in place.
    const std::string off = "OS.EnableRDMA" + ws + "=" + ws + "n" + ws + "# off\n";
    const auto enabled = plan_edit(off, rdma_settings(RdmaMode::on));
    REQUIRE(enabled.edits.size() == 1);
    CHECK(enabled.edits[0].how == Edit::How::in_place);
    CHECK(enabled.text == "OS.EnableRDMA" + ws + "=" + ws + "y" + ws + "# off\n");
    CHECK(satisfied(enabled.text, rdma_settings(RdmaMode::on)[0]));
    // Quoted, with the whitespace inside the quotes.
    const auto quoted = plan_edit("OS.EnableRDMA=\"" + ws + "y\"\n", rdma_settings(RdmaMode::off));
    REQUIRE(quoted.edits.size() == 1);
    CHECK(effective_value(quoted.text, kEnableRdma) == "n");
  }
}

TEST_CASE("rdma status and edits refuse a waagent.conf the agent cannot decode, naming line and column") {
  using namespace hpcbake;
  using namespace hpcbake::waagent;
  const auto root = test::scratch("waagent-undecodable");
  std::filesystem::create_directories(root / "etc");
  // "café" in Latin-1 on line 3: the agent's str(bytes, 'utf-8') raises UnicodeDecodeError.
  const std::string text = "A=1\nOS.EnableRDMA=y\n# caf\xe9\n";
  test::write(root / "etc/waagent.conf", text);
  const util::HostFs host(root);
  const auto s = rdma_status(host, std::nullopt);
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message.find("waagent.conf:3:6:") != std::string::npos);
  CHECK(s.error().message.find("0xe9") != std::string::npos);
  exec::RecordingRunner runner;
  RdmaOptions opts;
  opts.unit = "walinuxagent";
  const auto c = apply_rdma(host, desired_without_size(RdmaMode::off), runner, opts);
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().message.find("waagent.conf:3:6:") != std::string::npos);
  CHECK(test::slurp(root / "etc/waagent.conf") == text);
}

TEST_CASE("undecodable: where Python's strict UTF-8 decoder stops, and why") {
  using hpcbake::waagent::undecodable;
  // Each way UTF-8 can be invalid; offsets and reasons are what Python 3.11 reports.
  struct Case {
    const char* bytes;
    std::size_t offset;
    const char* reason;
  };
  for (const Case& k :
       {Case{"ok\xff", 2, "invalid start byte"}, Case{"\xc0\xaf", 0, "invalid start byte"},
        Case{"a\xe2\x80", 1, "unexpected end of data"}, Case{"\xe2\x28\xa1", 0, "invalid continuation byte"},
        Case{"\xed\xa0\x80", 0, "invalid continuation byte"}, Case{"\xf4\x90\x80\x80", 0, "invalid continuation byte"},
        Case{"\xf5\x80", 0, "invalid start byte"}}) {
    INFO(hex_of(k.bytes));
    const auto u = undecodable(k.bytes);
    REQUIRE(u.has_value());
    CHECK(u->offset == k.offset);
    CHECK(std::string(u->reason) == k.reason);
  }
  CHECK_FALSE(undecodable("OS.EnableRDMA=\xc2\xa0y \xe3\x80\x80 \xf0\x9f\x98\x80\n").has_value());
}
