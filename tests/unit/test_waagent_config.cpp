#include "waagent/config.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

using hpcbake::waagent::effective_value;

TEST_CASE("the real Debian waagent.conf ships OS.EnableRDMA commented out") {
  // Byte-identical copy of Debian 12 waagent 2.7.3 /etc/waagent.conf (../shared/reference).
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
