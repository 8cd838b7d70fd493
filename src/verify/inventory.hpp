#pragma once
// The host inventory as Azure's node health checks read it (LBNL NHC's hardware checks and
// Azure's own NVMe count), as pure functions of the files' text: checks_inventory.cpp reads the
// files through util::HostFs and compares; the unit tests feed these texts directly.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::verify {

// nhc_hw_gather_data's CPU figures (mej/nhc@9c4a38c0c9f48f92005c9120ca88145c33841dac
// scripts/lbnl_hw.nhc): sockets are the distinct "physical id" values, cores sockets x the last
// "cpu cores", threads sockets x the last "siblings"; without a physical id every "processor" is
// a socket, a core and a thread; with neither, 1, 1, 1.
struct CpuInfo {
  int sockets = 0, cores = 0, threads = 0;
  int processors = 0; // "processor" lines (logical CPUs), shown beside NHC's figures
  int cpu_cores = 0;  // the last "cpu cores" value (0: none)
  int siblings = 0;   // the last "siblings" value (0: none)
};
CpuInfo nhc_cpuinfo(std::string_view proc_cpuinfo);

// /proc/meminfo's MemTotal in kB (what NHC calls HW_RAM_TOTAL); nullopt when the line is missing.
std::optional<std::int64_t> meminfo_total_kb(std::string_view proc_meminfo);

// check_hw_physmem MIN MAX FUDGE% (lbnl_hw.nhc): the fudge is FUDGE percent of the machine's own
// MemTotal (integer arithmetic, as bash's $((FUDGE*HW_RAM_TOTAL/100))), and MemTotal passes when
// MemTotal + fudge >= MIN and MemTotal - fudge <= MAX.
std::int64_t nhc_fudge_kb(std::int64_t total_kb, double pct);
bool nhc_physmem_ok(std::int64_t total_kb, std::int64_t min_kb, std::int64_t max_kb, double pct);

// azure_nvme_count.nhc's count: the entries of /dev named like nvme[0-9]+n1 (`find /dev
// -maxdepth 1 | grep -cE '/dev/nvme[0-9]+n1$'`), the first namespace of each NVMe controller.
int nvme_namespace_count(const std::vector<std::string>& dev_entries);

// The IPv6 addresses /proc/net/if_inet6 gives `ifname` ("fe80::215:5dff:fe33:1/64").
std::vector<std::string> ipv6_addresses(std::string_view if_inet6, std::string_view ifname);

// The IPv4 addresses on `ifname`, from files alone: procfs names no interface beside an IPv4
// address, so each local address ("/32 host LOCAL" in /proc/net/fib_trie) is given to the
// interface whose connected route (/proc/net/route: no gateway, a non-zero mask) holds it. Two
// interfaces in one subnet both show that subnet's addresses ("10.0.0.4/24").
std::vector<std::string> ipv4_addresses(std::string_view fib_trie, std::string_view route, std::string_view ifname);

} // namespace hpcbake::verify
