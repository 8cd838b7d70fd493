// Level 0 checks that read the kernel log (verify/kernel_log.hpp) and the InfiniBand port counters:
//   gpu.xid, gpu.<bus>.xid        Xids the NVIDIA driver logged since boot, each named from NVIDIA's
//                                 catalogue with its immediate action (verify/xid.hpp); a failure when
//                                 Azure's health checks fail a node for it (XID_EC) or NVIDIA's action
//                                 is a GPU reset, a reboot or support.
//   ib.link_flaps,                "lost carrier" lines per IPoIB interface in the last 24 hours, as
//   ib.<dev>:<port>.link_flaps    Azure's check_ib_link_flapping counts them (5 or more fail), and each
//                                 port's error counters in sysfs against rdma-core's thresholds.
// The check's window: the kernel log is what its ring buffer still holds of this boot (Xids: all of it;
// lost carrier: the records of the last 24 hours by their timestamps against /proc/uptime); the sysfs
// counters count since the driver loaded (or since someone cleared them), not over a window.
#include "verify/checks.hpp"

#include "detect/infiniband.hpp"
#include "verify/kernel_log.hpp"
#include "verify/xid.hpp"

#include "util/strings.hpp"
#include "util/utf8.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

namespace hpcbake::verify {

namespace {

// --- Xids ---

constexpr const char* kXidExpected = "no Xid that Azure fails a node for, that NVIDIA resolves by a GPU reset, a "
                                     "reboot or support, or that NVIDIA gives no action for";

struct SeenXid {
  int count = 0;
  std::uint64_t first_usec = 0;
  std::string detail; // of the first occurrence
};
using XidsByBus = std::map<std::string, std::map<int, SeenXid>>;

// Azure's list, an action that takes the node out, an Xid NVIDIA gives no action for (162-172, or
// one the catalogue does not list: never assumed harmless), and Xid 154, whose text names the
// recovery action the driver wants ("... to 0x2 (Node Reboot Required)").
bool xid_fails(int code, const std::string& detail) {
  const auto* entry = find_xid(code);
  if (azure_fails_node(code) || !entry || takes_node_out(entry->action) || entry->action == XidAction::unstated)
    return true;
  return code == 154 &&
         (detail.find("Reboot Required") != std::string::npos || detail.find("Reset Required") != std::string::npos ||
          detail.find("Drain") != std::string::npos);
}

std::string xid_text(int code, const SeenXid& seen) {
  const auto* entry = find_xid(code);
  const std::string meaning =
      entry ? fmt::format("{} \"{}\"; NVIDIA: {}", entry->mnemonic, entry->description,
                          entry->bucket.empty() ? std::string(to_string(entry->action))
                                                : fmt::format("{}, {}", entry->bucket, to_string(entry->action)))
            : std::string("not in NVIDIA's catalogue");
  return fmt::format("Xid {} x{} (first at {:.1f} s: {}): {}{}", code, seen.count,
                     static_cast<double>(seen.first_usec) / 1e6, util::excerpt(seen.detail), meaning,
                     azure_fails_node(code) ? "; Azure fails the node for it" : "");
}

// What to do, from the most severe Xid that fails the check.
std::string xid_hint(const std::string& bus, const std::map<int, SeenXid>& xids) {
  const auto worst = [&](XidAction a) -> std::optional<int> {
    for (const auto& [code, seen] : xids) {
      const auto* entry = find_xid(code);
      if (entry && entry->action == a) return code;
    }
    return std::nullopt;
  };
  const std::string device = bus.size() == 10 ? bus + ".0" : bus;
  if (auto c = worst(XidAction::reboot_node))
    return fmt::format("reboot the node (NVIDIA's immediate action for Xid {}: {}); if the Xid comes back, take the "
                       "node out of service and report it (on Azure, a support request for the VM)",
                       *c, find_xid(*c)->bucket);
  if (auto c = worst(XidAction::reset_gpu))
    return fmt::format("reset the GPU once no process uses it (`nvidia-smi --gpu-reset -i {}`) or reboot the node "
                       "(NVIDIA's immediate action for Xid {}: RESET_GPU); if the Xid comes back, report the node",
                       device, *c);
  if (auto c = worst(XidAction::report))
    return fmt::format("report the node to support (NVIDIA's immediate action for Xid {}: {})", *c,
                       find_xid(*c)->bucket);
  return fmt::format("Azure's health checks fail a node for these Xids ({}): take the node out of service and "
                     "report it (on Azure, a support request for the VM)",
                     kAzureXidSource);
}

XidsByBus collect_xids(const KernelLog& log) {
  XidsByBus out;
  for (const auto& r : log.records) {
    auto line = parse_xid_line(r.message);
    if (!line) continue;
    auto& seen = out[line->bus][line->code];
    if (seen.count++ == 0) {
      seen.first_usec = r.usec;
      seen.detail = line->detail;
    }
  }
  return out;
}

std::string log_extent(const KernelLog& log) {
  if (log.records.empty()) return fmt::format("{}: no records", log.source);
  const auto& first = log.records.front();
  return fmt::format("{}: {} records from {:.1f} s after boot{}{}", log.source, log.records.size(),
                     static_cast<double>(first.usec) / 1e6,
                     first.seq > 0 ? fmt::format(" (records before #{} overwritten in the ring buffer)", first.seq)
                                   : "",
                     log.lost > 0 ? fmt::format(", {} lost while reading", log.lost) : "");
}

void xid_checks(Recorder& rec, const Result<KernelLog>& log) {
  const std::string source = fmt::format("{}; {}", kXidCatalogueUrl, kAzureXidSource);
  const std::string title = "Xid errors since boot (kernel log)";
  if (!log) {
    rec.add(make_check("gpu.xid", 0, title, kXidExpected, "not checked: " + log.error().message, Verdict::skip,
                       log.error().hint, source));
    return;
  }
  const auto by_bus = collect_xids(*log);
  std::vector<std::string> failing, summary;
  for (const auto& [bus, xids] : by_bus) {
    std::vector<std::string> texts, codes;
    bool fails = false;
    for (const auto& [code, seen] : xids) {
      texts.push_back(xid_text(code, seen));
      codes.push_back(std::to_string(code));
      fails = fails || xid_fails(code, seen.detail);
    }
    rec.add(make_check(fmt::format("gpu.{}.xid", bus), 0, fmt::format("GPU {}: {}", bus, title), kXidExpected,
                       util::join(texts, "; "), fails ? Verdict::fail : Verdict::pass, fails ? xid_hint(bus, xids) : "",
                       source));
    summary.push_back(fmt::format("{} ({})", bus, util::join(codes, ", ")));
    if (fails) failing.push_back(fmt::format("gpu.{}.xid", bus));
  }
  const std::string observed =
      by_bus.empty() ? fmt::format("no Xid ({})", log_extent(*log))
                     : fmt::format("Xids on {} GPU{}: {} ({})", by_bus.size(), by_bus.size() == 1 ? "" : "s",
                                   util::join(summary, ", "), log_extent(*log));
  rec.add(make_check("gpu.xid", 0, title, kXidExpected, observed, failing.empty() ? Verdict::pass : Verdict::fail,
                     failing.empty() ? "" : "see " + util::join(failing, ", ") + " for what to do", source));
}

// --- InfiniBand link flapping ---

constexpr int kFlapWindowHours = 24; // check_ib_link_flapping's TIME_INTERVAL_HOURS default
constexpr int kFlapThreshold = 5;    // its IB_LINK_FLAP_THRESHOLD default: 5 or more events fail
constexpr const char* kFlapSource = "Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a "
                                    "customTests/azure_ib_link_flapping.nhc (24 h, 5 events)";
constexpr const char* kCounterSource = "linux-rdma/rdma-core@a78c47bf86239dccc224b4bd996f230f38bbf433 "
                                       "infiniband-diags/etc/error_thresholds (a counter above its value fails)";

// The port error counters of the kernel's Documentation/ABI/stable/sysfs-class-infiniband (torvalds/linux@031616c)
// (ports/<p>/counters/), each with its threshold in rdma-core's error_thresholds (named there as the
// PortCounters field). port_xmit_wait (PortXmitWait=1000 there) counts congestion ticks, not errors,
// and is left out.
struct CounterRule {
  const char* sysfs;
  std::uint64_t threshold;
};
constexpr CounterRule kCounters[] = {
    {"link_downed", 10},
    {"link_error_recovery", 10},
    {"symbol_error", 10},
    {"port_rcv_errors", 10},
    {"local_link_integrity_errors", 10},
    {"excessive_buffer_overrun_errors", 10},
    {"port_rcv_remote_physical_errors", 100},
    {"port_rcv_switch_relay_errors", 100},
    {"port_xmit_discards", 100},
    {"port_xmit_constraint_errors", 100},
    {"port_rcv_constraint_errors", 100},
    {"VL15_dropped", 100},
};

// "lost carrier" lines (any case) per interface, the interface being the first "ib[0-9a-zA-Z_]+" in
// the line, as check_ib_link_flapping's awk script takes it.
std::map<std::string, int> lost_carrier(const std::vector<const KernelRecord*>& records) {
  std::map<std::string, int> out;
  for (const auto* r : records) {
    const std::string lower = util::to_lower(r->message);
    if (lower.find("lost carrier") == std::string::npos) continue;
    const auto& m = r->message;
    for (std::size_t i = 0; i + 2 < m.size(); ++i) {
      if (m[i] != 'i' || m[i + 1] != 'b') continue;
      std::size_t j = i + 2;
      while (j < m.size() && (std::isalnum(static_cast<unsigned char>(m[j])) || m[j] == '_'))
        ++j;
      if (j == i + 2) continue;
      ++out[m.substr(i, j - i)];
      break;
    }
  }
  return out;
}

// The InfiniBand ports in sysfs (link layer InfiniBand), or every port of the --ib-device names.
std::vector<detect::IbPort> flap_ports(const util::HostFs& fs, const std::vector<std::string>& named) {
  std::vector<detect::IbPort> out;
  for (auto& p : detect::scan_ib_ports(fs)) {
    const bool is_named = std::find(named.begin(), named.end(), p.device) != named.end();
    if (named.empty() ? p.link_layer == "InfiniBand" : is_named) out.push_back(std::move(p));
  }
  return out;
}

std::optional<std::uint64_t> counter(const util::HostFs& fs, const detect::IbPort& p, const char* name) {
  const auto text =
      fs.read_attr(fmt::format("{}/{}/ports/{}/counters/{}", detect::ib_class_dir, p.device, p.port, name));
  std::uint64_t v = 0;
  if (!text) return std::nullopt;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc{} || end != text->data() + text->size()) return std::nullopt;
  return v;
}

void port_flap_check(Recorder& rec, const util::HostFs& fs, const detect::IbPort& p,
                     const std::map<std::string, int>& lost, bool log_read) {
  const std::string label = fmt::format("{}:{}", p.device, p.port);
  const std::string id = "ib." + label + ".link_flaps";
  const std::string title = label + ": link flapping (error counters, lost carrier)";
  const std::string expected =
      fmt::format("fewer than {} lost carrier in {} h; each error counter at most rdma-core's threshold",
                  kFlapThreshold, kFlapWindowHours);
  const std::string source = fmt::format("{}; {}", kFlapSource, kCounterSource);
  std::vector<std::string> counts, over;
  int readable = 0;
  for (const auto& c : kCounters) {
    const auto v = counter(fs, p, c.sysfs);
    if (!v) continue;
    ++readable;
    if (*v > 0) counts.push_back(fmt::format("{} {}", c.sysfs, *v));
    if (*v > c.threshold) over.push_back(fmt::format("{} {} > {}", c.sysfs, *v, c.threshold));
  }
  const auto ifaces = fs.list(fmt::format("{}/{}/device/net", detect::ib_class_dir, p.device));
  int carrier = 0;
  std::vector<std::string> carrier_texts;
  for (const auto& ifc : ifaces) {
    const auto it = lost.find(ifc);
    const int n = it == lost.end() ? 0 : it->second;
    carrier = std::max(carrier, n);
    carrier_texts.push_back(fmt::format("{} {} lost carrier in {} h", ifc, n, kFlapWindowHours));
  }
  const std::string carrier_text = !log_read        ? "lost carrier not counted (kernel log unreadable)"
                                   : ifaces.empty() ? "no IPoIB interface in its device/net"
                                                    : util::join(carrier_texts, ", ");
  if (readable == 0) {
    rec.add(make_check(id, 0, title, expected, fmt::format("no error counters in sysfs; {}", carrier_text),
                       Verdict::skip, "", source));
    return;
  }
  const bool flaps = carrier >= kFlapThreshold;
  const bool ok = over.empty() && !flaps;
  Check c = make_check(
      id, 0, title, expected,
      fmt::format("{}; error counters since the driver loaded: {}", carrier_text,
                  counts.empty() ? fmt::format("all {} zero", readable)
                                 : fmt::format("{} (the other {} zero)", util::join(counts, ", "),
                                               readable - static_cast<int>(counts.size()))),
      ok ? Verdict::pass : Verdict::fail,
      ok ? ""
         : fmt::format("{}the link goes down or takes errors: `mlxlink -d {}` (cable, transceiver, switch port), "
                       "`perfquery -x`; take the node out of service and report it if it persists",
                       over.empty() ? "" : "over threshold: " + util::join(over, ", ") + "; ", p.device),
      source);
  c.value = carrier;
  c.threshold = kFlapThreshold;
  rec.add(std::move(c));
}

void link_flap_checks(Recorder& rec, const util::HostFs& fs, const Result<KernelLog>& log) {
  const std::string title = "IPoIB lost carrier in the last 24 h (kernel log)";
  const std::string expected = fmt::format("fewer than {} per interface in {} h", kFlapThreshold, kFlapWindowHours);
  std::map<std::string, int> lost;
  if (!log) {
    rec.add(make_check("ib.link_flaps", 0, title, expected, "not checked: " + log.error().message, Verdict::skip,
                       log.error().hint, kFlapSource));
  } else {
    lost = lost_carrier(records_within(*log, std::chrono::hours(kFlapWindowHours)));
    std::vector<std::string> texts, flapping;
    for (const auto& [ifc, n] : lost) {
      texts.push_back(fmt::format("{} {}", ifc, n));
      if (n >= kFlapThreshold) flapping.push_back(ifc);
    }
    const std::string window = log->uptime_seconds ? "" : " (no /proc/uptime: every record counted)";
    rec.add(make_check("ib.link_flaps", 0, title, expected,
                       (texts.empty() ? std::string("none") : util::join(texts, ", ")) + window,
                       flapping.empty() ? Verdict::pass : Verdict::fail,
                       flapping.empty() ? ""
                                        : fmt::format("{} lost carrier {} or more times: `ip -s link show {}`, "
                                                      "`mlxlink`; take the node out of service and report it",
                                                      util::join(flapping, ", "), kFlapThreshold, flapping.front()),
                       kFlapSource));
  }
  for (const auto& p : flap_ports(fs, rec.request().ib_devices))
    port_flap_check(rec, fs, p, lost, log.has_value());
}

} // namespace

void kernel_log_checks(Recorder& rec, const Expectations& e) {
  if (!e.nvidia && e.ib_ports == 0) return;
  const auto& fs = *rec.request().fs;
  const auto log = read_kernel_log(fs);
  if (e.nvidia) xid_checks(rec, log);
  if (e.ib_ports > 0) link_flap_checks(rec, fs, log);
}

} // namespace hpcbake::verify
