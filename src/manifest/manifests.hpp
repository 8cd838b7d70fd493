#pragma once
// The manifest model: VM sizes, distros and components, loaded from a directory
// of YAML files (schema in manifests/README.md). Loading validates every file and
// the references between files; the result is immutable data for the planner.
#include "manifest/overlay.hpp"
#include "manifest/recipes.hpp"
#include "manifest/settings.hpp"
#include "manifest/yaml_reader.hpp"
#include "util/error.hpp"
#include "util/preflight.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::manifest {

inline constexpr int schema_version = 1;

// zypper is refused by the schema: no distro manifest uses it and install has no SLES path.
// tdnf: Azure Linux's package manager (dnf's command line, its own locks in /etc/tdnf/locks.d).
enum class PackageManager { apt, dnf, tdnf };
const char* to_string(PackageManager pm);

// How a distro manifest's os_release.version_id meets the host's VERSION_ID: `exact` (the
// same string) or `major` ("12" also matches "12.5"). The manifest spells them in lower case.
enum class VersionMatch { exact, major };
const char* to_string(VersionMatch m);
std::optional<VersionMatch> parse_version_match(std::string_view text);

struct SizeGpu {
  std::string vendor; // nvidia | amd
  std::string model;
  int count = 0;
  std::optional<std::string> fraction;
  std::vector<std::string> pci_ids;
  int nvswitch_count = 0;
  bool fabric_manager = false;
  // NVLink multi-node (GB200/GB300 NVL72): NVIDIA IMEX instead of Fabric Manager.
  bool imex = false;
};

// The GRID (vGPU) release branches a size's guest driver may come from, as Azure publishes them
// for the size: a vGPU guest driver loads only within the vGPU releases the host's manager
// negotiates, so a newer branch than Azure's hosts run fails to load. At least one bound is set;
// `source` cites where Azure publishes them (required: an uncited range is a lint error).
struct GridBranchRange {
  std::optional<int> min;
  std::optional<int> max;
  std::string source;

  bool contains(int branch) const { return (!min || branch >= *min) && (!max || branch <= *max); }
  // "17..18", "20", "..16", "17.."
  std::string str() const;
};

struct SizeDriver {
  DriverKind kind = DriverKind::cuda;
  std::optional<std::string> module_flavour;  // open | proprietary
  std::optional<GridBranchRange> grid_branch; // kind grid only, and required there
};

struct SizeInfiniband {
  int ports = 0;
  int rate_gbps = 0;
  bool ipoib = true;
  bool gpudirect = false;
};

struct SizeChecks {
  std::optional<int> gpu_count;
  std::optional<double> gpu_bw_h2d_gbs;
  std::optional<double> gpu_bw_p2p_gbs;
  std::optional<std::int64_t> gpu_ecc_sram_threshold;
  std::optional<std::int64_t> gpu_ecc_dram_threshold;
  std::optional<double> nccl_allreduce_gbs;
  std::optional<double> ib_write_bw_gdr_gbps;
  std::optional<double> ib_write_bw_gbps;
  std::optional<double> cpu_stream_mbs;
  // check_hw_physmem's fudge: MemTotal may lie this many percent either side of memory_mb.
  std::optional<double> memory_tolerance_pct;
  // check_nccl_allreduce's message size, as nccl-tests' -b/-e take it ("16G").
  std::string nccl_allreduce_message;
};

struct SizeManifest {
  std::string id;   // file stem
  std::string file; // path it was loaded from
  std::string size; // Standard_ND96isr_H100_v5
  std::string family;
  std::string source;
  Arch arch = Arch::x86_64; // the CPU the size runs: Arm64 (Grace) for ND GB200/GB300 v6
  std::optional<int> cpu_sockets;
  std::optional<int> cpu_cores;
  std::optional<int> cpu_threads; // check_hw_cpuinfo's third figure (logical CPUs)
  std::optional<std::int64_t> memory_mb;
  std::optional<std::int64_t> memory_kb; // exact, where the health-check conf gives kB
  std::optional<int> nvme_count;
  std::optional<SizeGpu> gpu;
  std::optional<SizeDriver> driver;
  std::optional<SizeInfiniband> infiniband;
  SizeChecks checks;
  // Out-of-tree kernel modules the size also needs: ids of components of kind dkms-module.
  std::vector<std::string> dkms_modules;
  // The OS settings only this size gets (settings/<id>.yaml, applies_to: size): its NCCL topology
  // file and /etc/nccl.conf, as Azure's images set them per size. Empty: none.
  std::string os_settings;
  std::string notes;
  Positions positions; // where each field is written in `file`, for the cross-file rules
};

struct DistroManifest {
  std::string id; // ubuntu-22.04
  std::string file;
  std::string name;
  std::string source;
  std::string os_id;
  std::string os_version_id;
  VersionMatch version_match = VersionMatch::exact;
  std::string reference_key;
  PackageManager package_manager = PackageManager::apt;
  std::string kernel_headers_package;
  std::vector<std::string> build_packages;
  // What NVIDIA's driver installer needs on top (pkg-config, the GLVND headers): only GPU plans
  // install it, so a CPU size building an out-of-tree module does not pull in Mesa and LLVM.
  std::vector<std::string> gpu_build_packages;
  // The compilers a userspace component's build needs (C, C++, Fortran: MPI stacks), installed
  // with environment-modules when the plan builds one on the node.
  std::vector<std::string> userspace_build_packages;
  // Signed repositories (ids under repositories/) that the build packages come from, trusted
  // before they are installed: EPEL for dkms on EL.
  std::vector<std::string> build_repositories;
  std::vector<std::string> rdma_packages;
  std::vector<std::string> initramfs_command;
  // The file initramfs_command writes ("{kernel}" replaced), read before it runs: a rebuild that
  // would change nothing (no nouveau or nvidia module inside) is skipped. Empty: always rebuilt.
  std::string initramfs_file;
  std::string nouveau_blacklist_file;
  std::string waagent_service;
  std::string waagent_config;
  std::vector<Arch> arches = {Arch::x86_64}; // the CPU architectures the manifest (and its pins) serve
  // The container engines' packages in this distro's own repositories (docker, containerd):
  // what a profile with container_engines installs. An engine not listed is not installed.
  std::map<std::string, std::vector<std::string>> container_engine_packages;
  // The packages that bring in new kernels (the kernel metapackages), held by `--hold-kernel` so the
  // machine keeps booting kernels its DKMS modules were built for; and where the names come from.
  std::vector<std::string> kernel_hold_packages;
  std::string kernel_hold_source;
  // Which keyrings this distro's kernel checks module signatures against under Secure Boot.
  // Upstream: the built-in and the machine keyring (MOKs that shim marks trusted). Ubuntu's and
  // RHEL's kernels also use the platform keyring (the UEFI db, and every MOK). `source` says
  // who says so; absent, the upstream rule.
  struct ModuleKeyrings {
    bool platform = false;
    std::string source;
  } module_keyrings;
  // Canonical's precompiled NVIDIA modules (linux-restricted-modules), signed at the kernel's build
  // with the key its built-in keyring trusts, for the kernel flavour `kernel_flavour`: a driver route
  // that needs no key and no enrolment under Secure Boot. Patterns take {branch}, {open} ("-open"
  // for the open kernel modules, else empty) and, for the modules package, {kernel} (the exact
  // kernel release). Versions are not pinned: no one publishes one version per branch (each
  // package is rebuilt for every kernel ABI), so install reads the candidate from the signed
  // archive index for exactly the next-boot kernel and records it. Absent: no such route.
  struct CanonicalSignedNvidia {
    std::string kernel_flavour;                        // "azure": the only flavour the route installs for
    std::vector<std::string> branches;                 // driver branches Canonical publishes for that flavour
    std::string modules_package;                       // "linux-modules-nvidia-{branch}-server{open}-{kernel}"
    std::vector<std::string> packages;                 // the matching userspace, without DKMS
    std::vector<std::string> fabric_manager;           // on NVSwitch sizes
    std::string archive_keyring;                       // absolute path apt trusts the archive through
    std::vector<std::string> archive_key_fingerprints; // canonical upper-case hex
    std::string signer;                                // who signs the modules, and why the kernel trusts it
    std::string module_signer;                         // the signing certificate's CN, as modinfo names it
    std::vector<std::string> module_signer_serials;    // its serial numbers (hex, as published)
    std::string source;
  };
  std::optional<CanonicalSignedNvidia> canonical_signed_nvidia;
  Positions positions; // where each field is written in `file`, for the cross-file rules
  bool serves(Arch a) const;
  bool matches(std::string_view os_id, std::string_view version_id) const;
};

struct Artifact {
  std::string name;
  std::vector<std::string> urls;
  std::optional<std::string> sha256; // nullopt: no trustworthy pin is known
  std::optional<std::int64_t> size;
};

// An artifact as a component pins it, with the component and version it belongs to.
struct PinnedArtifact {
  std::string component;
  std::string version;
  Artifact artifact;
};

// A userspace component's source at a pinned commit: cloned, checked out and checked (the commit
// is the pin: `git rev-parse HEAD` must equal it).
struct GitSource {
  std::string url;
  std::string commit; // 40 lower-case hex digits
  std::string to;     // host path, absolute
};

// A verified artifact extracted (archive::extract, all or nothing) into `to`.
struct Unpack {
  std::string artifact; // one of the variant's artifacts
  std::string to;       // host path, absolute
  int strip = 0;        // leading path components dropped
};

// Commands run in `dir`, in order, as root; placeholders ({prefix}, {prefix:<component>},
// {version}, {jobs}, {cuda_home}, {gencode}) are resolved by the planner.
struct Build {
  std::string dir;
  std::vector<std::string> env; // KEY=VALUE
  std::vector<std::vector<std::string>> commands;
  std::string creates; // a file that exists once the build is done (checked afterwards)
};

struct ComponentVariant {
  std::vector<std::string> distros;
  std::string version;
  std::optional<int> grid_branch;
  std::vector<Artifact> artifacts;
  std::vector<std::string> packages;
  std::optional<std::string> repository; // a repositories/<id>.yaml the packages come from
  // Only for sizes with one of these GPU models (DCGM's CUDA 12 packages for V100); empty: any.
  // A component picks the variant naming the size's model first, then one naming none.
  std::vector<std::string> gpu_models;
  std::vector<Arch> arches = {Arch::x86_64}; // the CPU architectures its artifacts and packages are for
  // Why this size x distro cannot be installed verifiably (no published checksum, no signed
  // repository): the planner refuses with it. Such a variant lists no artifacts.
  std::optional<std::string> refused;
  std::string notes;
  // Kind userspace: where it is installed, and how (each optional; in this order).
  std::string prefix;
  std::optional<GitSource> git;
  std::optional<Unpack> unpack;
  std::optional<Build> build;
  std::string modulefile; // the environment module's file (Tcl), with placeholders
};

// Which sizes a userspace component is for.
enum class AppliesTo { any, infiniband, nvidia_gpu };

// A vendor package repository whose signing key the manifest pins: apt reads it through a
// deb822 .sources file with Signed-By, dnf through a .repo with gpgcheck=1.
struct RepositoryKey {
  std::vector<std::string> urls; // the vendor's key file (armored or binary)
  std::string fingerprint;       // canonical upper-case hex (repo::normalize_fingerprint)
  std::string source;            // where the vendor publishes the fingerprint
};

struct RepositoryVariant {
  std::vector<std::string> distros;
  std::string uri;                     // https://.../ubuntu2204/x86_64/
  std::string suite;                   // apt: "/" for a flat repository, else the suite
  std::vector<std::string> components; // apt, not flat: main, ...
  bool repo_gpgcheck = false;          // dnf: the vendor signs repomd.xml as well
  // dnf: the vendor signs repomd.xml and not its packages (`signatures: metadata`, NVIDIA's
  // container toolkit repository): the .repo says repo_gpgcheck=1 and gpgcheck=0, and every
  // package is trusted through its checksum in the signed metadata, as apt trusts a .deb through
  // the signed InRelease. Only where the manifest says so, with `signatures_source` saying who
  // publishes the repository that way; never a fallback.
  bool metadata_only = false;
  std::string metadata_only_source;
  std::vector<Arch> arches = {Arch::x86_64};
  RepositoryKey key;
  std::string notes;
};

// A repository URI the writers accept: https://..., or file:///DIR/ (a repository on this
// machine's disk); one word.
bool is_repository_uri(std::string_view uri);

struct RepositoryManifest {
  std::string id; // file stem, also the name of what hpcbake writes (hpcbake-<id>.sources)
  std::string file;
  std::string description;
  std::string source;
  std::vector<RepositoryVariant> variants;
  Positions positions; // where each field is written in `file`, for the cross-file rules

  const RepositoryVariant* variant_for(std::string_view distro, Arch arch = Arch::x86_64) const;
};

// A kernel module built from source with DKMS (component kind dkms-module): the artifact is
// its source (a directory archive or a makeself .run).
struct ComponentDkms {
  std::string name;                 // DKMS PACKAGE_NAME
  std::vector<std::string> modules; // built module names
  std::string subdir;               // where the sources are inside the artifact
  bool reboot = false;              // the machine must reboot before the module is used
  // Extra dkms.conf lines (driver::ModuleSpec::directives), after hpcbake's own: sources whose
  // own Makefile must run (gdrcopy's gdrdrv) name their MAKE[0] and BUILT_MODULE_LOCATION here.
  std::vector<std::string> directives;
};

struct ComponentManifest {
  std::string id;
  std::string file;
  std::string component;
  ComponentKind kind = ComponentKind::nvidia_driver;
  std::optional<ComponentDkms> dkms; // kind dkms-module
  std::string description;
  std::string source;
  std::vector<ComponentVariant> variants;
  // Kind userspace.
  AppliesTo applies_to = AppliesTo::any;
  std::vector<std::string> after;          // components planned before it (whose prefixes it may name)
  std::string module;                      // the environment module it provides ("mpi/hpcx")
  std::vector<std::string> module_aliases; // the same modulefile under other names (Azure's versioned ones)
  Positions positions;                     // where each field is written in `file`, for the cross-file rules

  // The variant for the distro and architecture: one whose gpu_models names gpu_model first, else
  // one naming none.
  const ComponentVariant* variant_for(std::string_view distro, std::string_view gpu_model = {},
                                      Arch arch = Arch::x86_64) const;
};

// An image profile: the optional components a bake adds on top of what the size needs (the
// driver, Fabric Manager or IMEX, the InfiniBand stack). Chosen with --profile (Packer variable
// `profile`); "default" when none is named.
struct ProfileManifest {
  std::string id;
  std::string file;
  std::string description;
  std::string source;
  // Installed on every NVIDIA GPU size; the plan refuses when one is not pinned for the distro.
  std::vector<std::string> components;
  // Installed where pinned; where not, the plan says so and goes on.
  std::vector<std::string> best_effort;
  // The engines whose configuration names the NVIDIA runtime: docker, containerd. Needs the
  // container-toolkit component in `components`.
  std::vector<std::string> container_engines;
  // What RDMA needs from the OS (settings/*.yaml): the limits, sysctl and device naming on sizes
  // with InfiniBand, and the size's own settings (os_settings: NCCL topology, /etc/nccl.conf).
  bool rdma_os = false;
  // A Kubernetes node: containerd's default runtime is the NVIDIA runtime and its CRI plugin has
  // CDI enabled (what NVIDIA's device plugin expects). Needs containerd in container_engines.
  bool kubernetes = false;
  Positions positions; // where each field is written in `file`, for the cross-file rules
};

struct Manifests {
  std::filesystem::path dir;
  std::vector<SizeManifest> sizes;
  std::vector<DistroManifest> distros;
  std::vector<ComponentManifest> components;
  std::vector<RepositoryManifest> repositories;
  std::vector<ProfileManifest> profiles;
  std::vector<SettingsManifest> settings; // settings/*.yaml
  std::filesystem::path recipes_dir;      // drivers/ beside dir
  std::map<ComponentKind, Recipe> recipes;
  std::string dkms_conf_template;  // drivers/dkms/dkms.conf.in (empty when absent)
  std::vector<Override> overrides; // the overlay values applied, in order (plan shows them)

  // The override of `path` in `file` (a manifest's full path), or null.
  const Override* override_of(const std::string& file, const std::string& path) const;

  const Recipe* find_recipe(ComponentKind kind) const;

  // Case-insensitive, exact: "standard_nd96isr_h100_v5" finds Standard_ND96isr_H100_v5.
  const SizeManifest* find_size(std::string_view name) const;
  const DistroManifest* find_distro(std::string_view id) const;
  // What a person types: the id (any case), or ID-MAJOR where exactly one distro is ID-MAJOR.MINOR
  // ("almalinux-8" is almalinux-8.10, as "almalinux-9" names the 9 stream). Manifests and lint use
  // find_distro: a manifest names the exact id.
  const DistroManifest* find_distro_named(std::string_view name) const;
  const ComponentManifest* find_component(std::string_view id) const;
  const RepositoryManifest* find_repository(std::string_view id) const;
  const ProfileManifest* find_profile(std::string_view id) const;
  const SettingsManifest* find_settings(std::string_view id) const;
  // The distro manifest an os-release ID/VERSION_ID pair maps to.
  const DistroManifest* match_distro(std::string_view os_id, std::string_view version_id) const;
};

struct LintResult {
  Manifests manifests; // whatever loaded cleanly
  std::vector<Diagnostic> diagnostics;
  // Artifacts with neither a pinned SHA-256 nor a signed repository (`sha256: unknown`):
  // `manifest lint` fails on them; loading still accepts them for --sha256.
  std::vector<Diagnostic> unverifiable;
  int files = 0;
  std::vector<OverlayEntry> overlay_entries; // read before the shipped files, applied to each
};

// Reads and validates every manifest under dir (sizes/, distros/, components/) and the
// driver recipes beside it (recipes_dir(dir)), including cross-file rules; never throws.
LintResult lint_manifests(const std::filesystem::path& dir);
// The same, reading only sizes/<only_size>.yaml from sizes/ when only_size is not empty.
LintResult lint_manifests(const std::filesystem::path& dir, const std::string& only_size);

// The same with these overlays (files or directories) merged over the shipped files; the two
// above use default_overlays().
LintResult lint_manifests(const std::filesystem::path& dir, const std::string& only_size,
                          const std::vector<std::filesystem::path>& overlays);

// A component whose version must follow the NVIDIA driver's (Fabric Manager, nvidia-peermem, IMEX)
// and does not, or a driver variant whose version-pinning package names another version: the
// message (and what to do) plan refuses with and manifest lint reports. One rule set for both.
struct CouplingBreak {
  std::string message;
  std::string hint;
};
std::optional<CouplingBreak> driver_coupling(const ComponentManifest& c, const ComponentVariant& v,
                                             std::string_view driver_version, std::string_view distro);
std::optional<CouplingBreak> driver_pinning(const ComponentManifest& driver, const ComponentVariant& v,
                                            std::string_view distro);

// lint_manifests, turned into an error (kind manifest) listing every diagnostic.
// With `size` (a VM size name, any case), only that size's file is read from sizes/, when it
// exists: commands about one size do not parse all of them.
Result<Manifests> load_manifests(const std::filesystem::path& dir, std::string_view size = {});
// The stem of the one sizes/ file load_manifests reads for `size` ("nd96isr_h100_v5"), or empty
// when it reads them all (no size, or no such file).
std::string only_size_stem(const std::filesystem::path& dir, std::string_view size);

// The default manifest directory: $HPCBAKE_MANIFESTS, the installed data, then the source tree.
std::filesystem::path default_manifest_dir();
// `dir` (--manifests), or default_manifest_dir() when it is empty.
std::filesystem::path manifest_dir_or_default(const std::string& dir);

// The manifest directory (`dir`, or the default) and its driver recipes say what runs as root:
// every command that changes the machine checks them the same way (util::preflight).
util::TrustedPath manifest_trust(const std::string& dir);
util::TrustedPath drivers_trust(const std::string& dir);

} // namespace hpcbake::manifest
