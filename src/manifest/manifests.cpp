#include "manifest/manifests.hpp"

#include "manifest/catalog.hpp"

#include "util/datadir.hpp"

#include "util/strings.hpp"
#include "util/url.hpp"
#include "util/utf8.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <regex>

namespace hpcbake::manifest {

namespace fs = std::filesystem;
using util::excerpt;
using util::to_lower;

bool DistroManifest::serves(Arch a) const {
  return std::find(arches.begin(), arches.end(), a) != arches.end();
}

bool DistroManifest::matches(std::string_view id_, std::string_view version_id) const {
  if (id_ != os_id) return false;
  if (version_match == VersionMatch::major) {
    if (version_id == os_version_id) return true;
    return version_id.size() > os_version_id.size() && version_id.starts_with(os_version_id) &&
           version_id[os_version_id.size()] == '.';
  }
  return version_id == os_version_id;
}

namespace {
// The first variant listing `distro`: components and repositories choose the same way.
template <typename Variant> bool serves(const Variant& v, std::string_view distro, Arch arch) {
  return std::find(v.distros.begin(), v.distros.end(), distro) != v.distros.end() &&
         std::find(v.arches.begin(), v.arches.end(), arch) != v.arches.end();
}
template <typename Variant>
const Variant* first_for(const std::vector<Variant>& variants, std::string_view distro, Arch arch) {
  for (const auto& v : variants)
    if (serves(v, distro, arch)) return &v;
  return nullptr;
}
} // namespace

const ComponentVariant* ComponentManifest::variant_for(std::string_view distro, std::string_view gpu_model,
                                                       Arch arch) const {
  const ComponentVariant* any = nullptr;
  for (const auto& v : variants) {
    if (!serves(v, distro, arch)) continue;
    if (v.gpu_models.empty()) {
      if (!any) any = &v;
    } else if (!gpu_model.empty() &&
               std::find(v.gpu_models.begin(), v.gpu_models.end(), gpu_model) != v.gpu_models.end()) {
      return &v;
    }
  }
  return any;
}

const SizeManifest* Manifests::find_size(std::string_view name) const {
  const std::string key = size_key(name); // every spelling: Standard_X, X, the file name, any case
  for (const auto& s : sizes)
    if (size_key(s.size) == key) return &s;
  return nullptr;
}

const SettingsManifest* Manifests::find_settings(std::string_view id) const {
  for (const auto& st : settings)
    if (st.id == id) return &st;
  return nullptr;
}

const ProfileManifest* Manifests::find_profile(std::string_view id) const {
  for (const auto& p : profiles)
    if (p.id == id) return &p;
  return nullptr;
}

const DistroManifest* Manifests::find_distro(std::string_view id) const {
  for (const auto& d : distros)
    if (util::iequals(d.id, id)) return &d; // "Ubuntu-22.04" is ubuntu-22.04
  return nullptr;
}

const DistroManifest* Manifests::find_distro_named(std::string_view name) const {
  if (const auto* d = find_distro(name)) return d;
  const DistroManifest* only = nullptr;
  for (const auto& d : distros) {
    const bool minor_of = d.id.size() > name.size() + 1 && d.id[name.size()] == '.' &&
                          util::iequals(std::string_view(d.id).substr(0, name.size()), name);
    if (!minor_of) continue;
    if (only) return nullptr; // two minors: the person must say which
    only = &d;
  }
  return only;
}

const ComponentManifest* Manifests::find_component(std::string_view id) const {
  for (const auto& c : components)
    if (c.id == id) return &c;
  return nullptr;
}

namespace {
// A file:/// path without "." or ".." components: it stays under --root.
bool plain_file_url(std::string_view url) {
  if (!url.starts_with("file:///")) return false;
  for (auto part : util::split(url.substr(std::string_view("file://").size()), '/'))
    if (part == "." || part == "..") return false;
  return true;
}
} // namespace

bool is_repository_uri(std::string_view uri) {
  if (!util::is_config_word(uri)) return false;
  if (plain_file_url(uri)) return uri.ends_with("/");
  // Written into a sources file every user can read, and into the plan: no credentials in it.
  return uri.starts_with("https://") && !util::url_problem(uri) && !util::url_has_secret(uri);
}

const RepositoryManifest* Manifests::find_repository(std::string_view id) const {
  for (const auto& r : repositories)
    if (r.id == id) return &r;
  return nullptr;
}

const RepositoryVariant* RepositoryManifest::variant_for(std::string_view distro, Arch arch) const {
  return first_for(variants, distro, arch);
}

const DistroManifest* Manifests::match_distro(std::string_view os_id, std::string_view version_id) const {
  for (const auto& d : distros)
    if (d.matches(os_id, version_id)) return &d;
  return nullptr;
}

namespace {

// The ranges of the integer fields (manifests/README.md lists them). Each field is read into
// int64 and checked against its range, which never exceeds the range of the type it is stored in
// (MapReader::integer_as), so no value wraps. Where the field's meaning gives a tighter bound
// than the type, it is here with the reason; these bound what the schema accepts and are not
// claims about hardware: raise one here, with the manifest that needs it.
//
// Devices of one kind that a VM sees (GPUs, NVSwitches, NVMe disks, InfiniBand ports, CPU
// sockets): the shipped sizes have at most 16. 1024 leaves room for any size to come and still
// refuses a count pasted with extra digits.
constexpr std::int64_t max_devices = 1024;
// CPU cores of a VM: the shipped sizes have at most 368; 65536 is far above.
constexpr std::int64_t max_cores = 65536;
// Memory in MB: the shipped sizes have at most 1915071 (about 1.8 TiB); 2^30 MB (1 PiB) is far
// above and refuses that size's memory written in kB.
constexpr std::int64_t max_memory_mb = std::int64_t{1} << 30;
// Per-port InfiniBand rate in Gb/s: 100 to 800 in the shipped sizes. 10000 is 12.5 times the
// fastest and below 100000, the slowest of them written in Mb/s.
constexpr std::int64_t max_rate_gbps = 10000;
// A vGPU (GRID) release major: 16, 17 and 20 in the shipped manifests, while the driver
// versions beside them start with three digits (535 to 595): 99 refuses a driver branch written
// where a vGPU release belongs.
constexpr std::int64_t max_grid_branch = 99;

// Whether `folder`/`id`.yaml exists, for an id that is a plain file name: a file that exists but
// failed to load has its own diagnostics, so a reference to it does not add one more. An id with
// '/' or one too long for a file name names no file (and never makes this throw).
bool manifest_file_exists(const fs::path& dir, const char* folder, const std::string& id) {
  if (id.empty() || id.find('/') != std::string::npos || id == "." || id == "..") return false;
  std::error_code ec;
  return fs::exists(dir / folder / (id + ".yaml"), ec);
}

// The expected file of a reference, for a message: excerpted, since the id is a manifest's value.
std::string expected_file(const fs::path& dir, const char* folder, const std::string& id) {
  return excerpt((dir / folder).string() + "/" + id + ".yaml", 160);
}

// `key:` as a list of architectures (default x86_64 alone).
std::vector<Arch> read_arches(MapReader& r, const char* key) {
  std::vector<Arch> out;
  const auto names = r.strings(key, Need::optional);
  if (!names) return {Arch::x86_64};
  for (const auto& n : *names) {
    if (auto a = parse_arch(n))
      out.push_back(*a);
    else
      r.error(key, fmt::format("'{}' is not an architecture hpcbake knows (x86_64, aarch64)", excerpt(n)));
  }
  if (out.empty()) r.error(key, "name at least one architecture");
  return out;
}

// Reads `schema:` first: a file of another version is refused before anything else.
bool check_schema(MapReader& r) {
  auto v = r.integer_as<int>("schema", Need::required, 1);
  if (v && *v != schema_version) {
    r.error("schema", fmt::format("schema version {} is not supported by this hpcbake (it reads version {})", *v,
                                  schema_version));
    return false;
  }
  return v.has_value();
}

// driver.grid_branch: {min, max, source}; required for kind grid (`grid`), refused otherwise.
std::optional<GridBranchRange> read_grid_branch(MapReader& d, bool grid) {
  auto g = d.map("grid_branch", grid ? Need::required : Need::optional);
  if (!g) return std::nullopt;
  if (!grid) d.error("grid_branch", "a GRID branch range only applies to kind: grid");
  GridBranchRange range;
  range.min = g->integer_as<int>("min", Need::optional, 1, max_grid_branch);
  range.max = g->integer_as<int>("max", Need::optional, 1, max_grid_branch);
  range.source = g->string("source", Need::required).value_or("");
  if (!range.min && !range.max) g->error("min", "state at least one bound (min, max) of the GRID branch range");
  if (range.min && range.max && *range.min > *range.max)
    g->error("min", fmt::format("{} is above max {}: no GRID branch fits", *range.min, *range.max));
  g->finish();
  return range;
}

// The size's `checks:` section: the thresholds of Azure's health-check configuration.
void read_size_checks(MapReader& c, SizeManifest& s) {
  s.checks.gpu_count = c.integer_as<int>("gpu_count", Need::optional, 1, max_devices);
  s.checks.gpu_bw_h2d_gbs = c.number("gpu_bw_h2d_gbs", Need::optional);
  s.checks.gpu_bw_p2p_gbs = c.number("gpu_bw_p2p_gbs", Need::optional);
  // Error counts: NVML's counters are 64-bit; int64 is the bound.
  s.checks.gpu_ecc_sram_threshold = c.integer_as<std::int64_t>("gpu_ecc_sram_threshold", Need::optional, 0);
  s.checks.gpu_ecc_dram_threshold = c.integer_as<std::int64_t>("gpu_ecc_dram_threshold", Need::optional, 0);
  s.checks.nccl_allreduce_gbs = c.number("nccl_allreduce_gbs", Need::optional);
  s.checks.ib_write_bw_gdr_gbps = c.number("ib_write_bw_gdr_gbps", Need::optional);
  s.checks.ib_write_bw_gbps = c.number("ib_write_bw_gbps", Need::optional);
  s.checks.cpu_stream_mbs = c.number("cpu_stream_mbs", Need::optional);
  s.checks.memory_tolerance_pct = c.number("memory_tolerance_pct", Need::optional);
  if (s.checks.memory_tolerance_pct && (*s.checks.memory_tolerance_pct < 0 || *s.checks.memory_tolerance_pct > 50))
    c.error("memory_tolerance_pct", "expected a percentage from 0 to 50 (check_hw_physmem's fudge)");
  if (s.checks.memory_tolerance_pct && !s.memory_mb)
    c.error("memory_tolerance_pct", "a memory tolerance needs memory_mb");
  s.checks.nccl_allreduce_message = c.string("nccl_allreduce_message", Need::optional).value_or("");
  if (!s.checks.nccl_allreduce_message.empty() &&
      !std::regex_match(s.checks.nccl_allreduce_message, std::regex("[1-9][0-9]{0,5}[KMG]?")))
    c.error("nccl_allreduce_message", "expected a size as nccl-tests' -b takes it: a number with K, M or G (16G)");
  if (!s.checks.nccl_allreduce_message.empty() && !s.checks.nccl_allreduce_gbs)
    c.error("nccl_allreduce_message", "a message size needs nccl_allreduce_gbs, the bandwidth it must reach");
  if (s.checks.gpu_count && (!s.gpu || s.gpu->count != *s.checks.gpu_count))
    c.error("gpu_count", fmt::format("checks.gpu_count {} disagrees with gpu.count {}", *s.checks.gpu_count,
                                     s.gpu ? s.gpu->count : 0));
  c.finish();
}

std::optional<SizeManifest> read_size(MapReader& r, const std::string& id) {
  SizeManifest s;
  s.id = id;
  s.file = r.file();
  check_schema(r);
  s.size = r.string("size", Need::required).value_or("");
  s.family = r.string("family", Need::required).value_or("");
  s.source = r.string("source", Need::required).value_or("");
  s.notes = r.string("notes", Need::optional).value_or("");
  s.arch = parse_arch(r.one_of("arch", Need::optional, arch_names()).value_or("x86_64")).value_or(Arch::x86_64);
  if (auto cpu = r.map("cpu", Need::optional)) {
    s.cpu_sockets = cpu->integer_as<int>("sockets", Need::optional, 1, max_devices);
    s.cpu_cores = cpu->integer_as<int>("cores", Need::required, 1, max_cores);
    s.cpu_threads = cpu->integer_as<int>("threads", Need::optional, 1, max_cores);
    cpu->finish();
  }
  s.memory_mb = r.integer("memory_mb", Need::optional, 1, max_memory_mb);
  // check_hw_physmem's figure where a conf gives it in kB (not a whole MB): kept exact, since NHC
  // compares in kB; memory_mb is then its whole MB (NHC's MB is 1024 kB: common.nhc
  // nhc_common_parse_size).
  s.memory_kb = r.integer("memory_kb", Need::optional, 1, max_memory_mb * 1024);
  if (s.memory_kb && (!s.memory_mb || *s.memory_mb != *s.memory_kb / 1024))
    r.error("memory_kb", fmt::format("memory_kb {} needs memory_mb {} (its whole MB of 1024 kB, rounded down)",
                                     *s.memory_kb, *s.memory_kb / 1024));
  s.nvme_count = r.integer_as<int>("nvme_count", Need::optional, 0, max_devices);
  if (auto g = r.map("gpu", Need::optional)) {
    SizeGpu gpu;
    gpu.vendor = g->one_of("vendor", Need::required, {"nvidia", "amd"}).value_or("");
    gpu.model = g->string("model", Need::required).value_or("");
    gpu.count = g->integer_as<int>("count", Need::required, 1, max_devices).value_or(0);
    gpu.fraction = g->string("fraction", Need::optional);
    gpu.pci_ids = g->strings("pci_ids", Need::optional).value_or(std::vector<std::string>{});
    for (const auto& pid : gpu.pci_ids)
      if (!std::regex_match(pid, std::regex("0x[0-9a-f]{4}")))
        g->error("pci_ids", fmt::format("'{}' is not a PCI device id like \"0x2330\"", excerpt(pid)));
    gpu.nvswitch_count = g->integer_as<int>("nvswitch_count", Need::optional, 0, max_devices).value_or(0);
    gpu.fabric_manager = g->boolean("fabric_manager", Need::optional).value_or(false);
    if (gpu.fabric_manager && gpu.nvswitch_count == 0)
      g->error("fabric_manager", "Fabric Manager only serves NVSwitch systems: set nvswitch_count");
    gpu.imex = g->boolean("imex", Need::optional).value_or(false);
    if (gpu.imex && (gpu.fabric_manager || gpu.vendor != "nvidia"))
      g->error("imex", "IMEX serves NVIDIA NVLink multi-node systems, which run no Fabric Manager in the VM");
    g->finish();
    s.gpu = gpu;
  }
  if (auto d = r.map("driver", Need::optional)) {
    SizeDriver drv;
    const auto kind = d->one_of("kind", Need::required, driver_kind_names());
    drv.kind = parse_driver_kind(kind.value_or("")).value_or(DriverKind::cuda);
    drv.module_flavour = d->one_of("module_flavour", Need::optional, {"open", "proprietary"});
    drv.grid_branch = read_grid_branch(*d, kind && drv.kind == DriverKind::grid);
    if (kind && is_nvidia(drv.kind) && !drv.module_flavour)
      d->error("kind", "NVIDIA drivers need module_flavour: open or proprietary");
    d->finish();
    s.driver = drv;
  }
  if (s.gpu && !s.driver) r.error("gpu", "a size with a GPU needs a 'driver' section");
  if (!s.gpu && s.driver) r.error("driver", "a 'driver' section needs a 'gpu' section");
  if (s.gpu && s.driver) {
    if (is_nvidia(s.driver->kind) != (s.gpu->vendor == "nvidia"))
      r.error("driver",
              fmt::format("driver kind '{}' does not fit gpu vendor '{}'", to_string(s.driver->kind), s.gpu->vendor));
  }
  if (auto ib = r.map("infiniband", Need::optional)) {
    SizeInfiniband inf;
    inf.ports = ib->integer_as<int>("ports", Need::required, 1, max_devices).value_or(0);
    inf.rate_gbps = ib->integer_as<int>("rate_gbps", Need::required, 1, max_rate_gbps).value_or(0);
    inf.ipoib = ib->boolean("ipoib", Need::optional).value_or(true);
    inf.gpudirect = ib->boolean("gpudirect", Need::optional).value_or(s.gpu.has_value() && s.gpu->vendor == "nvidia");
    if (inf.gpudirect && !(s.gpu && s.gpu->vendor == "nvidia"))
      ib->error("gpudirect", "GPUDirect RDMA (nvidia-peermem) needs NVIDIA GPUs on the size");
    ib->finish();
    s.infiniband = inf;
  }
  s.dkms_modules = r.strings("dkms_modules", Need::optional).value_or(std::vector<std::string>{});
  s.os_settings = r.string("os_settings", Need::optional).value_or("");
  if (auto c = r.map("checks", Need::optional)) read_size_checks(*c, s);
  r.finish();
  if (!s.size.empty()) {
    std::string expected = to_lower(s.size);
    if (expected.starts_with("standard_")) expected.erase(0, 9);
    if (expected != id)
      r.error("size", fmt::format("file name '{}.yaml' does not match size '{}': name it '{}.yaml'", id,
                                  excerpt(s.size), excerpt(expected)));
  }
  return s;
}

// A distro's canonical_signed_nvidia section (DistroManifest::CanonicalSignedNvidia).
DistroManifest::CanonicalSignedNvidia read_canonical_signed(MapReader& c) {
  DistroManifest::CanonicalSignedNvidia cs;
  cs.kernel_flavour = c.string("kernel_flavour", Need::required).value_or("");
  cs.branches = c.strings("branches", Need::required).value_or(std::vector<std::string>{});
  for (const auto& b : cs.branches)
    if (b.empty() || !std::all_of(b.begin(), b.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; }))
      c.error("branches", fmt::format("'{}' is not a driver branch (its major number, such as 580)", excerpt(b)));
  cs.modules_package = c.string("modules_package", Need::required).value_or("");
  if (!cs.modules_package.empty() && (cs.modules_package.find("{kernel}") == std::string::npos ||
                                      cs.modules_package.find("{branch}") == std::string::npos))
    c.error("modules_package", "pattern must contain {branch} and {kernel}");
  cs.packages = c.strings("packages", Need::required).value_or(std::vector<std::string>{});
  cs.fabric_manager = c.strings("fabric_manager", Need::optional).value_or(std::vector<std::string>{});
  cs.archive_keyring = c.string("archive_keyring", Need::required).value_or("");
  if (!cs.archive_keyring.empty() && !cs.archive_keyring.starts_with("/"))
    c.error("archive_keyring", "must be an absolute path");
  for (const auto& f : c.strings("archive_key_fingerprints", Need::required).value_or(std::vector<std::string>{})) {
    auto n = util::normalize_fingerprint(f);
    if (n.empty())
      c.error("archive_key_fingerprints", "each must be a key's full fingerprint (40 or 64 hex digits), never a short "
                                          "key id");
    else
      cs.archive_key_fingerprints.push_back(std::move(n));
  }
  cs.signer = c.string("signer", Need::required).value_or("");
  cs.module_signer = c.string("module_signer", Need::required).value_or("");
  cs.module_signer_serials = c.strings("module_signer_serials", Need::required).value_or(std::vector<std::string>{});
  for (const auto& s : cs.module_signer_serials)
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isxdigit(ch) || ch == ':'; }))
      c.error("module_signer_serials",
              fmt::format("'{}' is not a certificate serial (hex, as openssl x509 prints it)", excerpt(s)));
  cs.source = c.string("source", Need::required).value_or("");
  c.finish();
  return cs;
}

std::optional<DistroManifest> read_distro(MapReader& r, const std::string& id) {
  DistroManifest d;
  d.id = id;
  d.file = r.file();
  check_schema(r);
  d.name = r.string("name", Need::required).value_or("");
  d.source = r.string("source", Need::required).value_or("");
  if (auto os = r.map("os_release", Need::required)) {
    d.os_id = os->string("id", Need::required).value_or("");
    d.os_version_id = os->string("version_id", Need::required).value_or("");
    // one_of has refused any other spelling, with the file's line and column.
    const auto match = os->one_of("match", Need::optional, {"exact", "major"}).value_or("exact");
    d.version_match = parse_version_match(match).value_or(VersionMatch::exact);
    os->finish();
  }
  d.reference_key = r.string("reference_key", Need::required).value_or("");
  const auto pm = r.one_of("package_manager", Need::required, {"apt", "dnf", "tdnf"}).value_or("apt");
  d.package_manager = pm == "dnf" ? PackageManager::dnf : pm == "tdnf" ? PackageManager::tdnf : PackageManager::apt;
  d.kernel_headers_package = r.string("kernel_headers_package", Need::required).value_or("");
  if (!d.kernel_headers_package.empty() && d.kernel_headers_package.find("{kernel}") == std::string::npos)
    r.error("kernel_headers_package", "pattern must contain {kernel}");
  d.build_packages = r.strings("build_packages", Need::required).value_or(std::vector<std::string>{});
  d.gpu_build_packages = r.strings("gpu_build_packages", Need::optional).value_or(std::vector<std::string>{});
  d.userspace_build_packages =
      r.strings("userspace_build_packages", Need::optional).value_or(std::vector<std::string>{});
  d.build_repositories = r.strings("build_repositories", Need::optional).value_or(std::vector<std::string>{});
  d.rdma_packages = r.strings("rdma_packages", Need::required).value_or(std::vector<std::string>{});
  d.initramfs_command = r.strings("initramfs_command", Need::required).value_or(std::vector<std::string>{});
  d.initramfs_file = r.string("initramfs_file", Need::optional).value_or("");
  if (!d.initramfs_file.empty() &&
      (!d.initramfs_file.starts_with("/") || d.initramfs_file.find("{kernel}") == std::string::npos))
    r.error("initramfs_file", "must be an absolute path containing {kernel}");
  d.nouveau_blacklist_file = r.string("nouveau_blacklist_file", Need::required).value_or("");
  d.waagent_service = r.string("waagent_service", Need::required).value_or("");
  d.waagent_config = r.string("waagent_config", Need::required).value_or("");
  d.arches = read_arches(r, "arches");
  if (auto engines = r.map("container_engine_packages", Need::optional)) {
    for (const char* engine : {"docker", "containerd"})
      if (auto pkgs = engines->strings(engine, Need::optional)) d.container_engine_packages[engine] = *pkgs;
    engines->finish();
  }
  if (auto hold = r.map("kernel_hold", Need::optional)) {
    d.kernel_hold_packages = hold->strings("packages", Need::required).value_or(std::vector<std::string>{});
    d.kernel_hold_source = hold->string("source", Need::required).value_or("");
    hold->finish();
  }
  if (auto keys = r.map("module_keyrings", Need::optional)) {
    d.module_keyrings.platform = keys->boolean("platform", Need::required).value_or(false);
    d.module_keyrings.source = keys->string("source", Need::required).value_or("");
    keys->finish();
  }
  if (auto c = r.map("canonical_signed_nvidia", Need::optional)) d.canonical_signed_nvidia = read_canonical_signed(*c);
  for (auto* path : {&d.nouveau_blacklist_file, &d.waagent_config})
    if (!path->empty() && !path->starts_with("/"))
      r.error(path == &d.waagent_config ? "waagent_config" : "nouveau_blacklist_file", "must be an absolute path");
  r.finish();
  if (!d.os_id.empty() && !d.os_version_id.empty()) {
    const std::string expected = d.os_id + "-" + d.os_version_id;
    if (expected != id)
      r.error("os_release", fmt::format("file name '{}.yaml' does not match os_release '{}': name it '{}.yaml'", id,
                                        excerpt(expected), excerpt(expected)));
  }
  return d;
}

// An absolute host path with no "." or ".." component and nothing but the path characters a
// userspace prefix or build directory needs (so the plan's argv and files stay unambiguous).
bool plain_abs_path(const std::string& p) {
  static const std::regex ok(R"(/([A-Za-z0-9._+-]+/?)*)");
  if (!std::regex_match(p, ok)) return false;
  for (const auto& part : util::split(p, '/'))
    if (part == "." || part == "..") return false;
  return true;
}

std::string read_abs_path(MapReader& r, const std::string& key, Need need) {
  auto p = r.string(key, need);
  if (!p) return {};
  if (!plain_abs_path(*p)) {
    r.error(key, fmt::format("'{}' must be an absolute path of letters, digits and ._+- (no . or ..)", excerpt(*p)));
    return {};
  }
  return *p;
}

// The userspace fields of a variant (kind userspace): prefix, git, unpack, build, modulefile.
void read_userspace_variant(MapReader& v, ComponentVariant& cv) {
  static const std::regex hex40("[0-9a-f]{40}");
  cv.prefix = read_abs_path(v, "prefix", cv.refused ? Need::optional : Need::required);
  if (auto g = v.map("git", Need::optional)) {
    GitSource src;
    src.url = g->string("url", Need::required).value_or("");
    if (auto why = util::url_problem(src.url); why && src.url.rfind("file:///", 0) != 0)
      g->error("url", fmt::format("'{}' {}: {}", excerpt(util::redact_url(src.url)), *why, util::url_hint()));
    src.commit = g->string("commit", Need::required).value_or("");
    if (!std::regex_match(src.commit, hex40))
      g->error("commit", "must be the 40 lower-case hex digits of the pinned commit (a branch or tag is no pin)");
    src.to = read_abs_path(*g, "to", Need::required);
    g->finish();
    cv.git = src;
  }
  if (auto u = v.map("unpack", Need::optional)) {
    Unpack un;
    un.artifact = u->string("artifact", Need::required).value_or("");
    un.to = read_abs_path(*u, "to", Need::required);
    un.strip = u->integer_as<int>("strip", Need::optional, 0, 16).value_or(0);
    u->finish();
    cv.unpack = un;
  }
  if (auto b = v.map("build", Need::optional)) {
    Build bd;
    bd.dir = read_abs_path(*b, "dir", Need::required);
    bd.env = b->strings("env", Need::optional).value_or(std::vector<std::string>{});
    for (const auto& e : bd.env)
      if (e.find('=') == std::string::npos || e.front() == '=')
        b->error("env", fmt::format("'{}' must be KEY=VALUE", excerpt(e)));
    bd.commands = b->string_lists("commands", Need::required).value_or(std::vector<std::vector<std::string>>{});
    bd.creates = b->string("creates", Need::required).value_or("");
    b->finish();
    cv.build = bd;
  }
  cv.modulefile = v.string("modulefile", Need::optional).value_or("");
}

// The top-level fields of a userspace component: applies_to, after, module.
void read_userspace_fields(MapReader& r, ComponentManifest& c) {
  const auto applies = r.one_of("applies_to", Need::optional, {"any", "infiniband", "nvidia-gpu"});
  c.applies_to = applies == "infiniband"   ? AppliesTo::infiniband
                 : applies == "nvidia-gpu" ? AppliesTo::nvidia_gpu
                                           : AppliesTo::any;
  c.after = r.strings("after", Need::optional).value_or(std::vector<std::string>{});
  c.module = r.string("module", Need::optional).value_or("");
  static const std::regex module_name("[a-z0-9][a-z0-9._+-]*(/[a-z0-9._+-]+)*");
  if (!c.module.empty() && !std::regex_match(c.module, module_name))
    r.error("module", fmt::format("'{}' must be a module name such as mpi/hpcx", excerpt(c.module)));
  c.module_aliases = r.strings("module_aliases", Need::optional).value_or(std::vector<std::string>{});
  for (const auto& a : c.module_aliases)
    if (!std::regex_match(util::replace_all(a, "{version}", "1"), module_name) || c.module.empty())
      r.error("module_aliases",
              fmt::format("'{}' must be a module name such as mpi/hpcx-v2.25.1, beside a module", excerpt(a)));
}

std::optional<ComponentManifest> read_component(MapReader& r, const std::string& id) {
  ComponentManifest c;
  c.id = id;
  c.file = r.file();
  check_schema(r);
  c.component = r.string("component", Need::required).value_or("");
  if (!c.component.empty() && c.component != id)
    r.error("component", fmt::format("component '{}' must match its file name '{}.yaml'", excerpt(c.component), id));
  const auto kind = r.one_of("kind", Need::required, component_kind_names());
  c.kind = parse_component_kind(kind.value_or("")).value_or(ComponentKind::nvidia_driver);
  if (auto d = r.map("dkms", Need::optional)) {
    ComponentDkms dk;
    dk.name = d->string("name", Need::required).value_or("");
    dk.modules = d->strings("modules", Need::required).value_or(std::vector<std::string>{});
    dk.subdir = d->string("subdir", Need::optional).value_or("");
    dk.reboot = d->boolean("reboot", Need::optional).value_or(false);
    dk.directives = d->strings("directives", Need::optional).value_or(std::vector<std::string>{});
    if (std::any_of(dk.directives.begin(), dk.directives.end(),
                    [](const std::string& l) { return l.find('\n') != std::string::npos; }))
      d->error("directives", "each directive is one dkms.conf line: write one list item per line");
    d->finish();
    c.dkms = dk;
  }
  if (kind && c.kind == ComponentKind::dkms_module && !c.dkms)
    r.error("kind", "a dkms-module component needs a dkms: section (name, modules)");
  if (c.kind != ComponentKind::dkms_module && c.kind != ComponentKind::userspace && c.dkms)
    r.error("dkms", "only components of kind dkms-module or userspace have a dkms: section");
  c.description = r.string("description", Need::required).value_or("");
  c.source = r.string("source", Need::required).value_or("");
  const bool userspace = c.kind == ComponentKind::userspace;
  if (userspace) read_userspace_fields(r, c);
  static const std::regex hex64("[0-9a-f]{64}");
  if (auto variants = r.maps("variants", Need::required)) {
    for (auto& v : *variants) {
      ComponentVariant cv;
      cv.distros = v.strings("distros", Need::required).value_or(std::vector<std::string>{});
      cv.version = v.string("version", Need::required).value_or("");
      cv.grid_branch = v.integer_as<int>("grid_branch", Need::optional, 1, max_grid_branch);
      if (c.kind == ComponentKind::grid_driver && !cv.grid_branch)
        v.error("grid_branch", "GRID variants need grid_branch");
      cv.packages = v.strings("packages", Need::optional).value_or(std::vector<std::string>{});
      cv.repository = v.string("repository", Need::optional);
      cv.gpu_models = v.strings("gpu_models", Need::optional).value_or(std::vector<std::string>{});
      cv.arches = read_arches(v, "arch");
      cv.refused = v.string("refused", Need::optional);
      cv.notes = v.string("notes", Need::optional).value_or("");
      if (userspace) read_userspace_variant(v, cv);
      if (auto arts = v.maps("artifacts", Need::optional)) {
        for (auto& a : *arts) {
          Artifact art;
          art.name = a.string("name", Need::required).value_or("");
          if (art.name.find('/') != std::string::npos || art.name == ".." || art.name == ".")
            a.error("name", "must be a plain file name");
          art.urls = a.strings("urls", Need::required).value_or(std::vector<std::string>{});
          for (const auto& u : art.urls)
            if (auto why = util::url_problem(u))
              a.error("urls", fmt::format("'{}' {}: {}", excerpt(util::redact_url(u)), *why, util::url_hint()));
          if (auto sha = a.string("sha256", Need::required)) {
            if (*sha == "unknown") {
              art.sha256.reset();
            } else if (std::regex_match(*sha, hex64)) {
              art.sha256 = *sha;
            } else {
              a.error("sha256", "must be 64 lower-case hex digits, or 'unknown' when no pin is known");
            }
          }
          art.size = a.integer_as<std::int64_t>("size", Need::optional, 1); // bytes: curl_off_t is int64
          a.finish();
          cv.artifacts.push_back(std::move(art));
        }
      }
      if (cv.refused && (!cv.artifacts.empty() || !cv.packages.empty() || cv.repository))
        v.error("refused", "a refused variant installs nothing: drop its artifacts, packages and repository");
      v.finish();
      c.variants.push_back(std::move(cv));
    }
  }
  r.finish();
  return c;
}

template <typename T, typename Fn>
void load_folder(const fs::path& dir, const char* folder, std::vector<T>& out, LintResult& result, Fn read,
                 const std::string& only = {}, bool required = true) {
  const fs::path sub = dir / folder;
  std::error_code ec;
  if (!fs::is_directory(sub, ec)) {
    if (!required && !fs::exists(sub, ec)) return;
    result.diagnostics.push_back({sub.string(), 0, 0, fmt::format("missing directory '{}'", folder)});
    return;
  }
  std::vector<fs::path> files;
  for (fs::directory_iterator it(sub, ec), end; !ec && it != end; it.increment(ec)) {
    const auto& p = it->path();
    if (p.extension() == ".yaml") {
      if (only.empty() || p.stem() == only) files.push_back(p);
    } else if (p.extension() == ".yml")
      result.diagnostics.push_back({p.string(), 0, 0, "manifests end in .yaml, not .yml: rename the file"});
  }
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    ++result.files;
    const std::size_t before = result.diagnostics.size();
    if (!inside_tree(p, dir, result.diagnostics)) continue;
    auto node = load_yaml_file(p.string(), result.diagnostics);
    if (!node) continue;
    apply_overlays(result.overlay_entries, std::string(folder) + "/" + p.filename().string(), *node, result.diagnostics,
                   result.manifests.overrides);
    if (result.diagnostics.size() != before) continue;
    Positions positions;
    MapReader reader(*node, p.string(), "", result.diagnostics, &positions);
    if (!reader.valid()) continue;
    auto entity = read(reader, p.stem().string());
    blame_overlays(result.manifests.overrides, std::string(folder) + "/" + p.filename().string(), p.string(),
                   result.diagnostics, before);
    if (!entity || result.diagnostics.size() != before) continue;
    entity->positions = std::move(positions);
    out.push_back(std::move(*entity));
  }
}

// Text that goes into a deb822 or .repo file as one value: no line breaks or control bytes
// (a manifest must not be able to add fields such as a second Signed-By).
bool one_line(const std::string& v) {
  return std::none_of(v.begin(), v.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f; });
}

// Why a repository key's URL is refused; nothing when it is fine. A public key needs no
// credentials, and the URL is kept in the plan: no user name, password or query string.
std::optional<std::string> key_url_problem(const std::string& u) {
  if (plain_file_url(u) && one_line(u)) return std::nullopt;
  if (!u.starts_with("https://") && !u.starts_with("http://"))
    return "is not an http(s) URL or a file:/// path (without '..')";
  if (auto why = util::url_problem(u)) return *why + ": " + util::url_hint();
  if (util::url_has_secret(u))
    return "carries a user name, password, query string or fragment: a public key needs none, and the URL is kept in "
           "the plan";
  return std::nullopt;
}

std::optional<RepositoryManifest> read_repository(MapReader& r, const std::string& id) {
  RepositoryManifest rm;
  rm.id = id;
  rm.file = r.file();
  check_schema(r);
  if (auto name = r.string("repository", Need::required); name && *name != id)
    r.error("repository", fmt::format("repository '{}' must match its file name '{}.yaml'", excerpt(*name), id));
  static const std::regex id_re("[a-z0-9][a-z0-9.-]*");
  if (!std::regex_match(id, id_re))
    r.error("repository", "the file name must be lower-case letters, digits, '.' and '-'");
  rm.description = r.string("description", Need::required).value_or("");
  rm.source = r.string("source", Need::required).value_or("");
  if (auto variants = r.maps("variants", Need::required)) {
    for (auto& v : *variants) {
      RepositoryVariant rv;
      rv.distros = v.strings("distros", Need::required).value_or(std::vector<std::string>{});
      rv.uri = v.string("uri", Need::required).value_or("");
      if (!is_repository_uri(rv.uri))
        v.error("uri", "must be one https:// URL without a user name, password, query string or fragment (the key "
                       "pins the metadata; https keeps the index private; the URL is written into the plan and "
                       "into a sources file every user can read, so it carries no credentials), or "
                       "file:///DIR/ for a repository on this machine's disk (mounted media, a mirror)");
      rv.suite = v.string("suite", Need::optional).value_or("");
      rv.components = v.strings("components", Need::optional).value_or(std::vector<std::string>{});
      if (rv.suite == "/" && !rv.components.empty())
        v.error("components", "a flat repository (suite \"/\") has no components");
      for (const auto& word : rv.components)
        if (!one_line(word) || word.find(' ') != std::string::npos) v.error("components", "one word per component");
      if (!one_line(rv.suite) || rv.suite.find(' ') != std::string::npos) v.error("suite", "one word");
      const auto gpgcheck = v.boolean("repo_gpgcheck", Need::optional);
      rv.repo_gpgcheck = gpgcheck.value_or(false);
      if (auto sig = v.string("signatures", Need::optional)) {
        if (*sig == "metadata")
          rv.metadata_only = true;
        else if (*sig != "packages")
          v.error("signatures", fmt::format("'{}' is not what a vendor signs: packages (the default: every package "
                                            "is signed) or metadata (repomd.xml only)",
                                            excerpt(*sig)));
      }
      if (rv.metadata_only) {
        if (gpgcheck == false)
          v.error("repo_gpgcheck", "signatures: metadata trusts the packages through the signed repomd.xml: it "
                                   "needs repo_gpgcheck (leave it out or set it true)");
        rv.repo_gpgcheck = true;
        rv.metadata_only_source = v.string("signatures_source", Need::required).value_or("");
      } else if (v.string("signatures_source", Need::optional)) {
        v.error("signatures_source", "only with signatures: metadata");
      }
      rv.arches = read_arches(v, "arch");
      if (auto k = v.map("key", Need::required)) {
        rv.key.urls = k->strings("urls", Need::required).value_or(std::vector<std::string>{});
        for (const auto& u : rv.key.urls)
          if (auto why = key_url_problem(u))
            k->error("urls", fmt::format("'{}' {}", excerpt(util::redact_url(u)), *why));
        const auto fpr = k->string("fingerprint", Need::required).value_or("");
        rv.key.fingerprint = util::normalize_fingerprint(fpr);
        if (rv.key.fingerprint.empty())
          k->error("fingerprint", "must be the key's full fingerprint (40 or 64 hex digits), never a short key id");
        rv.key.source = k->string("source", Need::required).value_or("");
        k->finish();
      }
      rv.notes = v.string("notes", Need::optional).value_or("");
      v.finish();
      rm.variants.push_back(std::move(rv));
    }
  }
  r.finish();
  return rm;
}

std::optional<ProfileManifest> read_profile(MapReader& r, const std::string& id) {
  ProfileManifest p;
  p.id = id;
  p.file = r.file();
  check_schema(r);
  if (auto name = r.string("profile", Need::required); name && *name != id)
    r.error("profile", fmt::format("profile '{}' must match its file name '{}.yaml'", excerpt(*name), id));
  p.description = r.string("description", Need::required).value_or("");
  p.source = r.string("source", Need::required).value_or("");
  // `components: []` is allowed: a profile that so far adds only OS settings (hpc) says so.
  p.components = r.strings("components", Need::optional, true).value_or(std::vector<std::string>{});
  p.best_effort = r.strings("best_effort", Need::optional).value_or(std::vector<std::string>{});
  p.container_engines = r.strings("container_engines", Need::optional).value_or(std::vector<std::string>{});
  for (const auto& e : p.container_engines)
    if (e != "docker" && e != "containerd")
      r.error("container_engines",
              fmt::format("'{}' is not an engine hpcbake configures (docker, containerd)", excerpt(e)));
  p.rdma_os = r.boolean("rdma_os", Need::optional).value_or(false);
  p.kubernetes = r.boolean("kubernetes", Need::optional).value_or(false);
  if (p.kubernetes &&
      std::find(p.container_engines.begin(), p.container_engines.end(), "containerd") == p.container_engines.end())
    r.error("kubernetes", "kubernetes: true needs containerd in container_engines (the kubelet's engine)");
  r.finish();
  return p;
}

// Each profile names components that exist; container engines come with the container toolkit.
void check_profiles(LintResult& result) {
  const auto& m = result.manifests;
  for (const auto& p : m.profiles) {
    bool toolkit = false;
    for (const char* list_key : {"components", "best_effort"}) {
      const auto& list = std::string_view(list_key) == "components" ? p.components : p.best_effort;
      for (std::size_t i = 0; i < list.size(); ++i) {
        const auto& id = list[i];
        const Pos at = p.positions.at(fmt::format("{}[{}]", list_key, i));
        const auto* c = m.find_component(id);
        if (!c) {
          result.diagnostics.push_back(
              diagnostic_at(p.file, at,
                            fmt::format("profile names unknown component '{}' (expected components/{}.yaml)",
                                        excerpt(id), excerpt(id))));
          continue;
        }
        static const ComponentKind optional[] = {ComponentKind::dcgm, ComponentKind::container_toolkit,
                                                 ComponentKind::cuda_toolkit, ComponentKind::userspace};
        if (std::find(std::begin(optional), std::end(optional), c->kind) == std::end(optional))
          result.diagnostics.push_back(diagnostic_at(
              p.file, at,
              fmt::format("component '{}' (kind {}) is planned from the size, not a profile", id, to_string(c->kind))));
        toolkit = toolkit || (c->kind == ComponentKind::container_toolkit && &list == &p.components);
      }
    }
    if (!p.container_engines.empty() && !toolkit)
      result.diagnostics.push_back(diagnostic_at(p.file, p.positions.at("container_engines"),
                                                 "container_engines needs a component of kind container-toolkit in "
                                                 "components"));
  }
  if (!m.profiles.empty() && !m.find_profile("default"))
    result.diagnostics.push_back({(m.dir / "profiles").string(), 0, 0,
                                  "profiles/ has no default.yaml: the profile a plan uses when none is named"});
}

// Each component variant's repository exists for each of its distros, with that distro's
// package manager; each artifact is pinned.
void check_variant_sources(LintResult& result, const ComponentManifest& c, std::size_t vi) {
  const auto& m = result.manifests;
  const auto& v = c.variants[vi];
  const auto at = [&](const std::string& field) { return c.positions.at(fmt::format("variants[{}].{}", vi, field)); };
  for (std::size_t ai = 0; ai < v.artifacts.size(); ++ai) {
    const auto& a = v.artifacts[ai];
    if (!a.sha256)
      result.unverifiable.push_back(diagnostic_at(
          c.file, at(fmt::format("artifacts[{}].sha256", ai)),
          fmt::format("{} ({} {}) has no pinned SHA-256 and comes through no signed repository: pin it from a "
                      "published source, install it from a repository whose key is pinned, or mark the variant "
                      "refused with the reason",
                      excerpt(a.name), c.component, excerpt(v.version))));
  }
  if (!v.repository) return;
  const auto* repo = m.find_repository(*v.repository);
  if (!repo) {
    if (!manifest_file_exists(m.dir, "repositories", *v.repository))
      result.diagnostics.push_back(
          diagnostic_at(c.file, at("repository"),
                        fmt::format("variant {} names unknown repository '{}' (expected {})", excerpt(v.version),
                                    excerpt(*v.repository), expected_file(m.dir, "repositories", *v.repository))));
    return;
  }
  for (std::size_t di = 0; di < v.distros.size(); ++di)
    for (const auto a : v.arches)
      if (!repo->variant_for(v.distros[di], a))
        result.diagnostics.push_back(
            diagnostic_at(c.file, at(fmt::format("distros[{}]", di)),
                          fmt::format("variant {}: repository '{}' has no variant for {} {} ({})", excerpt(v.version),
                                      repo->id, excerpt(v.distros[di]), to_string(a), repo->file)));
  if (v.packages.empty())
    result.diagnostics.push_back(
        diagnostic_at(c.file, at("repository"),
                      fmt::format("variant {} names repository '{}' but no packages", excerpt(v.version), repo->id)));
}

void check_sources(LintResult& result) {
  for (const auto& c : result.manifests.components)
    for (std::size_t vi = 0; vi < c.variants.size(); ++vi)
      check_variant_sources(result, c, vi);
}

// `signatures: metadata` is a dnf setting (apt's InRelease is always metadata-only): a variant
// with it lists only distros whose package manager reads a .repo file.
void check_metadata_only(LintResult& result) {
  const auto& m = result.manifests;
  for (const auto& r : m.repositories)
    for (std::size_t vi = 0; vi < r.variants.size(); ++vi) {
      const auto& v = r.variants[vi];
      if (!v.metadata_only) continue;
      for (const auto& id : v.distros)
        if (const auto* d = m.find_distro(id); d && d->package_manager == PackageManager::apt)
          result.diagnostics.push_back(diagnostic_at(
              r.file, r.positions.at(fmt::format("variants[{}].signatures", vi)),
              fmt::format("signatures: metadata is for dnf repositories, and {} uses apt (its InRelease is signed)",
                          excerpt(id))));
    }
}

// Each distro's build repositories exist, each with a variant for that distro.
void check_distro_repositories(LintResult& result) {
  const auto& m = result.manifests;
  for (const auto& d : m.distros)
    for (std::size_t i = 0; i < d.build_repositories.size(); ++i) {
      const auto& id = d.build_repositories[i];
      const Pos at = d.positions.at(fmt::format("build_repositories[{}]", i));
      const auto* repo = m.find_repository(id);
      if (!repo)
        result.diagnostics.push_back(
            diagnostic_at(d.file, at,
                          fmt::format("build_repositories names unknown repository '{}' (expected {})", excerpt(id),
                                      expected_file(m.dir, "repositories", id))));
      else if (!repo->variant_for(d.id))
        result.diagnostics.push_back(
            diagnostic_at(d.file, at, fmt::format("repository '{}' has no variant for {} ({})", id, d.id, repo->file)));
    }
}

// A variant's gpu_models name models some size has: a typo would quietly select nothing.
void check_gpu_models(LintResult& result) {
  const auto& m = result.manifests;
  for (const auto& c : m.components)
    for (std::size_t vi = 0; vi < c.variants.size(); ++vi) {
      const auto& v = c.variants[vi];
      for (std::size_t i = 0; i < v.gpu_models.size(); ++i)
        if (std::none_of(m.sizes.begin(), m.sizes.end(),
                         [&](const SizeManifest& s) { return s.gpu && s.gpu->model == v.gpu_models[i]; }))
          result.diagnostics.push_back(
              diagnostic_at(c.file, c.positions.at(fmt::format("variants[{}].gpu_models[{}]", vi, i)),
                            fmt::format("variant {}: gpu_models names '{}', the model of no size", excerpt(v.version),
                                        excerpt(v.gpu_models[i]))));
    }
}

// Every distro a component variant names exists; every dkms_modules entry of a size is a
// component of kind dkms-module.
void check_references(LintResult& result) {
  const auto& m = result.manifests;
  for (const auto& c : m.components)
    for (std::size_t vi = 0; vi < c.variants.size(); ++vi)
      for (std::size_t di = 0; di < c.variants[vi].distros.size(); ++di) {
        const auto& d = c.variants[vi].distros[di];
        // A distro whose file exists but failed to load has its own diagnostics: do not cascade.
        if (!m.find_distro(d) && !manifest_file_exists(m.dir, "distros", d))
          result.diagnostics.push_back(diagnostic_at(
              c.file, c.positions.at(fmt::format("variants[{}].distros[{}]", vi, di)),
              fmt::format("variant {} names unknown distro '{}'", excerpt(c.variants[vi].version), excerpt(d))));
      }
  for (const auto& s : m.sizes)
    for (std::size_t i = 0; i < s.dkms_modules.size(); ++i) {
      const auto& id = s.dkms_modules[i];
      const Pos at = s.positions.at(fmt::format("dkms_modules[{}]", i));
      const auto* c = m.find_component(id);
      if (!c && !manifest_file_exists(m.dir, "components", id))
        result.diagnostics.push_back(
            diagnostic_at(s.file, at, fmt::format("dkms_modules names unknown component '{}'", excerpt(id))));
      else if (c && c->kind != ComponentKind::dkms_module)
        result.diagnostics.push_back(diagnostic_at(
            s.file, at,
            fmt::format("dkms_modules: component '{}' is of kind {}, not dkms-module", id, to_string(c->kind))));
    }
  for (const auto& s : m.sizes) {
    if (s.os_settings.empty()) continue;
    const auto* st = m.find_settings(s.os_settings);
    if (!st && !manifest_file_exists(m.dir, "settings", s.os_settings))
      result.diagnostics.push_back(
          diagnostic_at(s.file, s.positions.at("os_settings"),
                        fmt::format("os_settings names unknown settings '{}' (expected settings/{}.yaml)",
                                    excerpt(s.os_settings), excerpt(s.os_settings))));
    else if (st && st->applies_to != SettingsScope::size)
      result.diagnostics.push_back(
          diagnostic_at(s.file, s.positions.at("os_settings"),
                        fmt::format("os_settings: settings '{}' apply to every size with {}, not to one size", st->id,
                                    to_string(st->applies_to))));
  }
}

// A userspace component: what it runs after exists and is planned from a profile too; each
// variant unpacks one of its own artifacts; each {prefix:<id>} it names is in `after`.
void check_userspace(LintResult& result) {
  const auto& m = result.manifests;
  static const std::regex prefix_ref(R"(\{prefix:([a-z0-9-]+)\})");
  for (const auto& c : m.components) {
    if (c.kind != ComponentKind::userspace) continue;
    auto at = [&](const std::string& key) { return c.positions.at(key); };
    for (const auto& a : c.after) {
      const auto* dep = m.find_component(a);
      if (!dep || a == c.id)
        result.diagnostics.push_back(diagnostic_at(
            c.file, at("after"), fmt::format("after names '{}', which is no other component", excerpt(a))));
    }
    for (std::size_t vi = 0; vi < c.variants.size(); ++vi) {
      const auto& v = c.variants[vi];
      const auto where = fmt::format("variants[{}]", vi);
      if (c.dkms && !v.refused && !v.git)
        result.diagnostics.push_back(diagnostic_at(c.file, at(where + ".version"),
                                                   "a userspace component with a dkms: section builds its module "
                                                   "from its git source: this variant has none"));
      if (v.refused && (v.git || v.unpack || v.build))
        result.diagnostics.push_back(
            diagnostic_at(c.file, at(where + ".refused"), "a refused variant builds nothing: drop git, unpack, build"));
      if (v.unpack && std::none_of(v.artifacts.begin(), v.artifacts.end(),
                                   [&](const Artifact& a) { return a.name == v.unpack->artifact; }))
        result.diagnostics.push_back(
            diagnostic_at(c.file, at(where + ".unpack.artifact"),
                          fmt::format("unpack names '{}', which is not one of this variant's artifacts",
                                      excerpt(v.unpack->artifact))));
      std::string text = v.modulefile;
      if (v.build) {
        text += v.build->creates;
        for (const auto& e : v.build->env)
          text += e;
        for (const auto& cmd : v.build->commands)
          for (const auto& arg : cmd)
            text += arg;
      }
      for (std::sregex_iterator it(text.begin(), text.end(), prefix_ref), end; it != end; ++it)
        if (std::find(c.after.begin(), c.after.end(), (*it)[1].str()) == c.after.end())
          result.diagnostics.push_back(
              diagnostic_at(c.file, at(where + ".build"),
                            fmt::format("{{prefix:{}}} names a component that is not in after", (*it)[1].str())));
    }
  }
}

// Where a coupling break is reported: the overlay line that set either version, else the
// component's own version.
Diagnostic coupling_at(const Manifests& m, const ComponentManifest& c, std::size_t vi, const ComponentManifest& driver,
                       const ComponentVariant& dv, const std::string& message) {
  const std::string path = fmt::format("variants[{}].version", vi);
  const Override* o = m.override_of(c.file, path);
  if (!o)
    for (std::size_t di = 0; di < driver.variants.size() && !o; ++di)
      if (&driver.variants[di] == &dv) o = m.override_of(driver.file, fmt::format("variants[{}].version", di));
  if (o) return diagnostic_at(o->overlay, {o->line, o->column}, message);
  return diagnostic_at(c.file, c.positions.at(path), message);
}

// Every component that must follow the CUDA driver's version does, on every distro and
// architecture it serves (driver_coupling: the rule plan applies too), and every driver variant's
// version-pinning package names its own version.
void check_couplings(LintResult& result) {
  const auto& m = result.manifests;
  const auto* driver = m.find_component("nvidia-cuda-driver");
  if (!driver) return;
  for (std::size_t vi = 0; vi < driver->variants.size(); ++vi)
    for (const auto& d : driver->variants[vi].distros)
      if (auto b = driver_pinning(*driver, driver->variants[vi], d)) {
        const Override* o = m.override_of(driver->file, fmt::format("variants[{}].version", vi));
        result.diagnostics.push_back(o ? diagnostic_at(o->overlay, {o->line, o->column}, b->message)
                                       : diagnostic_at(driver->file,
                                                       driver->positions.at(fmt::format("variants[{}].packages", vi)),
                                                       b->message));
        break;
      }
  for (const auto& c : m.components) {
    if (c.kind != ComponentKind::fabric_manager && c.kind != ComponentKind::peermem && c.kind != ComponentKind::imex)
      continue;
    for (std::size_t vi = 0; vi < c.variants.size(); ++vi) {
      const auto& v = c.variants[vi];
      const std::string model = v.gpu_models.empty() ? std::string() : v.gpu_models.front();
      for (const auto& d : v.distros)
        for (const auto arch : v.arches)
          if (const auto* dv = driver->variant_for(d, model, arch))
            if (auto b = driver_coupling(c, v, dv->version, d))
              result.diagnostics.push_back(coupling_at(m, c, vi, *driver, *dv, b->message));
    }
  }
}

void cross_check(LintResult& result, bool all_sizes) {
  check_sources(result);
  check_distro_repositories(result);
  check_metadata_only(result);
  check_profiles(result);
  check_userspace(result);
  if (all_sizes) check_gpu_models(result); // with one size read, the others' models are unknown
  // Size names are unique by construction: each file is named after its lower-cased size.
  check_references(result);
  auto& m = result.manifests;
  // Every component kind is installed by its recipe.
  for (const auto& c : m.components)
    if (!m.find_recipe(c.kind))
      result.diagnostics.push_back(
          diagnostic_at(c.file, c.positions.at("kind"),
                        fmt::format("kind '{}' has no driver recipe: expected {}", to_string(c.kind),
                                    (m.recipes_dir / (std::string(to_string(c.kind)) + ".yaml")).string())));
  check_couplings(result);
}

} // namespace

LintResult lint_manifests(const fs::path& dir) {
  return lint_manifests(dir, {});
}

LintResult lint_manifests(const fs::path& dir, const std::string& only_size) {
  return lint_manifests(dir, only_size, default_overlays());
}

LintResult lint_manifests(const fs::path& dir, const std::string& only_size, const std::vector<fs::path>& overlays) {
  LintResult result;
  result.manifests.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    result.diagnostics.push_back({dir.string(), 0, 0, "manifest directory does not exist"});
    return result;
  }
  result.overlay_entries = read_overlays(overlays, dir, result.diagnostics);
  load_folder(dir, "sizes", result.manifests.sizes, result, read_size, only_size);
  load_folder(dir, "distros", result.manifests.distros, result, read_distro);
  load_folder(dir, "components", result.manifests.components, result, read_component);
  load_folder(dir, "repositories", result.manifests.repositories, result, read_repository, {}, false);
  load_folder(dir, "profiles", result.manifests.profiles, result, read_profile, {}, false);
  load_folder(dir, "settings", result.manifests.settings, result, read_settings, {}, false);
  result.manifests.recipes_dir = recipes_dir(dir);
  result.manifests.recipes = read_recipes(result.manifests.recipes_dir, result.diagnostics, &result.files);
  result.manifests.dkms_conf_template =
      util::read_file(result.manifests.recipes_dir / "dkms" / "dkms.conf.in").value_or("");
  cross_check(result, only_size.empty());
  return result;
}

std::string only_size_stem(const fs::path& dir, std::string_view size) {
  if (size.empty()) return {};
  std::string only = to_lower(std::string(size));
  if (only.starts_with("standard_")) only.erase(0, 9);
  std::error_code ec;
  return fs::exists(dir / "sizes" / (only + ".yaml"), ec) ? only : std::string();
}

Result<Manifests> load_manifests(const fs::path& dir, std::string_view size) {
  // With a size named, only its file is read from sizes/ (the rest are most of the parse
  // time); an unknown name falls back to all of them, so errors can suggest close names.
  auto result = lint_manifests(dir, only_size_stem(dir, size));
  if (!result.diagnostics.empty()) {
    std::string msg = fmt::format("{} problem(s) in manifests under {}:", result.diagnostics.size(), dir.string());
    for (const auto& d : result.diagnostics)
      msg += "\n  " + d.str();
    std::string overlays;
    for (const auto& o : default_overlays())
      overlays += " --overlay " + o.string();
    return fail(ErrorKind::manifest, msg,
                fmt::format("fix the files, then run: hpcbake manifest lint{} {}", overlays, dir.string()));
  }
  return std::move(result.manifests);
}

const Override* Manifests::override_of(const std::string& file, const std::string& path) const {
  const std::string rel = fs::path(file).lexically_relative(this->dir).generic_string();
  for (const auto& o : overrides)
    if (o.target == rel && o.path == path) return &o;
  return nullptr;
}

std::optional<CouplingBreak> driver_coupling(const ComponentManifest& c, const ComponentVariant& v,
                                             std::string_view driver_version, std::string_view distro) {
  const std::string dv(driver_version);
  // A package pinned with =VERSION (apt) must be the component's own version: an overlay that moves
  // the version moves the package too.
  if (c.kind == ComponentKind::fabric_manager || c.kind == ComponentKind::imex)
    for (const auto& p : v.packages)
      if (const auto eq = p.find('='); eq != std::string::npos) {
        const std::string pinned = p.substr(eq + 1);
        if (pinned != v.version && !pinned.starts_with(v.version + "-"))
          return CouplingBreak{
              fmt::format("{} {} ({}) installs the package {}, of another version, for {}",
                          c.kind == ComponentKind::imex ? "IMEX" : "Fabric Manager", v.version, c.file, p, distro),
              fmt::format("pin the package to the component's version: {}={}-REVISION", p.substr(0, eq), v.version)};
      }
  switch (c.kind) {
  case ComponentKind::fabric_manager:
    if (v.version == dv) return std::nullopt;
    return CouplingBreak{fmt::format("Fabric Manager {} ({}) does not equal the driver version {} for {}: NVSwitch "
                                     "systems fail to start CUDA when they differ",
                                     v.version, c.file, dv, distro),
                         "pin both components to the same version"};
  case ComponentKind::peermem:
    if (v.version == dv) return std::nullopt;
    return CouplingBreak{fmt::format("nvidia-peermem {} ({}) does not equal the driver version {} for {}", v.version,
                                     c.file, dv, distro),
                         "nvidia-peermem ships inside the driver: pin the same version"};
  case ComponentKind::imex:
    if (v.version == dv || v.version.starts_with(dv + "-")) return std::nullopt;
    return CouplingBreak{fmt::format("IMEX {} ({}) is not the driver's version {} for {}: IMEX must match the driver",
                                     v.version, c.file, dv, distro),
                         "pin both components to the same version"};
  default:
    return std::nullopt;
  }
}

std::optional<CouplingBreak> driver_pinning(const ComponentManifest& driver, const ComponentVariant& v,
                                            std::string_view distro) {
  static constexpr std::string_view prefix = "nvidia-driver-pinning-";
  for (const auto& p : v.packages)
    if (p.starts_with(prefix) && std::string_view(p).substr(prefix.size()) != v.version)
      return CouplingBreak{fmt::format("the version-pinning package {} ({}) does not select the driver version {} for "
                                       "{}",
                                       p, driver.file, v.version, distro),
                           fmt::format("pin {}{} with the driver", prefix, v.version)};
  return std::nullopt;
}

std::string GridBranchRange::str() const {
  if (min && max) return *min == *max ? std::to_string(*min) : fmt::format("{}..{}", *min, *max);
  if (min) return fmt::format("{}..", *min);
  return max ? fmt::format("..{}", *max) : std::string("any");
}

const char* to_string(PackageManager pm) {
  return pm == PackageManager::dnf ? "dnf" : pm == PackageManager::tdnf ? "tdnf" : "apt";
}

const char* to_string(VersionMatch m) {
  return m == VersionMatch::major ? "major" : "exact";
}

std::optional<VersionMatch> parse_version_match(std::string_view text) {
  if (text == "exact") return VersionMatch::exact;
  if (text == "major") return VersionMatch::major;
  return std::nullopt;
}

const Recipe* Manifests::find_recipe(ComponentKind kind) const {
  auto it = recipes.find(kind);
  return it == recipes.end() ? nullptr : &it->second;
}

fs::path default_manifest_dir() {
  return util::data_dir("HPCBAKE_MANIFESTS", "manifests", "sizes");
}

fs::path manifest_dir_or_default(const std::string& dir) {
  return dir.empty() ? default_manifest_dir() : fs::path(dir);
}

util::TrustedPath manifest_trust(const std::string& dir) {
  return {manifest_dir_or_default(dir), "manifest directory", -1, "or pass --manifests DIR naming a root-owned copy"};
}

util::TrustedPath drivers_trust(const std::string& dir) {
  return {recipes_dir(manifest_dir_or_default(dir)), "driver recipe directory", -1,
          "or pass --manifests DIR naming a root-owned copy of manifests/ with drivers/ beside it"};
}

} // namespace hpcbake::manifest
