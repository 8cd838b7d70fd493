// InfiniBand checks through libibverbs, as applications see the ports. Level 0: the port
// count, and per port its state, physical state and rate (speed x width). Level 2: an RDMA
// write loopback between two queue pairs on each port, its bandwidth against a threshold.
#include "verify/checks.hpp"

#include "verify/ibverbs.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hpcbake::verify {

namespace {

std::string rate_text(const ibverbs::PortInfo& p) {
  auto r = p.rate_gbps();
  return fmt::format("{} Gb/s ({} {})", r ? number(*r) : "unknown", ibverbs::width_name(p.width),
                     ibverbs::speed_name(p.speed));
}

// A port's state and rate against what the size promises.
void port_checks(Recorder& rec, const Expectations& e, const ibverbs::PortInfo& p) {
  const std::string id = "ib." + p.label() + ".";
  const bool active = p.state == 4 && p.phys_state == 5;
  rec.add(make_check(id + "state", 0, p.label() + ": port state", "ACTIVE, LinkUp",
                     fmt::format("{}, {}", ibverbs::port_state_name(p.state), ibverbs::phys_state_name(p.phys_state)),
                     active ? Verdict::pass : Verdict::fail,
                     active ? ""
                            : fmt::format("`ibstat {}`: {}", p.device,
                                          p.phys_state != 5 ? "no physical link: the VM must be in an InfiniBand "
                                                              "placement (same VM scale set or availability set); "
                                                              "deallocate and start it if the link stays down"
                                                            : "the link is up but the subnet manager has not "
                                                              "activated the port yet; wait a minute and verify again"),
                     "InfiniBand port must be ACTIVE/LinkUp"));
  const auto rate = p.rate_gbps();
  const bool rate_ok = rate && std::abs(*rate - e.ib_rate_gbps) < 0.5;
  Check r = make_check(id + "rate", 0, p.label() + ": rate (speed x width)", fmt::format("{} Gb/s", e.ib_rate_gbps),
                       rate_text(p), rate_ok ? Verdict::pass : Verdict::fail,
                       rate_ok ? ""
                               : fmt::format("the link trained at a lower rate: `ibstat {}`, `mlxlink -d {}` (cable or "
                                             "switch port); report the node if it persists",
                                             p.device, p.device),
                       e.size_file + " infiniband.rate_gbps");
  r.value = rate;
  r.threshold = e.ib_rate_gbps;
  rec.add(std::move(r));
}

} // namespace

void ib_checks(Recorder& rec, const Expectations& e, int level) {
  const auto& req = rec.request();
  const std::string expected_count = std::to_string(e.ib_ports);
  auto verbs = ibverbs::Verbs::load();
  if (!verbs) {
    rec.add(make_check("ib.verbs", 0, "RDMA stack answers (libibverbs)", "libibverbs.so.1 loads, devices listed",
                       verbs.error().message, Verdict::fail, verbs.error().hint));
    return;
  }
  auto all = verbs->ports();
  if (!all) {
    rec.add(make_check("ib.verbs", 0, "RDMA stack answers (libibverbs)", "libibverbs.so.1 loads, devices listed",
                       all.error().message, Verdict::fail, all.error().hint));
    return;
  }
  rec.add(make_check("ib.verbs", 0, "RDMA stack answers (libibverbs)", "libibverbs.so.1 loads, devices listed",
                     fmt::format("{} ports", all->size()), Verdict::pass));

  // The ports the size promises: InfiniBand link layer (Azure's accelerated-networking NIC is
  // an Ethernet RDMA device), or exactly the devices named with --ib-device.
  std::vector<ibverbs::PortInfo> ports;
  for (const auto& p : *all) {
    const bool named = std::find(req.ib_devices.begin(), req.ib_devices.end(), p.device) != req.ib_devices.end();
    if (req.ib_devices.empty() ? p.infiniband() : named) ports.push_back(p);
  }
  std::vector<std::string> labels;
  for (const auto& p : ports)
    labels.push_back(p.label());
  const bool count_ok = static_cast<int>(ports.size()) == e.ib_ports;
  Check c = make_check("ib.port_count", 0, req.ib_devices.empty() ? "InfiniBand ports" : "RDMA ports (--ib-device)",
                       expected_count,
                       fmt::format("{}{}{}", ports.size(), labels.empty() ? "" : ": ", util::join(labels, ", ")),
                       count_ok ? Verdict::pass : Verdict::fail,
                       count_ok ? ""
                                : "`ibv_devinfo`, `ibstat`; an HCA missing from the guest needs the VM deallocated "
                                  "and started again; with DOCA-OFED, `systemctl status openibd`",
                       e.size_file + " infiniband.ports");
  c.value = static_cast<double>(ports.size());
  c.threshold = e.ib_ports;
  rec.add(std::move(c));

  for (const auto& p : ports)
    port_checks(rec, e, p);
  if (level < 2) return;

  ibverbs::LoopbackOptions lo;
  lo.gid_index = req.ib_gid_index;
  lo.iterations = req.ib_iterations;
  lo.max_seconds = req.ib_seconds;
  lo.message_bytes = req.ib_message_bytes;
  for (const auto& p : ports) {
    const std::string id = "ib." + p.label() + ".rdma_write";
    const std::string title = p.label() + ": RDMA write loopback (two RC queue pairs)";
    const std::string expected = fmt::format(">= {} Gb/s, data intact", number(*e.ib_bw_gbps));
    rec.status(fmt::format("RDMA write loopback on {}", p.label()));
    auto r = verbs->write_loopback(p.device, p.port, lo);
    if (!r) {
      rec.add(make_check(id, 2, title, expected, r.error().message, Verdict::fail, r.error().hint, e.ib_bw_source));
      continue;
    }
    const bool ok = r->data_ok && r->gbps >= *e.ib_bw_gbps;
    Check c2 = make_check(id, 2, title, expected,
                          fmt::format("{:.1f} Gb/s over {} MiB{}, {}, data {}", r->gbps, r->bytes >> 20,
                                      r->time_limited ? fmt::format(" (stopped at {:.1f} s)", r->seconds) : "",
                                      r->addressing, r->data_ok ? "intact" : "CORRUPTED"),
                          ok ? Verdict::pass : Verdict::fail,
                          ok            ? ""
                          : !r->data_ok ? "the HCA returned different bytes than were written: report the node"
                                        : fmt::format("`ib_write_bw -d {} -i {}` against a second shell on this host; "
                                                      "check the port rate and `mlxlink -d {}`",
                                                      p.device, p.port, p.device),
                          e.ib_bw_source);
    c2.value = r->gbps;
    c2.threshold = e.ib_bw_gbps;
    rec.add(std::move(c2));
  }
}

} // namespace hpcbake::verify
