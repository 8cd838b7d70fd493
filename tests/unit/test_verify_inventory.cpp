// verify/inventory.hpp: /proc/cpuinfo, /proc/meminfo, /dev and /proc/net read as LBNL NHC and
// Azure's node health checks read them (mej/nhc@9c4a38c scripts/lbnl_hw.nhc,
// Azure/azurehpc-health-checks@0e0a1ac customTests/azure_nvme_count.nhc).
#include "verify/inventory.hpp"

#include "plan/plan.hpp"
#include "verify/checks.hpp"

#include "helpers.hpp"
#include "shipped.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace hpcbake;

namespace {

std::string nd_file(const std::string& path) {
  return test::slurp(test::host_fixture("nd96isr_h100_v5") / path);
}

// One /proc/cpuinfo block per logical CPU, NHC's fields only.
std::string cpuinfo(int sockets, int cores_per_socket, int threads_per_core) {
  std::string out;
  int p = 0;
  for (int s = 0; s < sockets; ++s)
    for (int c = 0; c < cores_per_socket * threads_per_core; ++c, ++p)
      out += "processor\t: " + std::to_string(p) + "\nphysical id\t: " + std::to_string(s) +
             "\nsiblings\t: " + std::to_string(cores_per_socket * threads_per_core) +
             "\ncore id\t\t: " + std::to_string(c % cores_per_socket) +
             "\ncpu cores\t: " + std::to_string(cores_per_socket) + "\n\n";
  return out;
}

} // namespace

TEST_CASE("inventory: the ND H100 v5 fixture's cpuinfo gives check_hw_cpuinfo 2 96 96") {
  const auto c = verify::nhc_cpuinfo(nd_file("proc/cpuinfo"));
  CHECK(c.sockets == 2);
  CHECK(c.cores == 96);
  CHECK(c.threads == 96);
  CHECK(c.processors == 96);
  CHECK(c.cpu_cores == 48);
  CHECK(c.siblings == 48);
}

TEST_CASE("inventory: NHC's cpu figures: sockets x cpu cores, sockets x siblings") {
  SUBCASE("SMT on: threads are sockets x siblings") {
    const auto c = verify::nhc_cpuinfo(cpuinfo(2, 4, 2));
    CHECK(c.sockets == 2);
    CHECK(c.cores == 8);
    CHECK(c.threads == 16);
    CHECK(c.processors == 16);
  }
  SUBCASE("one socket gone") {
    const auto c = verify::nhc_cpuinfo(cpuinfo(1, 48, 1));
    CHECK(c.sockets == 1);
    CHECK(c.cores == 48);
    CHECK(c.threads == 48);
  }
  SUBCASE("no physical id (aarch64): every processor is a socket, core and thread") {
    const auto c = verify::nhc_cpuinfo("processor\t: 0\nBogoMIPS\t: 50.00\n\nprocessor\t: 1\nBogoMIPS\t: 50.00\n");
    CHECK(c.sockets == 2);
    CHECK(c.cores == 2);
    CHECK(c.threads == 2);
  }
  SUBCASE("physical ids without cpu cores: NHC's fallback 1, 1, 1") {
    const auto c = verify::nhc_cpuinfo("processor\t: 0\nphysical id\t: 0\n\nprocessor\t: 1\nphysical id\t: 1\n");
    CHECK(c.sockets == 1);
    CHECK(c.cores == 1);
    CHECK(c.threads == 1);
    CHECK(c.processors == 2);
  }
  SUBCASE("empty") {
    const auto c = verify::nhc_cpuinfo("");
    CHECK(c.sockets == 1);
    CHECK(c.processors == 0);
  }
}

TEST_CASE("inventory: MemTotal and check_hw_physmem's fudge of the machine's own MemTotal") {
  CHECK(verify::meminfo_total_kb(nd_file("proc/meminfo")) == 1959874560);
  CHECK(verify::meminfo_total_kb("MemFree: 1 kB\n") == std::nullopt);
  // 1915071MB (conf/nd96isr_h100_v5.conf) is 1961032704 kB: NHC's MB is 1024 kB.
  const std::int64_t want = std::int64_t{1915071} * 1024;
  CHECK(verify::nhc_physmem_ok(1959874560, want, want, 5));
  CHECK(verify::nhc_physmem_ok(want, want, want, 0));
  CHECK_FALSE(verify::nhc_physmem_ok(want - 1, want, want, 0));
  // 10 % low fails a 5 % fudge; 4 % low passes it.
  CHECK_FALSE(verify::nhc_physmem_ok(want * 9 / 10, want, want, 5));
  CHECK(verify::nhc_physmem_ok(want * 96 / 100, want, want, 5));
  // The fudge is a percentage of MemTotal, not of the expected figure, in bash's integer order.
  CHECK(verify::nhc_fudge_kb(1000, 3) == 30);
  CHECK(verify::nhc_fudge_kb(199, 5) == 9); // 5*199/100 = 9 (995/100)
  // 953 + 5 % of 953 (47) = 1000 reaches 1000; 952 + 47 does not.
  CHECK(verify::nhc_physmem_ok(953, 1000, 1000, 5));
  CHECK_FALSE(verify::nhc_physmem_ok(952, 1000, 1000, 5));
  // Too much memory fails too.
  CHECK_FALSE(verify::nhc_physmem_ok(want * 11 / 10, want, want, 5));
}

TEST_CASE("inventory: NVMe count is /dev/nvme<N>n1, as azure_nvme_count.nhc greps it") {
  CHECK(verify::nvme_namespace_count({"nvme0", "nvme0n1", "nvme0n1p1", "nvme1n1", "nvme10n1", "nvme1n2", "sda"}) == 3);
  CHECK(verify::nvme_namespace_count({}) == 0);
}

TEST_CASE("inventory: IPv6 addresses per interface from /proc/net/if_inet6") {
  const auto text = nd_file("proc/net/if_inet6");
  CHECK(verify::ipv6_addresses(text, "ib3") == std::vector<std::string>{"fe80::15:5dff:fe00:310/64"});
  CHECK(verify::ipv6_addresses(text, "lo") == std::vector<std::string>{"::1/128"});
  CHECK(verify::ipv6_addresses(text, "ib9").empty());
  CHECK(verify::ipv6_addresses("garbage line\nfe80 02 40 20 80 ib0\n", "ib0").empty());
}

TEST_CASE("inventory: IPv4 addresses per interface from fib_trie's local addresses and route's networks") {
  const auto trie = nd_file("proc/net/fib_trie");
  const auto route = nd_file("proc/net/route");
  CHECK(verify::ipv4_addresses(trie, route, "ib0") == std::vector<std::string>{"172.16.1.12/16"});
  CHECK(verify::ipv4_addresses(trie, route, "eth0") == std::vector<std::string>{"10.0.0.4/24"});
  // ib1 has no route of its own; lo's 127.0.0.1 is in the local table only, never in route.
  CHECK(verify::ipv4_addresses(trie, route, "ib1").empty());
  CHECK(verify::ipv4_addresses(trie, route, "lo").empty());
  // Without its connected route the address is not given to the interface.
  CHECK(verify::ipv4_addresses(trie, "Iface\tDestination\tGateway\n", "ib0").empty());
}

TEST_CASE("inventory: a size's figures reach the verify step from Azure's conf, kB kept exact") {
  const auto expect = [](const std::string& size) {
    plan::PlanRequest r;
    r.size = size;
    r.distro = "ubuntu-22.04";
    auto p = plan::make_plan(test::shipped_manifests(), r);
    REQUIRE(p.has_value());
    auto e = verify::expectations(*p, 0.75);
    REQUIRE(e.has_value());
    return *e;
  };
  // conf/hb120rs_v3.conf: check_hw_cpuinfo 2 120 120, check_hw_physmem 470543164kB 470543164kB 3%.
  const auto hb = expect("Standard_HB120rs_v3");
  CHECK(hb.cpu_sockets == 2);
  CHECK(hb.cpu_cores == 120);
  CHECK(hb.cpu_threads == 120);
  CHECK(hb.memory_kb == 470543164);
  CHECK(hb.memory_mb == 459514);
  CHECK(hb.memory_tolerance_pct == 3.0);
  CHECK(hb.nvme_count == std::nullopt);
  // conf/nd96isr_h100_v5.conf gives MB: no memory_kb; check_nvme_count 8.
  const auto nd = expect("Standard_ND96isr_H100_v5");
  CHECK(nd.memory_kb == std::nullopt);
  CHECK(nd.memory_mb == 1915071);
  CHECK(nd.nvme_count == 8);
  // No conf for NCasT4_v3: nothing to compare with.
  const auto t4 = expect("Standard_NC4as_T4_v3");
  CHECK(t4.cpu_threads == std::nullopt);
  CHECK(t4.memory_mb == std::nullopt);
}
