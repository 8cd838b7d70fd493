// PCIe and topology checks. Level 0: each GPU's PCIe link (NVML) and each HCA's (sysfs) against
// the size's published layout (its NCCL topology file) or the device's own maximum; every GPU and
// NIC of that layout on this machine's PCI bus on the NUMA node the layout gives (what Azure's
// check_hw_topology compares); on GRID sizes the vGPU licence. Level 1: `nvidia-smi` exits 0 (what
// Azure's check_nvsmi_healthmon runs).
#include "verify/checks.hpp"

#include "verify/nvml.hpp"
#include "verify/topology.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace hpcbake::verify {

namespace {

namespace topo = topology;

constexpr const char* azure_topology_source = "Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a "
                                              "customTests/azure_hw_topology_check.nhc";
constexpr const char* azure_nvsmi_source = "Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a "
                                           "customTests/csc_nvidia_smi.nhc check_nvsmi_healthmon";
// NVIDIA's nvidia-smi documentation, pcie.link.gen.current: "These may be reduced when the GPU is
// not in use."
constexpr const char* idle_gen_source = "https://docs.nvidia.com/deploy/nvidia-smi/index.html (PCI link: \"may be "
                                        "reduced when the GPU is not in use\")";
constexpr const char* grid_source = "NVIDIA Virtual GPU Client Licensing User Guide "
                                    "(https://docs.nvidia.com/vgpu/16.0/grid-licensing-user-guide/index.html): an "
                                    "unlicensed vGPU is progressively degraded";

struct Gpu {
  unsigned index = 0;
  nvml::Device dev = nullptr;
  std::string name;   // "GPU 0 (NVIDIA H100 80GB HBM3, 00000001:00:00.0)"
  std::string bus_id; // normalised: "0001:00:00.0"; empty when NVML does not say
};

const plan::PciTopologyEntry* in_layout(const Expectations& e, const std::string& bus_id) {
  if (bus_id.empty()) return nullptr;
  const auto it = std::find_if(e.pci_topology.begin(), e.pci_topology.end(), [&](const plan::PciTopologyEntry& t) {
    return topo::normalise_bus_id(t.bus_id) == bus_id;
  });
  return it == e.pci_topology.end() ? nullptr : &*it;
}

// What the size's layout says of a device's link: its own entry, else, for a device at a bus id the
// layout does not list (a VM on other hardware; topology.gpu_hca fails that), the link every entry of
// its class shares ("0x0302": GPU, "0x0207": InfiniBand), when they agree. `own` says which.
struct LayoutLink {
  const plan::PciTopologyEntry* entry = nullptr;
  bool own = false;
};
LayoutLink layout_link(const Expectations& e, const std::string& bus_id, std::string_view pci_class) {
  if (const auto* t = in_layout(e, bus_id)) return {t, true};
  const plan::PciTopologyEntry* first = nullptr;
  for (const auto& t : e.pci_topology) {
    if (!t.pci_class.starts_with(pci_class)) continue;
    if (!first)
      first = &t;
    else if (t.link_speed != first->link_speed || t.link_width != first->link_width)
      return {};
  }
  return {first, false};
}

std::string layout_text(const LayoutLink& l, std::string_view what, const std::string& bus_id) {
  return l.own ? std::string("the size's layout")
               : fmt::format("the size's layout for every {}; {} is not in it", what, bus_id.empty() ? "?" : bus_id);
}

std::string gen_text(int gen) {
  return gen > 0 ? fmt::format("Gen{}", gen) : std::string("Gen ?");
}

std::string link_hint(const std::string& what, const std::string& bus_id) {
  return fmt::format("{} trained below what the size provides: `lspci -vv -s {} | grep -e LnkCap -e LnkSta`; a "
                     "narrow or slow link is a host fault that a reboot rarely fixes: deallocate and redeploy the VM, "
                     "or report the node",
                     what, bus_id.empty() ? "BDF" : bus_id);
}

// A GPU's link width at level 0 (the generation is information: an idle GPU lowers it).
void check_gpu_pcie(Recorder& rec, const Expectations& e, const nvml::Session& s, const Gpu& g) {
  const std::string id = fmt::format("gpu.{}.pcie", g.index);
  const std::string title = g.name + ": PCIe link width";
  const auto layout = layout_link(e, g.bus_id, "0x0302");
  const auto* want = layout.entry;
  auto link = topo::gpu_pcie_link(s, g.dev);
  if (!link || link->width == 0) {
    rec.add(make_check(id, 0, title, "the link NVML reports",
                       link ? std::string("nvmlDeviceGetCurrPcieLinkWidth reports no width") : link.error().message,
                       Verdict::skip));
    return;
  }
  const int want_width = std::max(want ? want->link_width : 0, link->max_width);
  const int want_gen = want ? topo::pcie_generation(want->link_speed) : 0;
  const std::string expected =
      want ? fmt::format("x{} ({} {}, {}; at least the GPU's maximum width)", want_width, gen_text(want_gen),
                         want->link_speed, layout_text(layout, "GPU", g.bus_id))
           : fmt::format("x{}, the GPU's maximum width (no published layout)", want_width);
  std::string observed = fmt::format("x{} (max x{}); {} now, max {}", link->width, link->max_width, gen_text(link->gen),
                                     gen_text(link->max_gen));
  if (link->gen < link->max_gen) observed += " (an idle GPU lowers its generation: checked under load)";
  if (want_gen > 0 && link->max_gen > 0 && link->max_gen < want_gen)
    observed += fmt::format("; the layout's {} is above this link's maximum", gen_text(want_gen));
  const bool ok = link->width >= want_width;
  Check c = make_check(id, 0, title, expected, observed, ok ? Verdict::pass : Verdict::fail,
                       ok ? ""
                          : link_hint(fmt::format("GPU {}'s PCIe link", g.index), g.bus_id) +
                                "; NVIDIA notes an idle GPU may lower its width too: see it again while a job runs "
                                "(`nvidia-smi -q -d PCIE`) before reporting the node",
                       want ? e.topology_source + "; " + idle_gen_source
                            : std::string("nvmlDeviceGetMaxPcieLinkWidth; ") + idle_gen_source);
  c.value = link->width;
  c.threshold = want_width;
  rec.add(std::move(c));
}

// An HCA's link: speed and width against the layout, else against its own maximum.
void check_ib_pcie(Recorder& rec, const Expectations& e, const util::HostFs& fs, const topo::IbDevice& d) {
  const std::string id = fmt::format("ib.{}.pcie", d.name);
  const std::string title = fmt::format("{} ({}): PCIe link", d.name, d.bus_id);
  const auto link = topo::sysfs_pcie_link(fs, d.bus_id);
  if (!link) {
    rec.add(make_check(id, 0, title, "the link sysfs reports",
                       fmt::format("no current_link_speed in /sys/bus/pci/devices/{}", d.bus_id), Verdict::skip));
    return;
  }
  if (link->gen == 0) { // "Unknown": a virtual function's link registers may be reserved
    rec.add(make_check(id, 0, title, "the link sysfs reports",
                       fmt::format("sysfs reports no link speed ({:?}, x{})", link->speed, link->width),
                       Verdict::skip));
    return;
  }
  const auto layout = layout_link(e, d.bus_id, "0x0207");
  const auto* want = layout.entry;
  const int want_gen = want ? std::max(topo::pcie_generation(want->link_speed), 1) : link->max_gen;
  const int want_width = std::max(want ? want->link_width : 0, link->max_width);
  const std::string expected =
      want ? fmt::format("{} x{} ({}, {}; at least the HCA's maximum width)", want->link_speed, want_width,
                         gen_text(want_gen), layout_text(layout, "HCA", d.bus_id))
           : fmt::format("{} x{}, the HCA's maximum (no published layout)", link->max_speed, want_width);
  const std::string observed = fmt::format("{} x{} ({}; max {} x{})", link->speed, link->width, gen_text(link->gen),
                                           link->max_speed, link->max_width);
  const bool ok = link->gen >= want_gen && link->width >= want_width;
  rec.add(make_check(id, 0, title, expected, observed, ok ? Verdict::pass : Verdict::fail,
                     ok ? "" : link_hint(d.name + "'s PCIe link", d.bus_id),
                     want ? e.topology_source : std::string("sysfs max_link_speed, max_link_width")));
}

struct Placement {
  std::vector<std::string> missing, misplaced;
  int placed = 0;
};

Placement place(const Expectations& e, const util::HostFs& fs) {
  Placement p;
  for (const auto& t : e.pci_topology) {
    const std::string bus = topo::normalise_bus_id(t.bus_id);
    const std::string kind = topo::is_gpu(t) ? "GPU" : "NIC";
    const std::string dir = "/sys/bus/pci/devices/" + bus;
    if (!fs.exists(dir)) {
      p.missing.push_back(fmt::format("{} {} (NUMA {})", kind, bus, t.numa));
      continue;
    }
    const auto node = fs.read_attr(dir + "/numa_node");
    if (node != std::to_string(t.numa)) {
      p.misplaced.push_back(fmt::format("{} {} on NUMA {} (layout: {})", kind, bus, node.value_or("?"), t.numa));
      continue;
    }
    ++p.placed;
  }
  return p;
}

// GPU <-> nearest HCA by the layout, named as this machine names them.
std::string pairs_text(const Expectations& e, const std::vector<Gpu>& gpus, const std::vector<topo::IbDevice>& ibs) {
  std::vector<std::string> out;
  for (const auto& pair : topo::gpu_hca_pairs(e.pci_topology)) {
    const auto g = std::find_if(gpus.begin(), gpus.end(), [&](const Gpu& x) { return x.bus_id == pair.gpu_bus_id; });
    const auto h =
        std::find_if(ibs.begin(), ibs.end(), [&](const topo::IbDevice& x) { return x.bus_id == pair.hca_bus_id; });
    out.push_back(fmt::format("{} {} <-> {} {}", g == gpus.end() ? "GPU" : fmt::format("GPU {}", g->index),
                              pair.gpu_bus_id, h == ibs.end() ? "HCA" : h->name, pair.hca_bus_id));
  }
  return out.empty() ? std::string() : "; nearest HCA: " + util::join(out, ", ");
}

void check_topology(Recorder& rec, const Expectations& e, const std::vector<Gpu>& gpus,
                    const std::vector<topo::IbDevice>& ibs) {
  const std::string title = "GPU and NIC PCI topology (bus ids, NUMA nodes)";
  if (e.pci_topology.empty()) {
    rec.add(make_check("topology.gpu_hca", 0, title, "the size's published layout",
                       e.topology_source.empty() ? "no published layout for this size (no expectation published)"
                                                 : "no published layout: " + e.topology_source,
                       Verdict::skip));
    return;
  }
  const auto p = place(e, *rec.request().fs);
  const bool ok = p.missing.empty() && p.misplaced.empty();
  std::string observed = fmt::format("{} of {} on their NUMA nodes", p.placed, e.pci_topology.size());
  if (!p.missing.empty()) observed += "; missing from the PCI bus: " + util::join(p.missing, ", ");
  if (!p.misplaced.empty()) observed += "; on another NUMA node: " + util::join(p.misplaced, ", ");
  observed += pairs_text(e, gpus, ibs);
  Check c = make_check(
      "topology.gpu_hca", 0, title,
      fmt::format("the {} GPUs and NICs of the size's layout, each on its NUMA node", e.pci_topology.size()), observed,
      ok ? Verdict::pass : Verdict::fail,
      ok ? ""
         : "a device missing from the PCI bus or on another NUMA node: `lstopo-no-graphics`, `cat "
           "/sys/bus/pci/devices/BDF/numa_node`; a GPU or HCA that fell off the bus needs a reboot, and if it stays "
           "away, deallocate and redeploy the VM or report the node (Azure's check_hw_topology fails it)",
      e.topology_source + "; " + azure_topology_source);
  c.value = p.placed;
  c.threshold = static_cast<double>(e.pci_topology.size());
  rec.add(std::move(c));
}

std::string expiry_text(const nvml::GridLicenseExpiry& x) {
  if (x.year == 0) return {};
  return fmt::format(", expires {:04}-{:02}-{:02} {:02}:{:02}:{:02}", x.year, x.month, x.day, x.hour, x.min, x.sec);
}

// The vGPU licence (GRID sizes): at least one licensable feature licensed.
void check_grid(Recorder& rec, const Expectations& e, const nvml::Session& s, const Gpu& g) {
  const std::string id = fmt::format("gpu.{}.grid_licence", g.index);
  const std::string title = g.name + ": vGPU software licence";
  const std::string expected = "a licensed vGPU software feature";
  const std::string hint =
      "the GRID driver holds no licence: `nvidia-smi -q | grep -i -A3 licen`, `systemctl status nvidia-gridd`, "
      "`journalctl -u nvidia-gridd` say why; an unlicensed vGPU is degraded and loses CUDA: reinstall the size's GRID "
      "driver (`hpcbake install`) and check that the VM reaches its licence service";
  const std::string source = e.size_file + " driver kind grid; " + grid_source;
  if (!s.api().device_get_grid_licensable_features_v4) {
    rec.add(make_check(id, 0, title, expected, "this driver's NVML has no nvmlDeviceGetGridLicensableFeatures_v4",
                       Verdict::fail, hint, source));
    return;
  }
  nvml::GridLicensableFeatures f{};
  const auto rc = s.api().device_get_grid_licensable_features_v4(g.dev, &f);
  if (rc != nvml::success || !f.is_grid_license_supported) {
    rec.add(make_check(id, 0, title, expected,
                       rc != nvml::success ? "nvmlDeviceGetGridLicensableFeatures_v4: " + s.error(rc)
                                           : "the driver reports no vGPU software licensing",
                       Verdict::fail, hint, source));
    return;
  }
  std::vector<std::string> features;
  bool licensed = false;
  const unsigned n = std::min(f.licensable_features_count, nvml::grid_license_feature_max_count);
  for (unsigned i = 0; i < n; ++i) {
    auto& ft = f.features[i];
    ft.product_name[sizeof ft.product_name - 1] = '\0';
    licensed = licensed || ft.feature_state != 0;
    features.push_back(fmt::format("{}: {}{}", ft.product_name[0] ? ft.product_name : "unnamed feature",
                                   ft.feature_state ? "licensed" : "unlicensed",
                                   ft.feature_state ? expiry_text(ft.license_expiry) : ""));
  }
  const std::string observed = features.empty() ? "no licensable feature reported" : util::join(features, "; ");
  rec.add(make_check(id, 0, title, expected, observed, licensed ? Verdict::pass : Verdict::fail, licensed ? "" : hint,
                     source));
}

// What nvidia-smi's exit status means, as Azure's check_nvsmi_healthmon names them.
std::string nvsmi_exit_meaning(int rc) {
  switch (rc) {
  case 2:
    return "invalid argument or flag";
  case 4:
    return "permission denied";
  case 8:
    return "power cables not attached";
  case 9:
    return "NVIDIA driver not loaded";
  case 10:
    return "interrupt issue with a GPU";
  case 12:
    return "NVML shared library could not be found";
  case 14:
    return "InfoROM is corrupted";
  case 15:
    return "a GPU has fallen off the bus or has otherwise become inaccessible";
  default:
    return "failure";
  }
}

// Level 1: `nvidia-smi` (no arguments, as Azure runs it) exits 0.
void check_nvidia_smi(Recorder& rec) {
  const auto& req = rec.request();
  const std::string title = "nvidia-smi runs and exits 0 (check_nvsmi_healthmon)";
  if (!req.runner) {
    rec.add(make_check("gpu.health", 1, title, "exit 0", "no command runner", Verdict::skip));
    return;
  }
  exec::Command cmd;
  cmd.argv = {"nvidia-smi"};
  cmd.timeout = std::chrono::seconds(120);
  cmd.keep_output = 64 * 1024;
  auto r = req.runner->run(cmd);
  const bool ok = r && r->exit_code == 0;
  std::string observed;
  if (!r)
    observed = r.error().message;
  else if (ok)
    observed = "exit 0";
  else
    observed = fmt::format("{}: {}; last output: {}", r->describe(), nvsmi_exit_meaning(r->exit_code),
                           util::last_lines(r->output, 2));
  rec.add(make_check("gpu.health", 1, title, "exit 0", observed, ok ? Verdict::pass : Verdict::fail,
                     ok ? ""
                        : "`nvidia-smi` shows the failure; `dmesg | grep -i -e nvrm -e xid` tells why; a GPU that "
                          "fell off the bus or a corrupted InfoROM needs the node reported",
                     azure_nvsmi_source));
}

std::vector<Gpu> nvml_gpus(const nvml::Session& s) {
  std::vector<Gpu> out;
  unsigned n = 0;
  if (s.api().device_get_count_v2(&n) != nvml::success) return out;
  for (unsigned i = 0; i < n; ++i) {
    Gpu g;
    g.index = i;
    if (s.api().device_get_handle_by_index_v2(i, &g.dev) != nvml::success) continue;
    g.name = s.describe(i, g.dev);
    nvml::PciInfo pci{};
    if (s.api().device_get_pci_info_v3 && s.api().device_get_pci_info_v3(g.dev, &pci) == nvml::success) {
      pci.bus_id[sizeof pci.bus_id - 1] = '\0';
      g.bus_id = topo::normalise_bus_id(pci.bus_id);
    }
    out.push_back(std::move(g));
  }
  return out;
}

} // namespace

void topology_checks(Recorder& rec, const Expectations& e, int level) {
  const auto& fs = *rec.request().fs;
  std::optional<nvml::Session> session;
  std::vector<Gpu> gpus;
  if (e.nvidia) {
    // gpu.nvml reports a library that does not load; without it there is nothing to ask here.
    if (auto s = nvml::Session::open()) {
      session.emplace(std::move(*s));
      gpus = nvml_gpus(*session);
    }
  }
  const auto ibs = topo::infiniband_devices(fs);
  for (const auto& g : gpus) {
    check_gpu_pcie(rec, e, *session, g);
    if (e.grid) check_grid(rec, e, *session, g);
  }
  // InfiniBand HCAs with a PCI function; Azure's Ethernet NIC (mlx5_an0) and soft devices (rxe) are no HCA.
  for (const auto& d : ibs)
    if (d.link_layer == "InfiniBand" && !d.bus_id.empty()) check_ib_pcie(rec, e, fs, d);
  if (e.nvidia || e.ib_ports > 0) check_topology(rec, e, gpus, ibs);
  if (level >= 1 && e.nvidia) check_nvidia_smi(rec);
}

} // namespace hpcbake::verify
