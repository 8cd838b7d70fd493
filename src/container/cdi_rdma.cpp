// The InfiniBand HCAs as a CDI specification: read from sysfs and /dev under the root, written
// atomically, read back for verify.
#include "container/cdi_rdma.hpp"

#include "util/atomic_file.hpp"
#include "util/config_file.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace hpcbake::container {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDevDir = "/dev/infiniband";

// A name the spec may carry as it is: CDI's device-name rule (SPEC.md "CDI Devices": alphanumeric
// first and last, '-', '_', '.' between; ':' too, pkg/parser ValidateDeviceName), which also keeps
// it a plain YAML scalar and a plain file name under /dev/infiniband.
bool plain_name(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

// The character devices of `cls` (/sys/class/<cls>/<dev>/ibdev) that belong to `hca`, by name.
std::vector<std::string> devices_of(const util::HostFs& fs, const std::string& cls, const std::string& prefix,
                                    const std::string& hca) {
  std::vector<std::string> out;
  for (const auto& dev : fs.list("/sys/class/" + cls)) {
    if (!dev.starts_with(prefix) || !plain_name(dev)) continue;
    const auto ibdev = fs.read_attr("/sys/class/" + cls + "/" + dev + "/ibdev");
    if (ibdev && *ibdev == hca) out.push_back(dev);
  }
  return out;
}

// Whether any port of the HCA is InfiniBand (ports/N/link_layer).
std::optional<std::string> link_layers(const util::HostFs& fs, const std::string& hca, bool& infiniband) {
  std::vector<std::string> seen;
  infiniband = false;
  for (const auto& port : fs.list("/sys/class/infiniband/" + hca + "/ports")) {
    const auto ll = fs.read_attr("/sys/class/infiniband/" + hca + "/ports/" + port + "/link_layer");
    if (!ll) continue;
    if (*ll == "InfiniBand") infiniband = true;
    seen.push_back(*ll);
  }
  if (seen.empty()) return std::nullopt;
  return util::join(seen, ", ");
}

void node_list(std::string& out, const std::vector<std::string>& nodes, const std::string& indent) {
  out += indent + "deviceNodes:\n";
  for (const auto& n : nodes)
    out += fmt::format("{}- path: \"{}\"\n", indent, n);
}

} // namespace

RdmaDevices discover_rdma(const util::HostFs& fs) {
  RdmaDevices d;
  for (const auto& hca : fs.list("/sys/class/infiniband")) {
    if (!plain_name(hca)) {
      d.left_out.push_back(fmt::format("{}: not a name a CDI device may have", hca));
      continue;
    }
    bool ib = false;
    const auto layers = link_layers(fs, hca, ib);
    if (!ib) {
      d.left_out.push_back(layers ? fmt::format("{}: link layer {}, not InfiniBand", hca, *layers)
                                  : fmt::format("{}: no port with a link layer in sysfs", hca));
      continue;
    }
    Hca h{hca, {}};
    for (const auto& v : devices_of(fs, "infiniband_verbs", "uverbs", hca))
      if (fs.exists(std::string(kDevDir) + "/" + v)) h.nodes.push_back(std::string(kDevDir) + "/" + v);
    if (h.nodes.empty()) {
      d.left_out.push_back(fmt::format("{}: no verbs device node (/sys/class/infiniband_verbs/uverbsN/ibdev naming "
                                       "it, and /dev/infiniband/uverbsN)",
                                       hca));
      continue;
    }
    for (const char* prefix : {"umad", "issm"})
      for (const auto& m : devices_of(fs, "infiniband_mad", prefix, hca))
        if (fs.exists(std::string(kDevDir) + "/" + m)) h.nodes.push_back(std::string(kDevDir) + "/" + m);
    d.hcas.push_back(std::move(h));
  }
  if (fs.exists(std::string(kDevDir) + "/rdma_cm")) d.shared.push_back(std::string(kDevDir) + "/rdma_cm");
  return d;
}

Result<std::string> render_rdma_spec(const RdmaDevices& d) {
  if (d.hcas.empty())
    return fail(ErrorKind::smoke_test,
                fmt::format("no InfiniBand HCA with its verbs device under /sys/class/infiniband and {}{}", kDevDir,
                            d.left_out.empty() ? "" : " (" + util::join(d.left_out, "; ") + ")"),
                "on an InfiniBand size: is the RDMA stack loaded (lsmod | grep ib_uverbs; ibv_devices)? A CDI spec "
                "must name at least one device, so none is written");
  std::string out =
      fmt::format("# Written by hpcbake (container cdi --rdma) from /sys/class/infiniband*: the InfiniBand "
                  "HCAs of this VM.\n# Rewritten at every boot (verify --boot); edits are lost.\n"
                  "cdiVersion: \"{}\"\nkind: \"{}\"\n",
                  kRdmaCdiVersion, kRdmaCdiKind);
  if (!d.shared.empty()) {
    out += "containerEdits:\n";
    node_list(out, d.shared, "  ");
  }
  out += "devices:\n";
  std::vector<std::string> all;
  for (const auto& h : d.hcas) {
    out += fmt::format("- name: \"{}\"\n  containerEdits:\n", h.name);
    node_list(out, h.nodes, "    ");
    all.insert(all.end(), h.nodes.begin(), h.nodes.end());
  }
  out += "- name: \"all\"\n  containerEdits:\n";
  node_list(out, all, "    ");
  return out;
}

Result<RdmaSpecWrite> write_rdma_spec(const util::HostFs& fs, const std::string& path, bool dry_run) {
  RdmaSpecWrite w;
  w.path = path;
  w.devices = discover_rdma(fs);
  HPCBAKE_TRY_ASSIGN(const fs::path target, util::follow_links(fs, path));
  HPCBAKE_TRY_ASSIGN(const auto cur, util::read_current(target));
  auto text = render_rdma_spec(w.devices);
  if (!text) {
    if (cur.exists && !dry_run) {
      std::error_code ec;
      fs::remove(target, ec);
      if (ec)
        return fail(ErrorKind::internal,
                    fmt::format("{}: cannot remove the spec of another boot: {}", target.string(), ec.message()));
    }
    w.removed = cur.exists;
    Error e = text.error();
    if (cur.exists)
      e.message += fmt::format("; {} {} (its devices are not here)", path, dry_run ? "would be removed" : "removed");
    return std::unexpected(e);
  }
  w.text = *text;
  w.changed = !cur.exists || cur.text != w.text;
  if (!w.changed || dry_run) return w;
  HPCBAKE_TRY(util::check_writable(cur, "the RDMA CDI spec"));
  HPCBAKE_TRY(util::write_file_atomic(target, w.text, 0644));
  return w;
}

Result<RdmaSpecRead> read_rdma_spec(std::string_view text, const std::string& where) {
  RdmaSpecRead r;
  auto add_nodes = [&](const YAML::Node& edits) {
    if (!edits || !edits["deviceNodes"]) return;
    for (const auto& n : edits["deviceNodes"]) {
      const std::string p = n["path"] ? n["path"].as<std::string>() : "";
      if (!p.empty() && std::find(r.nodes.begin(), r.nodes.end(), p) == r.nodes.end()) r.nodes.push_back(p);
    }
  };
  try {
    const YAML::Node doc = YAML::Load(std::string(text)); // JSON is YAML
    if (!doc.IsMap() || !doc["kind"] || !doc["devices"] || !doc["devices"].IsSequence())
      return fail(ErrorKind::smoke_test, fmt::format("{}: not a CDI spec (no kind or no devices list)", where),
                  "rewrite it: hpcbake container cdi --rdma");
    r.kind = doc["kind"].as<std::string>();
    r.cdi_version = doc["cdiVersion"] ? doc["cdiVersion"].as<std::string>() : "";
    add_nodes(doc["containerEdits"]);
    for (const auto& d : doc["devices"]) {
      if (d["name"]) r.devices.push_back(d["name"].as<std::string>());
      add_nodes(d["containerEdits"]);
    }
  } catch (const YAML::Exception& e) {
    return fail(ErrorKind::smoke_test, fmt::format("{} is not YAML: {}", where, e.what()),
                "rewrite it: hpcbake container cdi --rdma");
  }
  return r;
}

} // namespace hpcbake::container
