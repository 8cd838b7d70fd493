// verify/: the kernel log (/dev/kmsg records, read through HostFs), NVIDIA's Xid catalogue and Azure's
// failing set, the Xid line parser, the lost-carrier window, and the checks built from them.
#include "verify/checks.hpp"
#include "verify/kernel_log.hpp"
#include "verify/xid.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>

using namespace hpcbake;

namespace {

// A copy of the ND H100 fixture's kernel log files and IB sysfs with `kmsg` as /dev/kmsg.
std::filesystem::path root_with(const std::string& name, const std::string& kmsg_fixture) {
  const auto root = test::scratch("hpcbake-klog-" + name);
  std::filesystem::copy(test::host_fixture("nd96isr_h100_v5") / "sys", root / "sys",
                        std::filesystem::copy_options::recursive);
  std::filesystem::copy(test::host_fixture("nd96isr_h100_v5") / "proc", root / "proc",
                        std::filesystem::copy_options::recursive);
  test::write(root / "dev" / "kmsg", test::slurp(test::fixtures() / "kernel_log" / kmsg_fixture));
  return root;
}

std::map<std::string, verify::Check> run_checks(const std::filesystem::path& root) {
  util::HostFs fs(root);
  verify::VerifyRequest req;
  req.fs = &fs;
  verify::Report report;
  verify::Recorder rec(req, report);
  verify::Expectations e;
  e.nvidia = true;
  e.ib_ports = 8;
  verify::kernel_log_checks(rec, e);
  std::map<std::string, verify::Check> out;
  for (auto& c : report.checks)
    out.emplace(c.id, c);
  return out;
}

} // namespace

TEST_CASE("kernel log: a /dev/kmsg record's fields, its message kept as written") {
  auto r = verify::parse_kmsg_record("4,339,5140900,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
                                     " SUBSYSTEM=pci\n");
  REQUIRE(r);
  CHECK(r->priority == 4);
  CHECK(r->seq == 339);
  CHECK(r->usec == 5140900);
  CHECK(r->message == "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.");
  // Later kernels append fields after FLAGS ("caller=T1" with CONFIG_PRINTK_CALLER).
  auto c = verify::parse_kmsg_record("6,1,2,-,caller=T1;a;b");
  REQUIRE(c);
  CHECK(c->message == "a;b");
  CHECK_FALSE(verify::parse_kmsg_record("no header here"));
  CHECK_FALSE(verify::parse_kmsg_record("6,x,2,-;text"));
  CHECK_FALSE(verify::parse_kmsg_record("6,1;text"));
  CHECK_FALSE(verify::parse_kmsg_record(" SUBSYSTEM=pci"));
}

TEST_CASE("kernel log: a text of records skips continuation lines and non-records") {
  const auto records = verify::parse_kmsg_text(test::slurp(test::fixtures() / "kernel_log" / "kmsg-clean"));
  REQUIRE(records.size() == 3);
  CHECK(records[0].seq == 0);
  CHECK(records[1].message.starts_with("nvidia: module verification failed"));
  CHECK(records[2].usec == 23456789);
}

TEST_CASE("kernel log: a real H200 machine's /dev/kmsg: 358 records, continuation lines and FLAGS c, no Xid") {
  // Captured by bench/gpu-health (`cat /dev/kmsg`) on a one-H200 machine, driver 580.159.04.
  const auto records = verify::parse_kmsg_text(test::slurp(test::fixtures() / "kernel_log" / "kmsg-h200"));
  REQUIRE(records.size() == 358);
  for (std::size_t i = 0; i < records.size(); ++i)
    CHECK(records[i].seq == i);
  CHECK(records.back().message.starts_with("NVRM: Persistence mode is deprecated"));
  const auto nvrm =
      std::count_if(records.begin(), records.end(), [](const auto& r) { return r.message.starts_with("NVRM: "); });
  CHECK(nvrm == 3);
  CHECK(std::none_of(records.begin(), records.end(),
                     [](const auto& r) { return verify::parse_xid_line(r.message).has_value(); }));
  const auto checks = run_checks(root_with("h200", "kmsg-h200"));
  CHECK(checks.at("gpu.xid").verdict == verify::Verdict::pass);
  CHECK(checks.at("gpu.xid").observed.starts_with("no Xid ("));
}

TEST_CASE("kernel log: read through HostFs under a root, with its uptime") {
  const auto root = root_with("read", "kmsg-link-flaps");
  util::HostFs fs(root);
  auto log = verify::read_kernel_log(fs);
  REQUIRE(log.has_value());
  CHECK(log->records.size() == 16);
  REQUIRE(log->uptime_seconds);
  CHECK(*log->uptime_seconds == doctest::Approx(100000));
  CHECK(log->source == (root / "dev" / "kmsg").string());
}

TEST_CASE("kernel log: the window keeps the records of the last 24 hours by their timestamps") {
  const auto root = root_with("window", "kmsg-link-flaps");
  util::HostFs fs(root);
  auto log = verify::read_kernel_log(fs);
  REQUIRE(log.has_value());
  const auto recent = verify::records_within(*log, std::chrono::hours(24));
  // Uptime 100000 s: the window starts at 13600 s; the three boot lines (0 to 23 s) and ib3's six
  // lines (5000 s) are older, ib6's seven lines (90000 s) are in it.
  CHECK(recent.size() == 7);
  CHECK(std::all_of(recent.begin(), recent.end(), [](const auto* r) { return r->usec >= 13600000000ull; }));
  // Without /proc/uptime "now" is unknown and every record counts.
  std::filesystem::remove(root / "proc" / "uptime");
  auto all = verify::read_kernel_log(fs);
  REQUIRE(all.has_value());
  CHECK_FALSE(all->uptime_seconds);
  CHECK(verify::records_within(*all, std::chrono::hours(24)).size() == 16);
}

TEST_CASE("kernel log: no /dev/kmsg is an error that says so") {
  const auto root = test::scratch("hpcbake-klog-none");
  util::HostFs fs(root);
  auto log = verify::read_kernel_log(fs);
  REQUIRE_FALSE(log.has_value());
  CHECK(log.error().message.find("/dev/kmsg: no such device") != std::string::npos);
}

TEST_CASE("kernel log: the real /dev/kmsg is read to EAGAIN, or refused saying why") {
  util::HostFs fs("/");
  auto log = verify::read_kernel_log(fs);
  if (log.has_value()) {
    CHECK(log->source == "/dev/kmsg");
    CHECK_FALSE(log->records.empty());
    CHECK(std::is_sorted(log->records.begin(), log->records.end(),
                         [](const auto& a, const auto& b) { return a.seq < b.seq; }));
  } else {
    CHECK(log.error().message.starts_with("/dev/kmsg: "));
    if (log.error().kind == ErrorKind::permission) CHECK(log.error().message.find("CAP_SYSLOG") != std::string::npos);
  }
}

TEST_CASE("xid: NVIDIA's catalogue lists Xids 1 to 172 with their immediate action") {
  const auto cat = verify::xid_catalogue();
  REQUIRE(cat.size() == 172);
  for (std::size_t i = 0; i < cat.size(); ++i)
    CHECK(cat[i].code == static_cast<int>(i) + 1);
  const auto* x79 = verify::find_xid(79);
  REQUIRE(x79);
  CHECK(x79->mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS");
  CHECK(x79->description == "GPU has fallen off the bus");
  CHECK(x79->bucket == "RESTART_BM");
  CHECK(x79->action == verify::XidAction::reboot_node);
  CHECK(verify::takes_node_out(x79->action));
  const auto* x13 = verify::find_xid(13);
  REQUIRE(x13);
  CHECK(x13->description == "Graphics Engine Exception");
  CHECK(x13->action == verify::XidAction::restart_app);
  CHECK_FALSE(verify::takes_node_out(x13->action));
  CHECK(verify::find_xid(95)->action == verify::XidAction::reset_gpu);
  CHECK(verify::find_xid(63)->action == verify::XidAction::none);
  CHECK(verify::find_xid(48)->action == verify::XidAction::workflow);
  CHECK(verify::find_xid(151)->action == verify::XidAction::reboot_node); // RESTART_VM
  CHECK(verify::find_xid(168)->action == verify::XidAction::unstated);
  CHECK(verify::find_xid(173) == nullptr);
  CHECK(verify::find_xid(0) == nullptr);
}

TEST_CASE("xid: Azure's XID_EC fails a node for 18 Xids") {
  CHECK(verify::azure_failing_xids().size() == 18);
  for (int code : {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120})
    CHECK(verify::azure_fails_node(code));
  for (int code : {13, 31, 43, 45, 94, 95})
    CHECK_FALSE(verify::azure_fails_node(code));
}

TEST_CASE("xid: the driver's Xid lines, old and new") {
  auto a = verify::parse_xid_line("NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
                                  "off the bus.");
  REQUIRE(a);
  CHECK(a->bus == "0000:91:00");
  CHECK(a->code == 79);
  CHECK(a->detail == "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.");
  // NVIDIA's own examples (analyzing-xid-catalog.html, "Step 1").
  auto b = verify::parse_xid_line("NVRM: Xid (0000:03:00): 14, Channel 00000001");
  REQUIRE(b);
  CHECK(b->bus == "0000:03:00");
  CHECK(b->code == 14);
  auto c = verify::parse_xid_line("NVRM: Xid (PCI:0000:5a:00): 79, GPU has fallen off the bus.");
  REQUIRE(c);
  CHECK(c->code == 79);
  auto d = verify::parse_xid_line("NVRM: Xid (PCI:0001:00:00.0): 63, pid=1896, Row Remapper");
  REQUIRE(d);
  CHECK(d->bus == "0001:00:00.0");
  // An NVSwitch SXid, other NVRM lines and malformed ones are not Xid lines.
  CHECK_FALSE(
      verify::parse_xid_line("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"));
  CHECK_FALSE(verify::parse_xid_line("NVRM: GPU 0000:91:00.0: GPU has fallen off the bus."));
  CHECK_FALSE(verify::parse_xid_line("NVRM: Xid (PCI:zz): 79, x"));
  CHECK_FALSE(verify::parse_xid_line("NVRM: Xid (PCI:0000:91:00): 79x, x"));
  CHECK_FALSE(verify::parse_xid_line("NVRM: Xid (PCI:0000:91:00): , x"));
}

TEST_CASE("kernel log checks: a clean log passes, with every IB port's counters") {
  const auto checks = run_checks(root_with("clean", "kmsg-clean"));
  REQUIRE(checks.count("gpu.xid"));
  CHECK(checks.at("gpu.xid").verdict == verify::Verdict::pass);
  CHECK(checks.at("gpu.xid").observed.starts_with("no Xid ("));
  CHECK(checks.at("ib.link_flaps").verdict == verify::Verdict::pass);
  for (int i = 0; i < 8; ++i) {
    const auto id = "ib.mlx5_ib" + std::to_string(i) + ":1.link_flaps";
    REQUIRE(checks.count(id));
    CHECK(checks.at(id).verdict == verify::Verdict::pass);
    CHECK(checks.at(id).observed.ends_with("error counters since the driver loaded: all 12 zero"));
  }
  CHECK_FALSE(checks.count("ib.mlx5_an0:1.link_flaps")); // Ethernet
}

TEST_CASE("kernel log checks: Xid 79 fails its GPU and the overall check, saying reboot") {
  const auto checks = run_checks(root_with("xid79", "kmsg-xid79"));
  REQUIRE(checks.count("gpu.0000:91:00.xid"));
  const auto& c = checks.at("gpu.0000:91:00.xid");
  CHECK(c.verdict == verify::Verdict::fail);
  CHECK(c.observed.find("GPU has fallen off the bus") != std::string::npos);
  CHECK(c.observed.find("RESTART_BM, reboot the node") != std::string::npos);
  CHECK(c.observed.find("Azure fails the node for it") != std::string::npos);
  CHECK(c.hint.starts_with("reboot the node"));
  CHECK(checks.at("gpu.xid").verdict == verify::Verdict::fail);
}

TEST_CASE("kernel log checks: Xid 13 alone is the application's: a pass that names it") {
  const auto checks = run_checks(root_with("xid13", "kmsg-xid13"));
  const auto& c = checks.at("gpu.0000:cb:00.xid");
  CHECK(c.verdict == verify::Verdict::pass);
  CHECK(c.observed.find("Xid 13 x3") != std::string::npos);
  CHECK(c.observed.find("RESTART_APP, restart the application") != std::string::npos);
  CHECK(checks.at("gpu.xid").verdict == verify::Verdict::pass);
}

TEST_CASE("kernel log checks: lost carrier in the window and a raised counter fail their ports") {
  const auto root = root_with("flaps", "kmsg-link-flaps");
  test::write(root / "sys/class/infiniband/mlx5_ib2/ports/1/counters/link_downed", "11\n");
  test::write(root / "sys/class/infiniband/mlx5_ib1/ports/1/counters/link_downed", "10\n");
  const auto checks = run_checks(root);
  CHECK(checks.at("ib.link_flaps").verdict == verify::Verdict::fail);
  CHECK(checks.at("ib.link_flaps").observed.find("ib6 6") != std::string::npos);
  // ib3's lines are older than 24 hours.
  CHECK(checks.at("ib.link_flaps").observed.find("ib3") == std::string::npos);
  CHECK(checks.at("ib.mlx5_ib6:1.link_flaps").verdict == verify::Verdict::fail);
  CHECK(checks.at("ib.mlx5_ib3:1.link_flaps").verdict == verify::Verdict::pass);
  // rdma-core's threshold: above 10 fails, 10 does not.
  CHECK(checks.at("ib.mlx5_ib2:1.link_flaps").verdict == verify::Verdict::fail);
  CHECK(checks.at("ib.mlx5_ib2:1.link_flaps").hint.find("link_downed 11 > 10") != std::string::npos);
  CHECK(checks.at("ib.mlx5_ib1:1.link_flaps").verdict == verify::Verdict::pass);
  CHECK(checks.at("ib.mlx5_ib1:1.link_flaps").observed.ends_with("link_downed 10 (the other 11 zero)"));
}

TEST_CASE("kernel log checks: an unreadable log skips the Xid check, saying why") {
  const auto root = root_with("unreadable", "kmsg-clean");
  std::filesystem::remove(root / "dev" / "kmsg");
  const auto checks = run_checks(root);
  CHECK(checks.at("gpu.xid").verdict == verify::Verdict::skip);
  CHECK(checks.at("gpu.xid").observed.find("not checked: ") == 0);
  CHECK(checks.at("ib.link_flaps").verdict == verify::Verdict::skip);
  // The counters are still read.
  CHECK(checks.at("ib.mlx5_ib0:1.link_flaps").verdict == verify::Verdict::pass);
  CHECK(checks.at("ib.mlx5_ib0:1.link_flaps").observed.find("kernel log unreadable") != std::string::npos);
}
