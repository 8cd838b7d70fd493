// RDMA in containers on an InfiniBand size (the containers profile): Docker's containers get an
// unlimited memlock by default (level 0, daemon.json), and the HCAs' CDI spec
// (/var/run/cdi/hpcbake-rdma.yaml, container/cdi_rdma.hpp) names every InfiniBand port the size
// promises and only device nodes that exist (level 1, the booted VM). Under `verify --boot` the
// spec is first rewritten from this boot's sysfs (VerifyRequest::refresh_rdma_cdi).
#include "verify/checks.hpp"

#include "container/cdi_rdma.hpp"
#include "container/runtime.hpp"
#include "util/json.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hpcbake::verify {

namespace {

constexpr const char* kSource = "the plan's container-runtime step (containers profile on an InfiniBand size)";
constexpr const char* kRewrite = "hpcbake container cdi --rdma (verify --boot rewrites it at every boot)";

std::string engine_config(const Expectations& e, const std::string& engine) {
  for (const auto& [name, config] : e.container_engines)
    if (name == engine) return config;
  return {};
}

// default-ulimits.memlock = {"Hard": -1, "Name": "memlock", "Soft": -1} in Docker's daemon.json.
void docker_memlock_check(Recorder& rec, const Expectations& e) {
  const std::string config = engine_config(e, "docker");
  if (config.empty()) return;
  const auto& fs = *rec.request().fs;
  const std::string id = "container.rdma.docker_memlock", title = "Docker's default memlock limit";
  const std::string want = "default-ulimits.memlock Soft -1, Hard -1 (unlimited)";
  const std::string hint = fmt::format("hpcbake container configure --engine docker --rdma (or run containers with "
                                       "--ulimit memlock=-1); then systemctl restart docker");
  const auto text = fs.read(config, util::host_file::config);
  if (!text) {
    rec.add(make_check(id, 0, title, want, fmt::format("{} does not exist", config), Verdict::fail, hint, kSource));
    return;
  }
  auto lim = container::docker_default_ulimit(*text, "memlock", config);
  if (!lim) {
    rec.add(make_check(id, 0, title, want, lim.error().message, Verdict::fail, lim.error().hint, kSource));
    return;
  }
  const auto& j = *lim;
  const bool ok = j && j->is_object() && j->value("Soft", 0LL) == -1 && j->value("Hard", 0LL) == -1;
  const std::string observed =
      j ? fmt::format("default-ulimits.memlock = {} ({})", util::dump_json(*j), config)
        : fmt::format("no default-ulimits.memlock in {}: containers get dockerd's own limit", config);
  rec.add(make_check(id, 0, title, want, observed, ok ? Verdict::pass : Verdict::fail, ok ? "" : hint, kSource));
}

// InfiniBand ports of the HCAs the spec names (sysfs), and the nodes it names that are missing.
void spec_checks(Recorder& rec, const Expectations& e, const std::string& refreshed) {
  const auto& fs = *rec.request().fs;
  const std::string path = container::kRdmaCdiSpec;
  const std::string want =
      fmt::format("{} InfiniBand ports on the HCAs {} names ({})", e.ib_ports, path, container::kRdmaCdiKind);
  const std::string source = e.size_file + " infiniband.ports";
  const auto text = fs.read(path, util::host_file::config);
  auto both_fail = [&](const std::string& observed, const std::string& hint) {
    rec.add(make_check("container.rdma.cdi_hcas", 1, "HCAs the RDMA CDI spec names", want, observed, Verdict::fail,
                       hint, source));
    rec.add(make_check("container.rdma.cdi_nodes", 1, "device nodes the RDMA CDI spec names",
                       "every node present under /dev/infiniband", observed, Verdict::fail, hint, source));
  };
  if (!text) return both_fail(fmt::format("{} does not exist{}", path, refreshed), kRewrite);
  auto spec = container::read_rdma_spec(*text, path);
  if (!spec) return both_fail(spec.error().message, spec.error().hint);
  int ports = 0;
  std::vector<std::string> hcas;
  for (const auto& d : spec->devices) {
    if (d == "all") continue;
    hcas.push_back(d);
    for (const auto& p : fs.list("/sys/class/infiniband/" + d + "/ports"))
      if (fs.read_attr("/sys/class/infiniband/" + d + "/ports/" + p + "/link_layer") ==
          std::optional<std::string>{"InfiniBand"})
        ++ports;
  }
  const bool kind_ok = spec->kind == container::kRdmaCdiKind;
  const bool all_ok = std::find(spec->devices.begin(), spec->devices.end(), "all") != spec->devices.end();
  const bool ok = kind_ok && all_ok && ports == e.ib_ports;
  rec.add(make_check("container.rdma.cdi_hcas", 1, "HCAs the RDMA CDI spec names", want,
                     fmt::format("{} ports on {} HCAs ({}), kind {}{}{}", ports, hcas.size(),
                                 hcas.empty() ? "none" : util::join(hcas, ", "), spec->kind,
                                 all_ok ? "" : ", no device \"all\"", refreshed),
                     ok ? Verdict::pass : Verdict::fail,
                     ok ? ""
                        : fmt::format("the spec names other HCAs than this VM's InfiniBand ports (written on another "
                                      "VM, or an HCA is missing: ibv_devices, ibstat): {}",
                                      kRewrite),
                     source));
  std::vector<std::string> missing;
  for (const auto& n : spec->nodes)
    if (!fs.exists(n)) missing.push_back(n);
  const bool nodes_ok = missing.empty() && !spec->nodes.empty();
  rec.add(make_check("container.rdma.cdi_nodes", 1, "device nodes the RDMA CDI spec names",
                     "every node present under /dev/infiniband",
                     nodes_ok              ? fmt::format("{} present", spec->nodes.size())
                     : spec->nodes.empty() ? "the spec names no device node"
                                           : "missing " + util::join(missing, ", "),
                     nodes_ok ? Verdict::pass : Verdict::fail,
                     nodes_ok ? ""
                              : fmt::format("a container asking for these devices fails to start: is ib_uverbs loaded "
                                            "(lsmod), and udev done (udevadm settle)? Then {}",
                                            kRewrite),
                     source));
}

} // namespace

void container_rdma_checks(Recorder& rec, const Expectations& e, int level) {
  if (!e.container_rdma || e.ib_ports < 1) return;
  docker_memlock_check(rec, e);
  if (level < 1) return;
  std::string refreshed;
  if (rec.request().refresh_rdma_cdi) {
    auto w = container::write_rdma_spec(*rec.request().fs, container::kRdmaCdiSpec, false);
    refreshed = !w           ? fmt::format("; rewriting it failed: {}", w.error().message)
                : w->changed ? "; rewritten now"
                             : "; rewritten now (unchanged)";
  }
  spec_checks(rec, e, refreshed);
}

} // namespace hpcbake::verify
