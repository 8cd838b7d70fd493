// Level 0 host inventory, read through HostFs (so a --root fixture stands in for the machine) the
// way Azure's node health checks read it for the same size:
//   host.cpu         check_hw_cpuinfo SOCKETS CORES THREADS (mej/nhc scripts/lbnl_hw.nhc)
//   host.memory      check_hw_physmem MIN MAX FUDGE% (the same file; sizes in common.nhc)
//   host.nvme_count  check_nvme_count N (Azure/azurehpc-health-checks customTests/azure_nvme_count.nhc)
//   ib.ipoib.*       check_hw_eth ib0 .. ib7 (conf/nd96isr_h100_v5.conf), and each interface up
//                    with an address
// Every figure is the size manifest's, copied from Azure's conf for that size; a size without
// one is a skip saying "no expectation published".
#include "verify/checks.hpp"
#include "verify/inventory.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>
#include <regex>
#include <set>

namespace hpcbake::verify {

namespace {

constexpr const char* kNhcHw = "mej/nhc@9c4a38c0c9f48f92005c9120ca88145c33841dac scripts/lbnl_hw.nhc";
constexpr const char* kAzureNhc = "Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a";

// Whitespace-separated words, as bash's `read -a` splits a line.
std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t'))
      ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t')
      ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

int to_int(std::string_view s) {
  return static_cast<int>(util::parse_int(s).value_or(0));
}

// A little-endian kernel prints each __be32 of /proc/net/route with %08X, so its bytes come out
// reversed; the address is packed the same way here, and a bitwise mask does not care about the
// byte order as long as both sides share it.
std::optional<std::uint32_t> packed_ipv4(std::string_view dotted) {
  const auto parts = util::split(dotted, '.');
  if (parts.size() != 4) return std::nullopt;
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    const auto octet = util::parse_int(parts[i]);
    if (!octet || *octet < 0 || *octet > 255) return std::nullopt;
    v |= static_cast<std::uint32_t>(*octet) << (8 * i);
  }
  return v;
}

int mask_bits(std::uint32_t mask) {
  return std::popcount(mask);
}

// "ib2" before "ib10": the name's trailing number compared as a number.
bool natural_less(const std::string& a, const std::string& b) {
  const auto split_num = [](const std::string& s) {
    std::size_t i = s.size();
    while (i > 0 && std::isdigit(static_cast<unsigned char>(s[i - 1])))
      --i;
    return std::pair{s.substr(0, i), i < s.size() ? util::parse_int(s.substr(i)).value_or(0) : -1};
  };
  return split_num(a) < split_num(b);
}

std::string no_expectation(const std::string& what) {
  return fmt::format("no expectation published: {}", what);
}

void cpu_check(Recorder& rec, const Expectations& e, const util::HostFs& host) {
  const std::string title = "CPU sockets, cores and threads (check_hw_cpuinfo)";
  const std::string source = fmt::format(
      "{} cpu.sockets, cpu.cores, cpu.threads (Azure's check_hw_cpuinfo for the size); {}", e.size_file, kNhcHw);
  if (!e.cpu_threads) {
    rec.add(make_check("host.cpu", 0, title, "-",
                       no_expectation(fmt::format("{} has no cpu.threads (no check_hw_cpuinfo in an "
                                                  "azurehpc-health-checks conf for this size)",
                                                  e.size_file)),
                       Verdict::skip, "", source));
    return;
  }
  const std::string expected =
      fmt::format("{}{} cores, {} threads", e.cpu_sockets ? fmt::format("{} sockets, ", *e.cpu_sockets) : "",
                  e.cpu_cores ? fmt::to_string(*e.cpu_cores) : "any", *e.cpu_threads);
  auto text = host.read("/proc/cpuinfo", util::host_file::proc_table);
  if (!text) {
    rec.add(make_check("host.cpu", 0, title, expected, "/proc/cpuinfo cannot be read", Verdict::fail,
                       "is /proc mounted? `cat /proc/cpuinfo`", source));
    return;
  }
  const CpuInfo c = nhc_cpuinfo(*text);
  std::vector<std::string> wrong;
  if (e.cpu_sockets && *e.cpu_sockets != c.sockets)
    wrong.push_back(fmt::format("sockets {} (expected {})", c.sockets, *e.cpu_sockets));
  if (e.cpu_cores && *e.cpu_cores != c.cores)
    wrong.push_back(fmt::format("cores {} (expected {})", c.cores, *e.cpu_cores));
  if (*e.cpu_threads != c.threads) wrong.push_back(fmt::format("threads {} (expected {})", c.threads, *e.cpu_threads));
  std::string observed = fmt::format("{} sockets, {} cores, {} threads (/proc/cpuinfo: {} physical ids, cpu cores "
                                     "{}, siblings {}; {} logical CPUs)",
                                     c.sockets, c.cores, c.threads, c.sockets, c.cpu_cores, c.siblings, c.processors);
  if (!wrong.empty()) observed += "; wrong: " + util::join(wrong, ", ");
  Check check = make_check(
      "host.cpu", 0, title, expected, observed, wrong.empty() ? Verdict::pass : Verdict::fail,
      wrong.empty() ? ""
                    : "the VM does not have the CPUs its size promises (a socket or vCPUs missing, or SMT switched): "
                      "`lscpu`; deallocate and start the VM again to move it to other hardware, or report it to "
                      "Azure support",
      source);
  check.value = c.threads;
  check.threshold = *e.cpu_threads;
  rec.add(std::move(check));
}

void memory_check(Recorder& rec, const Expectations& e, const util::HostFs& host) {
  const std::string title = "memory (MemTotal, check_hw_physmem)";
  const std::string source = fmt::format("{} memory_{}, checks.memory_tolerance_pct (Azure's check_hw_physmem for "
                                         "the size); {}",
                                         e.size_file, e.memory_kb ? "kb" : "mb", kNhcHw);
  if (!e.memory_mb) {
    rec.add(make_check("host.memory", 0, title, "-", no_expectation(fmt::format("{} has no memory_mb", e.size_file)),
                       Verdict::skip, "", source));
    return;
  }
  // NHC's sizes are binary: 1 MB is 1024 kB (common.nhc nhc_common_parse_size).
  const std::int64_t want_kb = e.memory_kb ? *e.memory_kb : *e.memory_mb * 1024;
  if (!e.memory_tolerance_pct) {
    rec.add(make_check("host.memory", 0, title, fmt::format("{} kB", want_kb),
                       fmt::format("no tolerance published: {} has memory_mb {} but no checks.memory_tolerance_pct "
                                   "(check_hw_physmem's fudge); MemTotal varies by a few percent with the kernel",
                                   e.size_file, *e.memory_mb),
                       Verdict::skip, "", source));
    return;
  }
  const double pct = *e.memory_tolerance_pct;
  const std::string expected = fmt::format("{} kB ({} MB) ± {}% of MemTotal", want_kb, *e.memory_mb, number(pct));
  auto text = host.read("/proc/meminfo", util::host_file::proc_table);
  const auto total = text ? meminfo_total_kb(*text) : std::nullopt;
  if (!total) {
    rec.add(make_check("host.memory", 0, title, expected,
                       text ? "/proc/meminfo has no MemTotal line" : "/proc/meminfo cannot be read", Verdict::fail,
                       "is /proc mounted? `cat /proc/meminfo`", source));
    return;
  }
  const bool ok = nhc_physmem_ok(*total, want_kb, want_kb, pct);
  const double off = 100.0 * static_cast<double>(*total - want_kb) / static_cast<double>(want_kb);
  Check check = make_check(
      "host.memory", 0, title, expected,
      fmt::format("MemTotal {} kB ({}{}% from the size's figure; fudge {} kB)", *total, off >= 0 ? "+" : "",
                  number(std::round(off * 100) / 100), nhc_fudge_kb(*total, pct)),
      ok ? Verdict::pass : Verdict::fail,
      ok ? ""
         : "the VM has not the memory its size promises: `grep MemTotal /proc/meminfo`, `dmesg | grep -i memory` "
           "(a mem= on the kernel command line limits it); deallocate and start the VM again, or report it to Azure "
           "support",
      source);
  check.value = static_cast<double>(*total);
  check.threshold = static_cast<double>(want_kb);
  rec.add(std::move(check));
}

void nvme_check(Recorder& rec, const Expectations& e, const util::HostFs& host) {
  const std::string title = "NVMe devices (check_nvme_count)";
  const std::string source =
      fmt::format("{} nvme_count (Azure's check_nvme_count for the size); {} customTests/azure_nvme_count.nhc",
                  e.size_file, kAzureNhc);
  if (!e.nvme_count) {
    rec.add(make_check("host.nvme_count", 0, title, "-",
                       no_expectation(fmt::format("{} has no nvme_count", e.size_file)), Verdict::skip, "", source));
    return;
  }
  std::vector<std::string> names;
  for (const auto& n : host.list("/dev"))
    if (nvme_namespace_count({n}) == 1) names.push_back(n);
  std::sort(names.begin(), names.end(), natural_less);
  const int count = static_cast<int>(names.size());
  const bool ok = count == *e.nvme_count;
  Check check = make_check(
      "host.nvme_count", 0, title, fmt::format("{} (/dev/nvme*n1)", *e.nvme_count),
      count == 0 ? "0: no /dev/nvme<N>n1" : fmt::format("{}: {}", count, util::join(names, ", ")),
      ok ? Verdict::pass : Verdict::fail,
      ok ? ""
         : "the VM does not show the local NVMe disks its size has: `ls /dev/nvme*`, `lspci | grep -i "
           "'non-volatile'`, `dmesg | grep -i nvme`; deallocate and start the VM again, or report it to Azure support",
      source);
  check.value = count;
  check.threshold = *e.nvme_count;
  rec.add(std::move(check));
}

// IPoIB: the interfaces of type ARPHRD_INFINIBAND (32, include/uapi/linux/if_arp.h), as many as
// the size's ports, each up (operstate) with an address.
void ipoib_checks(Recorder& rec, const Expectations& e, const util::HostFs& host) {
  const std::string source = fmt::format("{} infiniband.ports, infiniband.ipoib; {} conf/nd96isr_h100_v5.conf "
                                         "(check_hw_eth ib0 .. ib7)",
                                         e.size_file, kAzureNhc);
  std::vector<std::string> ifs;
  for (const auto& n : host.list("/sys/class/net"))
    if (host.read_attr("/sys/class/net/" + n + "/type") == "32") ifs.push_back(n);
  std::sort(ifs.begin(), ifs.end(), natural_less);
  const int count = static_cast<int>(ifs.size());
  const bool count_ok = count == e.ib_ports;
  Check c = make_check("ib.ipoib.count", 0, "IPoIB interfaces", fmt::format("{} (one per InfiniBand port)", e.ib_ports),
                       count == 0 ? "none (no /sys/class/net/*/type 32)"
                                  : fmt::format("{}: {}", count, util::join(ifs, ", ")),
                       count_ok ? Verdict::pass : Verdict::fail,
                       count_ok ? ""
                                : "`ip -br link show type ipoib`; the Azure agent sets IPoIB up with OS.EnableRDMA=y "
                                  "(`journalctl -u walinuxagent`); is ib_ipoib loaded (`lsmod | grep ib_ipoib`)?",
                       source);
  c.value = count;
  c.threshold = e.ib_ports;
  rec.add(std::move(c));
  const auto inet6 = host.read("/proc/net/if_inet6", util::host_file::proc_table).value_or("");
  const auto trie = host.read("/proc/net/fib_trie", util::host_file::proc_table).value_or("");
  const auto route = host.read("/proc/net/route", util::host_file::proc_table).value_or("");
  for (const auto& n : ifs) {
    const std::string state = host.read_attr("/sys/class/net/" + n + "/operstate").value_or("unknown");
    auto addrs = ipv4_addresses(trie, route, n);
    for (auto& a : ipv6_addresses(inet6, n))
      addrs.push_back(std::move(a));
    const bool up = state == "up";
    const bool ok = up && !addrs.empty();
    std::string hint;
    if (!up)
      hint = fmt::format("`ip link show {0}`; `ip link set {0} up`, and see why it went down: `dmesg | grep {0}`", n);
    if (addrs.empty())
      hint += fmt::format("{}`ip addr show {}`: no address; the Azure agent gives IPoIB its address with "
                          "OS.EnableRDMA=y (`journalctl -u walinuxagent`)",
                          hint.empty() ? "" : "; ", n);
    rec.add(make_check(
        "ib.ipoib." + n, 0, fmt::format("IPoIB {} up with an address", n),
        "operstate up, an IPv4 or IPv6 address (link-local counts)",
        fmt::format("operstate {}; {}", state, addrs.empty() ? "no address" : util::join(addrs, ", ")),
        ok ? Verdict::pass : Verdict::fail, hint,
        fmt::format("{}; /sys/class/net/{}/operstate, /proc/net/if_inet6, /proc/net/fib_trie and /proc/net/route",
                    source, n)));
  }
}

} // namespace

CpuInfo nhc_cpuinfo(std::string_view proc_cpuinfo) {
  CpuInfo c;
  std::set<std::string, std::less<>> physical_ids;
  int processor = -1;
  bool have_cores = false, have_siblings = false;
  for (auto line : util::split(proc_cpuinfo, '\n')) {
    const auto f = words(line);
    const auto at = [&f](std::size_t i) { return i < f.size() ? f[i] : std::string_view{}; };
    if (at(0) == "processor" && at(1) == ":") {
      ++processor;
    } else if (at(0) == "physical" && at(1) == "id" && at(2) == ":") {
      physical_ids.emplace(at(3));
    } else if (at(0) == "siblings" && at(1) == ":") {
      c.siblings = to_int(at(2));
      have_siblings = true;
    } else if (at(0) == "cpu" && at(1) == "cores" && at(2) == ":") {
      c.cpu_cores = to_int(at(3));
      have_cores = true;
    }
  }
  c.processors = processor + 1;
  const int sockets = static_cast<int>(physical_ids.size());
  if (processor >= 0 && sockets == 0) {
    c.sockets = c.cores = c.threads = processor + 1;
  } else if (have_cores) {
    c.sockets = sockets;
    c.cores = sockets * c.cpu_cores;
    c.threads = have_siblings ? sockets * c.siblings : 0; // HW_THREADS keeps its 0
  } else {
    c.sockets = c.cores = c.threads = 1;
  }
  return c;
}

std::optional<std::int64_t> meminfo_total_kb(std::string_view proc_meminfo) {
  for (auto line : util::split(proc_meminfo, '\n')) {
    const auto f = words(line);
    if (f.size() >= 2 && f[0] == "MemTotal:") return util::parse_int(f[1]);
  }
  return std::nullopt;
}

std::int64_t nhc_fudge_kb(std::int64_t total_kb, double pct) {
  // Whole percentages (every conf's) in NHC's integer order: FUDGE*HW_RAM_TOTAL/100.
  if (pct == std::floor(pct)) return static_cast<std::int64_t>(pct) * total_kb / 100;
  return static_cast<std::int64_t>(std::floor(pct * static_cast<double>(total_kb) / 100.0));
}

bool nhc_physmem_ok(std::int64_t total_kb, std::int64_t min_kb, std::int64_t max_kb, double pct) {
  const std::int64_t fudge = nhc_fudge_kb(total_kb, pct);
  return total_kb + fudge >= min_kb && total_kb - fudge <= max_kb;
}

int nvme_namespace_count(const std::vector<std::string>& dev_entries) {
  static const std::regex nvme("nvme[0-9]+n1");
  return static_cast<int>(std::count_if(dev_entries.begin(), dev_entries.end(),
                                        [](const std::string& n) { return std::regex_match(n, nvme); }));
}

std::vector<std::string> ipv6_addresses(std::string_view if_inet6, std::string_view ifname) {
  // ADDRESS(32 hex) IFINDEX PREFIXLEN SCOPE FLAGS NAME (net/ipv6/addrconf.c if6_seq_show)
  std::vector<std::string> out;
  for (auto line : util::split(if_inet6, '\n')) {
    const auto f = words(line);
    if (f.size() < 6 || f[5] != ifname || f[0].size() != 32) continue;
    std::array<unsigned char, 16> bytes{};
    bool hex = true;
    for (std::size_t i = 0; i < 16 && hex; ++i) {
      const auto b = util::parse_int(f[0].substr(2 * i, 2), 16);
      hex = b.has_value();
      if (b) bytes[i] = static_cast<unsigned char>(*b);
    }
    const auto prefix = util::parse_int(f[2], 16);
    std::array<char, INET6_ADDRSTRLEN> text{};
    if (!hex || !prefix || !inet_ntop(AF_INET6, bytes.data(), text.data(), text.size())) continue;
    out.push_back(fmt::format("{}/{}", text.data(), *prefix));
  }
  return out;
}

std::vector<std::string> ipv4_addresses(std::string_view fib_trie, std::string_view route, std::string_view ifname) {
  // Local addresses: a leaf "|-- A.B.C.D" followed by its "/32 host LOCAL" (net/ipv4/fib_trie.c
  // fib_trie_seq_show); both the Main and the Local table list them, so they are deduplicated.
  std::vector<std::string> locals;
  std::string_view leaf;
  for (auto line : util::split(fib_trie, '\n')) {
    const auto t = util::trim(line);
    if (t.starts_with("|-- "))
      leaf = t.substr(4);
    else if (t.starts_with("+-- "))
      leaf = {};
    else if (t == "/32 host LOCAL" && !leaf.empty() && std::find(locals.begin(), locals.end(), leaf) == locals.end())
      locals.emplace_back(leaf);
  }
  // Connected routes of the interface: Iface Destination Gateway Flags RefCnt Use Metric Mask ...
  std::vector<std::string> out;
  for (auto line : util::split(route, '\n')) {
    const auto f = words(line);
    if (f.size() < 8 || f[0] != ifname) continue;
    const auto dest = util::parse_int(f[1], 16), gw = util::parse_int(f[2], 16), mask = util::parse_int(f[7], 16);
    if (!dest || !gw || !mask || *gw != 0 || *mask == 0) continue;
    for (const auto& a : locals) {
      const auto v = packed_ipv4(a);
      if (!v || (*v & static_cast<std::uint32_t>(*mask)) != static_cast<std::uint32_t>(*dest)) continue;
      auto text = fmt::format("{}/{}", a, mask_bits(static_cast<std::uint32_t>(*mask)));
      if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(std::move(text));
    }
  }
  return out;
}

void inventory_checks(Recorder& rec, const Expectations& e) {
  const util::HostFs& host = *rec.request().fs;
  cpu_check(rec, e, host);
  memory_check(rec, e, host);
  nvme_check(rec, e, host);
  if (!(e.ipoib && e.ib_ports > 0)) return;
  // --ib-device names the RDMA devices to check whatever their link layer (soft-RoCE's rxe0): an
  // Ethernet port has no IPoIB interface, so the size's IPoIB promise is not what is checked.
  if (const auto& named = rec.request().ib_devices; !named.empty()) {
    rec.add(make_check("ib.ipoib.count", 0, "IPoIB interfaces", fmt::format("{} (one per InfiniBand port)", e.ib_ports),
                       fmt::format("not checked: --ib-device names the RDMA devices checked ({}), and IPoIB is "
                                   "checked for the size's InfiniBand ports only",
                                   util::join(named, ", ")),
                       Verdict::skip));
    return;
  }
  ipoib_checks(rec, e, host);
}

} // namespace hpcbake::verify
