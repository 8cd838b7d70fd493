// What RDMA needs from the OS (plan/rdma_os.hpp, manifests/settings/): which sizes and profiles
// get the limits, sysctl, device naming and NCCL topology, and with what content.
#include "manifest/manifests.hpp"
#include "plan/plan.hpp"

#include "helpers.hpp"
#include "shipped.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

plan::Plan make(const std::string& size, const std::string& distro, const std::string& profile) {
  plan::PlanRequest r;
  r.size = size;
  r.distro = distro;
  r.profile = profile;
  auto p = plan::make_plan(test::shipped_manifests(), r);
  REQUIRE_MESSAGE(p.has_value(), (p ? std::string() : p.error().message));
  return std::move(*p);
}

const plan::ConfigStep* config(const plan::Plan& p, const std::string& id) {
  const auto* s = p.find(id);
  return s ? s->as<plan::ConfigStep>() : nullptr;
}

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

std::size_t index_of(const plan::Plan& p, const std::string& id) {
  for (std::size_t i = 0; i < p.steps.size(); ++i)
    if (p.steps[i].id == id) return i;
  return p.steps.size();
}

bool any_note(const plan::Plan& p, const std::string& needle) {
  return std::any_of(p.notes.begin(), p.notes.end(), [&](const std::string& n) { return contains(n, needle); });
}

} // namespace

TEST_CASE("rdma_os on ND H100 v5 with the ai profile: limits, drop-ins, sysctl, naming, topology and nccl.conf") {
  const auto p = make("Standard_ND96isr_H100_v5", "ubuntu-22.04", "ai");
  const auto* limits = config(p, "config:rdma:limits");
  REQUIRE(limits);
  CHECK(limits->path == "/etc/security/limits.d/90-hpcbake-rdma.conf");
  for (const char* line :
       {"*               soft    memlock         unlimited", "*               hard    memlock         unlimited",
        "*               soft    nofile          1048576", "*               hard    nofile          1048576"})
    CHECK_MESSAGE(contains(limits->content, line), line);
  for (const char* id : {"config:rdma:systemd-system", "config:rdma:systemd-user"}) {
    const auto* dropin = config(p, id);
    REQUIRE_MESSAGE(dropin, id);
    CHECK(contains(dropin->content, "[Manager]\nDefaultLimitMEMLOCK=infinity\n"));
  }
  CHECK(config(p, "config:rdma:systemd-system")->path == "/etc/systemd/system.conf.d/90-hpcbake-rdma.conf");
  CHECK(config(p, "config:rdma:systemd-user")->path == "/etc/systemd/user.conf.d/90-hpcbake-rdma.conf");
  const auto* sysctl = config(p, "config:rdma:sysctl");
  REQUIRE(sysctl);
  CHECK(sysctl->path == "/etc/sysctl.d/90-hpcbake-rdma.conf");
  CHECK(contains(sysctl->content, "vm.zone_reclaim_mode = 1\n"));
  CHECK(contains(sysctl->content, "net.ipv4.neigh.default.gc_thresh3 = 16384\n"));
  const auto* naming = config(p, "config:rdma:rdma-naming-rules");
  REQUIRE(naming);
  CHECK(naming->path == "/etc/udev/rules.d/60-rdma-persistent-naming.rules");
  CHECK(contains(naming->content, "PROGRAM=\"rdma_rename %k NAME_KERNEL\""));
  const auto* script = config(p, "config:rdma:rdma-naming-script");
  REQUIRE(script);
  CHECK(script->mode == 0755);
  CHECK(contains(script->content, "NAME_FIXED mlx5_ib${ib_index}"));
  CHECK(contains(script->content, "NAME_FIXED mlx5_an${an_index}"));
  for (const char* unit : {"sunrpc_tcp_settings.service", "azure_persistent_rdma_naming.service",
                           "azure_persistent_rdma_naming_monitor.service"}) {
    const auto* s = p.find(std::string("service:") + unit);
    REQUIRE_MESSAGE(s, unit);
    CHECK(s->as<plan::ServiceStep>()->argv == std::vector<std::string>{"systemctl", "enable", "--now", unit});
  }
  // The topology file is Azure's, byte for byte; /etc/nccl.conf names it.
  const auto* topo = config(p, "config:ndv5:topology");
  REQUIRE(topo);
  CHECK(topo->path == "/opt/microsoft/ndv5/topo.xml");
  CHECK(topo->content == test::slurp(test::source_dir() / "manifests/files/nccl/ndv5-topo.xml"));
  CHECK(contains(topo->content, "<system version=\"1\">"));
  const auto* conf = config(p, "config:ndv5:nccl-conf");
  REQUIRE(conf);
  CHECK(conf->path == "/etc/nccl.conf");
  CHECK(conf->content ==
        "NCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml\nNCCL_IGNORE_CPU_AFFINITY=1\n");
  // After the InfiniBand stack (the naming service runs its ibdev2netdev), before the reboot.
  const auto* first = p.find("config:rdma:limits");
  CHECK(first->after == std::vector<std::string>{"driver:doca-ofed"});
  CHECK(index_of(p, "config:rdma:limits") > index_of(p, "driver:doca-ofed"));
  CHECK(index_of(p, "service:azure_persistent_rdma_naming_monitor.service") < index_of(p, "reboot:modules"));
  CHECK(index_of(p, "reboot:modules") < p.steps.size());
  CHECK(any_note(p, "settings/rdma.yaml: "));
}

TEST_CASE("rdma_os: the hpc profile on HB176rs v4 gets the RDMA settings and no NCCL files") {
  const auto p = make("Standard_HB176rs_v4", "ubuntu-22.04", "hpc");
  CHECK(config(p, "config:rdma:limits"));
  CHECK(config(p, "config:rdma:systemd-system"));
  CHECK(p.find("service:azure_persistent_rdma_naming.service"));
  for (const auto& s : p.steps) {
    const auto* c = s.as<plan::ConfigStep>();
    CHECK_FALSE((c && c->path == "/etc/nccl.conf"));
  }
}

TEST_CASE("rdma_os: default and minimal profiles plan none of it") {
  for (const char* profile : {"default", "minimal", "containers"})
    for (const char* size : {"Standard_ND96isr_H100_v5", "Standard_HB176rs_v4"}) {
      CAPTURE(profile);
      CAPTURE(size);
      const auto p = make(size, "ubuntu-22.04", profile);
      for (const auto& s : p.steps) {
        CHECK_FALSE(s.id.starts_with("config:rdma:"));
        CHECK_FALSE(s.id.starts_with("config:ndv5:"));
      }
    }
}

TEST_CASE("rdma_os: NC96ads A100 v4 (no InfiniBand) gets its topology and graph, not the RDMA limits") {
  const auto p = make("Standard_NC96ads_A100_v4", "ubuntu-22.04", "ai");
  CHECK_FALSE(config(p, "config:rdma:limits"));
  REQUIRE(config(p, "config:ncv4:graph"));
  CHECK(config(p, "config:ncv4:graph")->content ==
        test::slurp(test::source_dir() / "manifests/files/nccl/ncv4-graph.xml"));
  CHECK(contains(config(p, "config:ncv4:nccl-conf")->content, "NCCL_GRAPH_FILE=/opt/microsoft/ncv4/graph.xml\n"));
}

TEST_CASE("rdma_os: ND GB200 v6 gets the rack-scale buffers and says it has no topology file") {
  const auto p = make("Standard_ND128isr_NDR_GB200_v6", "ubuntu-24.04", "ai");
  const auto* sysctl = config(p, "config:nvlink-rackscale:sysctl");
  REQUIRE(sysctl);
  CHECK(contains(sysctl->content, "net.core.rmem_max = 2147483647\n"));
  CHECK(contains(config(p, "config:nvlink-rackscale:systemd-numa")->content, "NUMAPolicy=bind\nNUMAMask=0-1\n"));
  CHECK(any_note(p, "no NCCL topology or graph file"));
  for (const auto& s : p.steps) {
    const auto* c = s.as<plan::ConfigStep>();
    CHECK_FALSE((c && c->path == "/etc/nccl.conf"));
  }
}

TEST_CASE("settings manifests: a file's text from outside the tree, both content and from, an unknown os_settings") {
  auto top = test::scratch("settings-lint");
  fs::copy(test::source_dir() / "drivers", top / "drivers", fs::copy_options::recursive);
  fs::copy(test::source_dir() / "manifests", top / "manifests", fs::copy_options::recursive);
  const auto dir = top / "manifests";
  test::write(top / "secret.txt", "not a manifest\n");
  test::write(dir / "settings/bad.yaml", R"(schema: 1
settings: bad
applies_to: size
description: d
source: s
files:
  - name: up
    path: /etc/x
    from: ../secret.txt
    source: s
  - name: both
    path: /etc/y
    from: files/nccl/ndv5-topo.xml
    content: "x"
    source: s
)");
  auto size = test::slurp(dir / "sizes/hb176rs_v4.yaml");
  size += "os_settings: nothere\n";
  test::write(dir / "sizes/hb176rs_v4.yaml", size);
  std::vector<std::string> diags;
  for (const auto& d : manifest::lint_manifests(dir).diagnostics)
    diags.push_back(d.str());
  const auto has = [&](const std::string& needle) {
    return std::any_of(diags.begin(), diags.end(), [&](const std::string& d) { return contains(d, needle); });
  };
  CHECK(has("'../secret.txt' must be a path relative to the manifest directory"));
  CHECK(has("exactly one of content or from"));
  CHECK(has("os_settings names unknown settings 'nothere'"));
}

TEST_CASE("plan: the verify step carries the size's published PCI layout from its NCCL topology file") {
  const auto p = make("Standard_ND96isr_H100_v5", "ubuntu-22.04", "ai");
  const plan::VerifyStep* v = nullptr;
  for (const auto& s : p.steps)
    if (const auto* vs = s.as<plan::VerifyStep>()) v = vs;
  REQUIRE(v != nullptr);
  const auto& e = v->expect;
  CHECK(e.nccl_topo_file == "/opt/microsoft/ndv5/topo.xml");
  // ndv5-topo.xml: 8 GPUs (0x030200) and 8 InfiniBand HCAs (0x020700), four of each per NUMA node.
  REQUIRE(e.pci_topology.size() == 16);
  CHECK(e.pci_topology[0].bus_id == "0001:00:00.0");
  CHECK(e.pci_topology[0].pci_class == "0x030200");
  CHECK(e.pci_topology[0].numa == 0);
  CHECK(e.pci_topology[0].link_speed == "32.0 GT/s PCIe");
  CHECK(e.pci_topology[0].link_width == 16);
  CHECK(e.pci_topology[1].bus_id == "0101:00:00.0");
  CHECK(e.pci_topology[15].numa == 1);
  CHECK(contains(e.topology_source, "ndv5-topo.xml"));
  CHECK(e.all_reduce_perf == "/opt/nccl-tests/build/all_reduce_perf");
  CHECK(e.mpirun.ends_with("/ompi/bin/mpirun"));
  CHECK(e.nccl_allreduce_message == "16G");
  CHECK(e.memory_tolerance_pct == 5.0);
  CHECK(e.cpu_threads == 96);
  // The stored plan reads them back.
  const auto back = plan::plan_from_json(plan::to_json(p, plan::Urls::full), "plan.json");
  REQUIRE_MESSAGE(back.has_value(), (back ? std::string() : back.error().message));
  for (const auto& s : back->steps)
    if (const auto* vs = s.as<plan::VerifyStep>()) CHECK(vs->expect.pci_topology.size() == 16);
}

TEST_CASE("plan: an NCCL topology file is read strictly") {
  CHECK_FALSE(plan::parse_nccl_topology("<html/>").has_value());
  CHECK_FALSE(
      plan::parse_nccl_topology("<system><pci busid=\"0001:00:00.0\" class=\"0x030200\"/></system>").has_value());
  CHECK_FALSE(plan::parse_nccl_topology("<system><cpu numaid=\"x\"></cpu></system>").has_value());
  const auto ok = plan::parse_nccl_topology(
      "<system><cpu numaid=\"3\"><pci busid=\"ffff:ff:01.0\" class=\"0x060400\"><pci busid=\"0005:00:00.0\" "
      "class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"/></pci></cpu></system>");
  REQUIRE(ok.has_value());
  REQUIRE(ok->size() == 1);
  CHECK((*ok)[0].numa == 3);
  CHECK((*ok)[0].link_speed == "16.0 GT/s PCIe");
}
