// The plan back from its JSON (to_json(plan, Urls::full)): the file install stores as the record of
// what runs (/var/lib/hpcbake/plan.json), read by resume, verify and seal. Strict, as the journal
// reader is: every key known, every field present with its type, the schema this binary writes.
// Keys derived from others on output (a packages step's "refresh", a modules-load step's
// "content", the fixed "restart" sentences) are read and checked for their type only.
#include "container/cdi_rdma.hpp"
#include "plan/plan.hpp"
#include "util/overload.hpp"

#include <fmt/format.h>

#include <set>

namespace hpcbake::plan {

using nlohmann::json;

namespace {

struct Bad {
  std::string what;
};

// One JSON object, read field by field; done() fails on a key nothing read.
class Obj {
public:
  Obj(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) throw Bad{where_ + ": expected an object"};
  }
  const json& at(const std::string& key) {
    seen_.insert(key);
    if (!j_.contains(key)) throw Bad{fmt::format("{}: missing field '{}'", where_, key)};
    return j_.at(key);
  }
  bool has(const std::string& key) const { return j_.contains(key); }
  std::string path(const std::string& key) const { return where_ + "." + key; }
  std::string str(const std::string& key) { return as_str(at(key), path(key)); }
  bool boolean(const std::string& key) {
    const auto& v = at(key);
    if (!v.is_boolean()) throw Bad{path(key) + ": expected true or false"};
    return v.get<bool>();
  }
  template <class T> T integer(const std::string& key) {
    const auto& v = at(key);
    if (!v.is_number_integer()) throw Bad{path(key) + ": expected an integer"};
    return v.get<T>();
  }
  std::vector<std::string> strs(const std::string& key) { return as_strs(at(key), path(key)); }
  std::optional<std::string> opt_str(const std::string& key) {
    const auto& v = at(key);
    if (v.is_null()) return std::nullopt;
    return as_str(v, path(key));
  }
  template <class T> std::optional<T> opt_num(const std::string& key) {
    const auto& v = at(key);
    if (v.is_null()) return std::nullopt;
    if (!v.is_number() || (std::is_integral_v<T> && !v.is_number_integer()))
      throw Bad{path(key) + ": expected a number or null"};
    return v.get<T>();
  }
  void skip(const std::string& key) { at(key); }
  void done() const {
    for (const auto& [k, v] : j_.items())
      if (!seen_.count(k)) throw Bad{fmt::format("{}: unknown field '{}' (written by a newer hpcbake?)", where_, k)};
  }
  static std::string as_str(const json& v, const std::string& where) {
    if (!v.is_string()) throw Bad{where + ": expected a string"};
    return v.get<std::string>();
  }
  static std::vector<std::string> as_strs(const json& v, const std::string& where) {
    if (!v.is_array()) throw Bad{where + ": expected a list of strings"};
    std::vector<std::string> out;
    for (const auto& e : v)
      out.push_back(as_str(e, where + "[]"));
    return out;
  }

private:
  const json& j_;
  std::string where_;
  std::set<std::string> seen_;
};

manifest::PackageManager manager(const std::string& text, const std::string& where) {
  if (text == "apt") return manifest::PackageManager::apt;
  if (text == "dnf") return manifest::PackageManager::dnf;
  if (text == "tdnf") return manifest::PackageManager::tdnf;
  throw Bad{fmt::format("{}: unknown package manager '{}'", where, text)};
}

unsigned mode_of(const std::string& text, const std::string& where) {
  unsigned mode = 0;
  if (text.empty() || text.size() > 5) throw Bad{where + ": expected an octal mode such as 0644"};
  for (char c : text) {
    if (c < '0' || c > '7') throw Bad{where + ": expected an octal mode such as 0644"};
    mode = mode * 8 + static_cast<unsigned>(c - '0');
  }
  return mode;
}

driver::SigningPlan signing_of(const json& j, const std::string& where) {
  Obj o(j, where);
  driver::SigningPlan s;
  s.enabled = o.boolean("enabled");
  s.why = o.str("why");
  if (s.enabled) {
    s.precaution = s.why.starts_with(driver::kPrecautionWhy); // not stored: decide_signing's sentence says it
    s.generate = o.boolean("generate");
    s.key = o.str("key");
    s.cert = o.str("cert");
  }
  o.done();
  return s;
}

PrebuiltUse prebuilt_of(const json& j, const std::string& where) {
  Obj o(j, where);
  PrebuiltUse p{o.str("file"), o.str("sha256"), o.str("built_for"), {}};
  const auto& ks = o.at("kernels");
  if (!ks.is_array()) throw Bad{o.path("kernels") + ": expected a list"};
  for (const auto& k : ks) {
    Obj ko(k, o.path("kernels[]"));
    std::string kernel = ko.str("kernel");
    const bool use = ko.boolean("use");
    std::string why = ko.str("why_not");
    ko.done();
    if (use != why.empty()) throw Bad{o.path("kernels[]") + ": 'use' and 'why_not' disagree"};
    p.kernels.emplace_back(std::move(kernel), std::move(why));
  }
  o.done();
  return p;
}

std::vector<std::pair<std::string, std::string>> string_map(const json& j, const std::string& where) {
  if (!j.is_object()) throw Bad{where + ": expected an object"};
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, v] : j.items())
    out.emplace_back(k, Obj::as_str(v, where + "." + k));
  return out;
}

VerifyExpectations expectations_of(const json& j, const std::string& where) {
  Obj o(j, where);
  VerifyExpectations e;
  e.size_file = o.str("size_file");
  e.nvidia = o.boolean("nvidia");
  e.gpu_count = o.integer<int>("gpu_count");
  e.gpu_model = o.str("gpu_model");
  e.gpu_pci_ids = o.strs("gpu_pci_ids");
  e.driver_version = o.str("driver_version");
  e.driver_source = o.str("driver_source");
  e.nvswitch_count = o.integer<int>("nvswitch_count");
  e.fabric_manager = o.boolean("fabric_manager");
  e.modules = o.strs("modules");
  const auto& dk = o.at("dkms_modules");
  if (!dk.is_array()) throw Bad{o.path("dkms_modules") + ": expected a list"};
  for (const auto& d : dk) {
    Obj od(d, o.path("dkms_modules[]"));
    e.dkms_modules.emplace_back(od.str("package"), od.strs("modules"));
    od.done();
  }
  e.kernels = o.strs("kernels");
  e.gpu_bw_gbs = o.opt_num<double>("gpu_bw_h2d_gbs");
  e.gpu_bw_p2p_gbs = o.opt_num<double>("gpu_bw_p2p_gbs");
  e.gpu_ecc_sram_threshold = o.opt_num<std::int64_t>("gpu_ecc_sram_threshold");
  e.gpu_ecc_dram_threshold = o.opt_num<std::int64_t>("gpu_ecc_dram_threshold");
  e.nccl_allreduce_gbs = o.opt_num<double>("nccl_allreduce_gbs");
  e.ib_ports = o.integer<int>("ib_ports");
  e.ib_rate_gbps = o.integer<int>("ib_rate_gbps");
  e.ipoib = o.boolean("ipoib");
  e.peermem = o.boolean("nvidia_peermem");
  e.ib_bw_gbps = o.opt_num<double>("ib_write_bw_gbps");
  e.ib_bw_source = o.str("ib_write_bw_source");
  e.ib_write_bw_gdr_gbps = o.opt_num<double>("ib_write_bw_gdr_gbps");
  e.container_engines = string_map(o.at("container_engines"), o.path("container_engines"));
  e.container_runtime = o.str("container_runtime");
  e.container_binary = o.str("container_binary");
  if (o.has("container_kubernetes")) e.container_kubernetes = o.boolean("container_kubernetes");
  if (o.has("container_rdma")) e.container_rdma = o.boolean("container_rdma");
  e.dcgm = o.boolean("dcgm");
  e.waagent_config = o.str("waagent_config");
  e.waagent_service = o.str("waagent_service");
  // Added with the health checks: a plan.json stored before them has none of these.
  const auto opt_int = [&o](const char* key) -> std::optional<int> {
    return o.has(key) ? o.opt_num<int>(key) : std::nullopt;
  };
  e.cpu_sockets = opt_int("cpu_sockets");
  e.cpu_cores = opt_int("cpu_cores");
  e.cpu_threads = opt_int("cpu_threads");
  e.memory_mb = o.has("memory_mb") ? o.opt_num<std::int64_t>("memory_mb") : std::nullopt;
  e.memory_kb = o.has("memory_kb") ? o.opt_num<std::int64_t>("memory_kb") : std::nullopt;
  e.memory_tolerance_pct = o.has("memory_tolerance_pct") ? o.opt_num<double>("memory_tolerance_pct") : std::nullopt;
  e.nvme_count = opt_int("nvme_count");
  e.grid = o.has("grid") && o.boolean("grid");
  if (o.has("nccl_allreduce_message")) e.nccl_allreduce_message = o.str("nccl_allreduce_message");
  if (o.has("all_reduce_perf")) e.all_reduce_perf = o.str("all_reduce_perf");
  if (o.has("mpirun")) e.mpirun = o.str("mpirun");
  if (o.has("nccl_topo_file")) e.nccl_topo_file = o.str("nccl_topo_file");
  if (o.has("pci_topology")) {
    const auto& pt = o.at("pci_topology");
    if (!pt.is_array()) throw Bad{o.path("pci_topology") + ": expected a list"};
    for (const auto& t : pt) {
      Obj ot(t, o.path("pci_topology[]"));
      PciTopologyEntry entry;
      entry.numa = ot.integer<int>("numa");
      entry.bus_id = ot.str("bus_id");
      entry.pci_class = ot.str("class");
      entry.link_speed = ot.str("link_speed");
      entry.link_width = ot.integer<int>("link_width");
      if (ot.has("bridge")) entry.bridge = ot.str("bridge");
      ot.done();
      e.pci_topology.push_back(std::move(entry));
    }
  }
  if (o.has("topology_source")) e.topology_source = o.str("topology_source");
  o.done();
  return e;
}

PackagesStep packages_of(Obj& o) {
  PackagesStep s;
  s.component = o.str("component");
  s.version = o.str("version");
  s.manager = manager(o.str("manager"), o.path("manager"));
  s.files = o.strs("files");
  s.packages = o.strs("packages");
  o.boolean("refresh"); // derived: refreshes_index
  s.hold = o.boolean("hold");
  s.kernels = o.strs("kernels");
  s.repository = o.str("repository");
  std::optional<SignedBy> by;
  if (o.has("signed_by")) {
    by = signed_by_of(o.str("signed_by"));
    if (!by) throw Bad{o.path("signed_by") + ": expected hpcbake-key, dkms-mok or unsigned"};
  }
  if (o.has("dkms")) {
    Obj d(o.at("dkms"), o.path("dkms"));
    s.dkms = PackagedModules{d.str("dkms_name"), d.str("version"), d.strs("modules"), std::nullopt,
                             by == SignedBy::hpcbake_key};
    if (const auto& pre = d.at("prebuilt"); !pre.is_null()) s.dkms->prebuilt = prebuilt_of(pre, d.path("prebuilt"));
    d.done();
  } else if (by) { // the package's postinst builds them (plain JSON shows who signs, nothing more)
    s.dkms = PackagedModules{};
    s.dkms->sign = by == SignedBy::hpcbake_key;
  }
  return s;
}

RepositoryStep repository_of(Obj& o) {
  RepositoryStep s;
  s.repository = o.str("repository");
  s.manager = manager(o.str("manager"), o.path("manager"));
  s.uri = o.str("uri");
  s.key_urls = o.strs("key_urls");
  s.fingerprint = o.str("fingerprint");
  s.key_path = o.str("key_path");
  s.source_path = o.str("source_path");
  s.source = o.str("source");
  s.suite = o.str("suite");
  s.components = o.strs("components");
  s.signed_metadata = o.boolean("signed_metadata");
  s.signed_packages = o.boolean("signed_packages");
  s.trust_source = o.str("trust_source");
  if (!s.signed_metadata && !s.signed_packages)
    throw Bad{o.path("signed_packages") + ": a repository trusted through neither signed metadata nor signed packages"};
  if (const auto trust = o.str("trust"); trust != trust_mode(s))
    throw Bad{fmt::format("{}: '{}' is not what signed_metadata and signed_packages say ('{}')", o.path("trust"), trust,
                          trust_mode(s))};
  if (const auto& m = o.at("mirror"); !m.is_null()) {
    Obj mo(m, o.path("mirror"));
    s.mirror_dir = mo.str("dir");
    const auto& files = mo.at("files");
    if (!files.is_array()) throw Bad{mo.path("files") + ": expected a list"};
    for (const auto& f : files) {
      Obj fo(f, mo.path("files[]"));
      s.mirror.push_back({fo.str("path"), fo.str("sha256"), fo.integer<std::uint64_t>("size")});
      fo.done();
    }
    mo.done();
  }
  return s;
}

DkmsBuildStep dkms_build_of(Obj& o) {
  DkmsBuildStep s;
  s.component = o.str("component");
  s.version = o.str("version");
  s.source = o.str("source");
  s.dkms_name = o.str("dkms_name");
  s.subdir = o.str("subdir");
  s.modules = o.strs("modules");
  s.kernels = o.strs("kernels");
  s.signing = signing_of(o.at("signing"), o.path("signing"));
  s.dkms_conf_template = o.str("dkms_conf_template");
  if (o.has("signed_by") && o.str("signed_by") != to_string(signed_by(s)))
    throw Bad{o.path("signed_by") + ": does not match the step's signing"};
  if (o.has("prebuilt")) s.prebuilt = prebuilt_of(o.at("prebuilt"), o.path("prebuilt"));
  if (o.has("source_dir")) s.source_dir = o.str("source_dir");
  if (o.has("directives")) s.directives = o.strs("directives");
  if (s.source.empty() == s.source_dir.empty())
    throw Bad{o.path("source") + ": a dkms-build step names its sources by artifact (source) or by directory "
                                 "(source_dir), one of the two"};
  return s;
}

RunInstallerStep run_installer_of(Obj& o) {
  RunInstallerStep s;
  s.component = o.str("component");
  s.recipe = o.str("recipe");
  s.version = o.str("version");
  s.flavour = o.str("module_flavour");
  s.run_file = o.str("run_file");
  if (o.has("signed_by")) {
    const auto by = signed_by_of(o.str("signed_by"));
    if (!by) throw Bad{o.path("signed_by") + ": expected hpcbake-key, dkms-mok or unsigned"};
    s.signed_by = *by;
  }
  const auto& cmds = o.at("commands");
  if (!cmds.is_array()) throw Bad{o.path("commands") + ": expected a list"};
  for (const auto& c : cmds) {
    Obj co(c, o.path("commands[]"));
    s.commands.emplace_back(co.str("kernel"), co.strs("argv"));
    co.done();
  }
  return s;
}

WaagentStep waagent_of(Obj& o) {
  WaagentStep s;
  s.config = o.str("config");
  s.unit = o.str("unit");
  s.enable = o.boolean("enable_rdma");
  s.settings = string_map(o.at("set"), o.path("set"));
  o.str("restart"); // a fixed sentence
  s.reason = o.str("reason");
  return s;
}

ContainerRuntimeStep container_of(Obj& o) {
  ContainerRuntimeStep s;
  s.engines = string_map(o.at("engines"), o.path("engines"));
  s.runtime = o.str("runtime");
  s.binary = o.str("binary");
  o.str("restart"); // a fixed sentence
  if (o.has("kubernetes")) {
    Obj k(o.at("kubernetes"), o.path("kubernetes"));
    if (k.str("containerd_default_runtime") != s.runtime || !k.boolean("enable_cdi"))
      throw Bad{o.path("kubernetes") +
                ": expected the step's runtime as containerd_default_runtime and enable_cdi true"};
    k.done();
    s.kubernetes = true;
  }
  if (o.has("rdma")) {
    Obj r(o.at("rdma"), o.path("rdma"));
    if (r.str("docker_memlock") != "unlimited" || r.str("cdi_spec") != container::kRdmaCdiSpec)
      throw Bad{o.path("rdma") + ": expected docker_memlock \"unlimited\" and cdi_spec " + container::kRdmaCdiSpec};
    r.str("cdi_refresh"); // a fixed sentence
    r.done();
    s.rdma = true;
  }
  return s;
}

BuildStep build_of(Obj& o) {
  BuildStep s{o.str("component"), o.str("version"), o.str("dir"), o.strs("env"), {}, {}};
  const auto& cmds = o.at("commands");
  if (!cmds.is_array()) throw Bad{o.path("commands") + ": expected a list of argv lists"};
  for (std::size_t i = 0; i < cmds.size(); ++i) {
    auto argv = Obj::as_strs(cmds[i], fmt::format("{}[{}]", o.path("commands"), i));
    if (argv.empty()) throw Bad{fmt::format("{}[{}]: an empty argv", o.path("commands"), i)};
    s.commands.push_back(std::move(argv));
  }
  s.creates = o.str("creates");
  return s;
}

Action action_of(const std::string& kind, Obj& o) {
  if (kind == "packages") return packages_of(o);
  if (kind == "repository") return repository_of(o);
  if (kind == "kernel-headers")
    return HeadersStep{manager(o.str("manager"), o.path("manager")), o.str("kernel"), o.str("package"), o.str("check")};
  if (kind == "artifact") {
    ArtifactStep s{o.str("component"), o.str("version"),    o.str("name"),
                   o.strs("urls"),     o.opt_str("sha256"), o.opt_num<std::int64_t>("size")};
    return s;
  }
  if (kind == "unpack")
    return UnpackStep{o.str("component"), o.str("version"), o.str("artifact"), o.str("dest"), o.integer<int>("strip")};
  if (kind == "git-source") {
    GitSourceStep g{o.str("component"), o.str("version"), o.str("url"), o.str("commit"), o.str("dest"), std::nullopt};
    if (o.has("bundle")) {
      Obj b(o.at("bundle"), o.path("bundle"));
      g.bundle = MirrorFile{b.str("file"), b.str("sha256"), b.integer<std::uint64_t>("size")};
      b.done();
    }
    return g;
  }
  if (kind == "build") return build_of(o);
  if (kind == "config") return ConfigStep{o.str("path"), o.str("content"), mode_of(o.str("mode"), o.path("mode"))};
  if (kind == "modules-load") {
    ModulesLoadStep s{o.str("path"), o.strs("modules")};
    o.str("content"); // derived from the modules
    return s;
  }
  if (kind == "command") {
    CommandStep s{o.str("purpose"), o.str("kernel"), o.strs("argv"), {}, {}};
    if (o.has("initramfs")) {
      s.initramfs = o.str("initramfs");
      s.only_if_holds = o.strs("only_if_holds");
    }
    return s;
  }
  if (kind == "signing-key") return SigningKeyStep{signing_of(o.at("signing"), o.path("signing"))};
  if (kind == "run-installer") return run_installer_of(o);
  if (kind == "dkms-build") return dkms_build_of(o);
  if (kind == "dkms-check")
    return DkmsCheckStep{o.str("package"), o.str("version"), o.str("kernel"), o.strs("modules"),
                         o.boolean("check_signer")};
  if (kind == "kernel-hold") return KernelHoldStep{o.strs("packages"), o.strs("kernels"), o.str("source")};
  if (kind == "service") return ServiceStep{o.str("unit"), o.strs("argv")};
  if (kind == "waagent") return waagent_of(o);
  if (kind == "container-runtime") return container_of(o);
  if (kind == "reboot") return RebootStep{o.str("reason")};
  if (kind == "verify") {
    VerifyStep v{expectations_of(o.at("checks"), o.path("checks")), o.str("thresholds_source")};
    if (o.has("hardware_checks")) {
      if (o.str("hardware_checks") != "deferred")
        throw Bad{o.path("hardware_checks") + ": expected \"deferred\" (or no field: checked now)"};
      v.defer_hardware = true;
    }
    return v;
  }
  if (kind == "canonical-driver") {
    CanonicalDriverStep c{o.str("component"),
                          o.str("branch"),
                          o.str("module_flavour"),
                          o.strs("kernels"),
                          o.str("modules_package"),
                          o.strs("packages"),
                          o.str("keyring"),
                          o.strs("fingerprints"),
                          o.str("signer"),
                          o.str("module_signer"),
                          o.strs("module_signer_serials"),
                          o.str("source"),
                          o.str("flavour_package")};
    if (!o.boolean("hold")) throw Bad{o.path("hold") + ": Canonical's driver packages are always held"};
    o.str("versions"); // prose
    return c;
  }
  throw Bad{fmt::format("{}: unknown step kind '{}'", o.path("kind"), kind)};
}

Step step_of(const json& j, const std::string& where) {
  Obj o(j, where);
  Step s;
  s.id = o.str("id");
  const std::string kind = o.str("kind");
  s.title = o.str("title");
  s.after = o.strs("after");
  Obj detail(o.at("detail"), fmt::format("{} ({}).detail", where, s.id));
  s.action = action_of(kind, detail);
  detail.done();
  o.done();
  if (s.kind() != kind) throw Bad{fmt::format("{}: kind '{}' read back as '{}'", where, kind, s.kind())};
  return s;
}

Plan plan_of(const json& doc, const std::string& where) {
  Obj o(doc, where);
  if (const auto& v = o.at("schema"); !v.is_number_integer() || v.get<long long>() != kPlanSchema)
    throw Bad{fmt::format("{}: plan schema {} is not the one this hpcbake reads ({})", where, v.dump(), kPlanSchema)};
  Plan p;
  p.size = o.str("size");
  p.size_id = o.str("size_manifest");
  p.family = o.str("family");
  p.distro_id = o.str("distro");
  p.distro_name = o.str("distro_name");
  p.arch = o.str("arch");
  p.profile = o.opt_str("profile").value_or("");
  p.kernels = o.strs("kernels");
  p.kernels_source = o.str("kernels_source");
  {
    json signing = o.at("signing");
    if (signing.is_object() && signing.contains("route")) { // derived: Plan::signing_route
      const auto& r = signing["route"];
      if (!r.is_string() || !parse_signing_route(r.get<std::string>()))
        throw Bad{o.path("signing") + ".route: expected none, hpcbake-key or canonical-signed"};
      signing.erase("route");
    }
    p.signing = signing_of(signing, o.path("signing"));
  }
  p.package_manager = manager(o.str("package_manager"), o.path("package_manager"));
  p.platform_keyring = o.boolean("module_platform_keyring");
  if (o.has("route")) {
    const auto route = parse_signing_route(o.str("route"));
    if (!route) throw Bad{o.path("route") + ": not a route this hpcbake knows"};
    p.route = *route;
    p.route_reason = o.str("route_reason");
  }
  const auto& steps = o.at("steps");
  if (!steps.is_array()) throw Bad{o.path("steps") + ": expected a list"};
  std::set<std::string> ids;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    p.steps.push_back(step_of(steps[i], fmt::format("{}.steps[{}]", where, i)));
    if (!ids.insert(p.steps.back().id).second)
      throw Bad{fmt::format("{}.steps[{}]: step id '{}' appears twice", where, i, p.steps.back().id)};
  }
  for (const auto& s : p.steps)
    for (const auto& a : s.after)
      if (!ids.count(a)) throw Bad{fmt::format("{}: step {} comes after '{}', which is not a step", where, s.id, a)};
  p.notes = o.strs("notes");
  if (o.has("overrides")) {
    const auto& list = o.at("overrides");
    if (!list.is_array()) throw Bad{o.path("overrides") + ": expected a list"};
    for (std::size_t i = 0; i < list.size(); ++i) {
      Obj ov(list[i], fmt::format("{}.overrides[{}]", where, i));
      p.overrides.push_back({ov.str("what"), ov.str("value"), ov.str("file"), ov.integer<int>("line")});
      ov.done();
    }
  }
  const auto& arts = o.at("artifacts");
  if (!arts.is_array()) throw Bad{o.path("artifacts") + ": expected a list"};
  for (const auto& a : arts) {
    Obj ao(a, o.path("artifacts[]"));
    PlannedArtifact pa{
        ao.str("component"), ao.str("version"),
        manifest::Artifact{ao.str("name"), ao.strs("urls"), ao.opt_str("sha256"), ao.opt_num<std::int64_t>("size")}};
    ao.done();
    p.artifacts.push_back(std::move(pa));
  }
  p.artifacts_redacted = o.strs("artifacts_redacted");
  o.done();
  return p;
}

} // namespace

Result<Plan> plan_from_json(const json& doc, const std::string& where) {
  try {
    return plan_of(doc, where);
  } catch (const Bad& b) {
    return fail(ErrorKind::usage, b.what,
                "the stored plan is damaged or from another hpcbake version: move it aside and run 'hpcbake install' "
                "again (it plans afresh; the journal keeps what is done)");
  } catch (const json::exception& e) {
    return fail(ErrorKind::usage, fmt::format("{}: {}", where, e.what()),
                "the stored plan is damaged: move it aside and run 'hpcbake install' again");
  }
}

} // namespace hpcbake::plan
