#pragma once
// A plan: size x distro resolved into an ordered graph of typed steps, before anything is
// installed. The planner resolves everything a step does (the installer's argv with its
// signing arguments, module names, services, each file and its content, the packages) from
// the manifest set (manifests/ and the driver recipes in drivers/), so that what
// `plan --json` prints is what `install` runs. The executor (install::Actions) reads the
// typed step and nothing else; JSON (Step::detail()) is for display and for the digest.
//
// The one value a plan cannot know is where the verified cache keeps an artifact; an argv
// names it as "{artifact:NAME}" (kArtifactRef) and the executor substitutes the verified path.
#include "detect/host.hpp"
#include "driver/prebuilt.hpp"
#include "driver/signing.hpp"
#include "manifest/manifests.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace hpcbake::plan {

// "{artifact:NAME}" in an argv: the verified cache path of the plan's artifact NAME.
std::string artifact_ref(const std::string& name);
// NAME when `arg` is an artifact reference.
std::optional<std::string> artifact_of_ref(const std::string& arg);

// Prebuilt modules offered for a DKMS build (--prebuilt, driver/prebuilt.hpp): for each target
// kernel, used, or why not. Install checks them again (the file's digest, every module's digest,
// vermagic and signer) and builds with DKMS for each kernel where they do not fit, saying why.
struct PrebuiltUse {
  std::string file;   // the prebuilt-modules file, a path on this machine
  std::string sha256; // the file's digest when planned: a file changed since is not used
  std::string kernel; // the kernel release it was built for
  std::vector<std::pair<std::string, std::string>> kernels; // target kernel -> "" (used) or why not
};

// The DKMS modules a driver's packages build in their postinst (the -dkms package of a
// repository's driver), with the prebuilt modules offered for them (--prebuilt). Install then
// keeps DKMS's autoinstall off while the packages go in (/etc/dkms/no-autoinstall, which
// the dkms postinst of Debian and Ubuntu, /usr/lib/dkms/common.postinst, honours), and installs
// the modules itself from the sources the package put in /usr/src/NAME-VERSION: prebuilt where
// they fit (their source tree digest compared once unpacked), else built with DKMS.
//
// With the plan signing (`sign`), the packages always take that route, prebuilt modules or not:
// hpcbake builds them with its own key (driver::DkmsOptions::signing) and checks each module's
// signer against the plan's certificate, instead of the package's postinst signing them with
// DKMS's own MOK, which a Secure Boot VM does not trust until a person enrolls it.
struct PackagedModules {
  std::string dkms_name, version;
  std::vector<std::string> modules;
  std::optional<PrebuiltUse> prebuilt;
  bool sign = false; // hpcbake's key (the plan's certificate); false: DKMS's own setup, as the package has it
  // No dkms_name: the packages' DKMS modules are not known before they install (DOCA-OFED's kernel
  // packages): every /usr/src/NAME-VERSION with a dkms.conf that the packages added (not there
  // before the step, or not registered with DKMS: a postinst held off registers nothing) is built.
  bool discovered() const { return dkms_name.empty(); }
};

// Who signs the kernel modules a step builds: shown per step in the plan (`signed_by`).
//   hpcbake-key  hpcbake's key; the plan's certificate is what Secure Boot must trust
//   dkms-mok     DKMS's own configuration (a repository package's postinst): the distribution's
//                MOK, or the key DKMS generates in /var/lib/dkms
//   unsigned     nobody: the kernel loads them only with Secure Boot off
enum class SignedBy { hpcbake_key, dkms_mok, unsigned_modules };
const char* to_string(SignedBy by);
std::optional<SignedBy> signed_by_of(std::string_view name);
// A packages step's modules (none when the package manager alone installs them).
std::optional<SignedBy> signed_by(const PackagedModules& pm);

// Distro packages through the package manager (dependency resolution, its locks); pinned
// package files (a .deb/.rpm artifact of the plan) go in first through dpkg/rpm.
struct PackagesStep {
  std::string component; // empty: the distro's own packages
  std::string version;
  manifest::PackageManager manager = manifest::PackageManager::apt;
  std::vector<std::string> files; // artifact names of pinned package files
  std::vector<std::string> packages;
  bool hold = false;                   // hold every package named (apt-mark hold / dnf versionlock)
  std::vector<std::string> kernels;    // kernels the packages build modules for (display)
  std::string repository;              // the signed repository they come from (repositories/<id>.yaml), or empty
  std::optional<PackagedModules> dkms; // the DKMS modules they build, when known (a driver's packages)
};

// Whether a step installs from the package index, which install then refreshes first: once in
// the run, and again after each change of the package sources (repository steps, `files` that add
// sources); a step whose distro packages are all installed asks for nothing. Cloud images may ship
// without package lists (Ubuntu's are built with /var/lib/apt blank), and an image's lists name
// versions its mirror has since dropped. Shown as `refresh` in the plan's JSON.
inline bool refreshes_index(const PackagesStep& p) {
  return !p.packages.empty();
}

// A file of a repository carried in an offline bundle: its path inside the repository, and the
// digest it was verified against when the bundle was made (the signed index's, or the digest of
// the signed InRelease / pinned key as fetched).
struct MirrorFile {
  std::string path;
  std::string sha256;
  std::uint64_t size = 0;
};

// A vendor repository trusted through its pinned key: the key fetched and accepted only with
// the pinned fingerprint (repo::verify_pinned_key), written with the package manager's
// source file (repo::source_files); the package index is refreshed by the packages that follow.
struct RepositoryStep {
  std::string repository; // repositories/<id>.yaml
  manifest::PackageManager manager = manifest::PackageManager::apt;
  std::string uri;                   // https://... or file:///DIR/ (a repository on this machine's disk)
  std::vector<std::string> key_urls; // http(s):// or file:///PATH (read under --root)
  std::string fingerprint;
  std::string key_path;    // host path
  std::string source_path; // host path
  std::string source;      // its content
  std::string suite;       // apt: "/" for a flat repository
  std::vector<std::string> components;
  // From an offline bundle: the repository's files, put under mirror_dir from the cache (each
  // verified by its SHA-256 when the bundle was read) before the source file names it.
  std::string mirror_dir;
  std::vector<MirrorFile> mirror;
  bool signed_metadata = true; // apt's InRelease; dnf: repomd.xml.asc (repo_gpgcheck), else package signatures only
  // dnf: every package's own signature is checked (gpgcheck=1); apt never (a .deb carries none):
  // its checksum in the signed index is its trust. False on dnf only where the manifest says the
  // vendor signs its metadata alone (`signatures: metadata`), and then signed_metadata is true.
  bool signed_packages = false;
  std::string trust_source; // signatures: metadata: who publishes the repository that way
};

// What the package manager checks for a repository, as plan text and JSON name it:
// "metadata" (the signed index carries every package's checksum: apt, and dnf with
// signatures: metadata), "packages" (each package's signature), "metadata+packages".
std::string trust_mode(const RepositoryStep& r);

struct HeadersStep {
  manifest::PackageManager manager = manifest::PackageManager::apt;
  std::string kernel, package, check;
};

struct ArtifactStep {
  std::string component, version, name;
  std::vector<std::string> urls; // redacted (query strings); the downloader has Plan::artifacts
  std::optional<std::string> sha256;
  std::optional<std::int64_t> size;
};

struct ConfigStep {
  std::string path; // host path, absolute
  std::string content;
  unsigned mode = 0644;
};

// Modules the kernel loads at every boot: /etc/modules-load.d/<name>.conf, one per line.
struct ModulesLoadStep {
  std::string path; // host path
  std::vector<std::string> modules;
  std::string content() const;
};

// A command run as it is: argv[0] found on PATH.
struct CommandStep {
  std::string purpose; // "initramfs", ...
  std::string kernel;
  std::vector<std::string> argv;
  // An initramfs rebuild only matters when the initramfs holds a module whose configuration the
  // plan changes: `initramfs` (host path) is read first, and the command is skipped when it holds
  // none of `only_if_holds` (module families: "nvidia" is also nvidia-drm). Empty: always run.
  std::string initramfs;
  std::vector<std::string> only_if_holds;
};

// A signing key for kernel modules: generated in `dir` unless the user gave one.
struct SigningKeyStep {
  driver::SigningPlan signing;
};

// A vendor .run installer (makeself), one command per target kernel.
struct RunInstallerStep {
  std::string component, recipe, version, flavour;
  std::string run_file;                                                   // artifact name
  std::vector<std::pair<std::string, std::vector<std::string>>> commands; // kernel -> argv
  SignedBy signed_by = SignedBy::unsigned_modules; // the installer's --module-signing-* arguments
};

// An out-of-tree module from an artifact's sources, or from a directory an earlier step of the
// plan filled (a git-source checkout at a pinned commit), built and installed with DKMS for
// every target kernel (driver::build_module).
struct DkmsBuildStep {
  std::string component, version;
  std::string source;     // artifact name; empty when source_dir names the sources
  std::string source_dir; // host path (resolved under --root) of the sources; empty: the artifact
  std::string dkms_name, subdir;
  std::vector<std::string> modules;
  std::vector<std::string> directives; // extra dkms.conf lines (manifest dkms.directives)
  std::vector<std::string> kernels;
  driver::SigningPlan signing;
  std::optional<PrebuiltUse> prebuilt;
  std::string dkms_conf_template; // drivers/dkms/dkms.conf.in as planned (driver::build_module)
};
inline SignedBy signed_by(const DkmsBuildStep& d) {
  return d.signing.enabled ? SignedBy::hpcbake_key : SignedBy::unsigned_modules;
}

// The kernel metapackages held (apt-mark hold / dnf versionlock / tdnf locks.d) once every
// module is built for the target kernels: no update brings a kernel they were not built for.
struct KernelHoldStep {
  std::vector<std::string> packages;
  std::vector<std::string> kernels; // what the machine keeps booting (display)
  std::string source;               // where the package names come from
};

// Each module present for the kernel, its vermagic right and (when signing) its signer.
struct DkmsCheckStep {
  std::string package; // DKMS package name (for the hint)
  std::string version, kernel;
  std::vector<std::string> modules;
  bool check_signer = false;
};

struct ServiceStep {
  std::string unit;              // foo.service
  std::vector<std::string> argv; // systemctl enable --now foo.service
};

// The Azure agent's RDMA settings (waagent::apply_rdma), restarting the agent only when it
// runs and the file changed.
struct WaagentStep {
  std::string config;                                        // host path
  std::string unit;                                          // the agent's service
  bool enable = true;                                        // OS.EnableRDMA on (or off)
  std::vector<std::pair<std::string, std::string>> settings; // key -> value written when needed
  std::string reason;                                        // why the size wants it
};

// The NVIDIA runtime named in each container engine's configuration (container::configure): every
// other byte of the file kept, the original kept once; an engine that runs is restarted
// (systemctl try-restart) when its file changed.
struct ContainerRuntimeStep {
  std::vector<std::pair<std::string, std::string>> engines; // engine (docker, containerd) -> config host path
  std::string runtime = "nvidia";
  std::string binary = "/usr/bin/nvidia-container-runtime";
  // The profile's `kubernetes` option: containerd's default runtime is `runtime` and CDI is
  // enabled in its CRI plugin (container::Runtime::set_as_default, enable_cdi).
  bool kubernetes = false;
  // An InfiniBand size: Docker's default memlock unlimited (container::Runtime::memlock_unlimited),
  // and the HCAs' CDI spec (/var/run/cdi/hpcbake-rdma.yaml) rewritten by `verify --boot`.
  bool rdma = false;
};

// Canonical's signed precompiled NVIDIA modules for exactly the target kernels, with the matching
// userspace (and Fabric Manager) from Ubuntu's archive (distro canonical_signed_nvidia). Install
// first checks that the archive keyring holds a pinned fingerprint and that the index has the
// modules package of every target kernel, and refuses before installing anything when one is
// missing; then installs the packages at the candidate versions it read, holds them and records
// the versions.
struct CanonicalDriverStep {
  std::string component; // nvidia-cuda-driver
  std::string branch;    // 580
  std::string flavour;   // open | proprietary
  std::vector<std::string> kernels;
  std::string modules_package;       // pattern with {kernel}
  std::vector<std::string> packages; // userspace (and Fabric Manager), names resolved
  std::string keyring;               // host path of the archive keyring apt trusts
  std::vector<std::string> fingerprints;
  std::string signer;                      // who signs the modules (display)
  std::string module_signer;               // the signing certificate's CN (seal trusts it for these packages)
  std::vector<std::string> signer_serials; // its published serial numbers
  std::string source;                      // provenance (display)
  std::string flavour_package; // the kernel flavour's modules metapackage (installed unheld: kernel updates)
  // The modules package for one kernel.
  std::string modules_for(const std::string& kernel) const;
};

struct RebootStep {
  std::string reason;
};

// A verified artifact (the plan's artifact step) extracted into `dest` with archive::extract: all
// or nothing, no path escapes; an existing dest is replaced only once the new tree is complete.
struct UnpackStep {
  std::string component, version;
  std::string artifact; // artifact name
  std::string dest;     // host path
  int strip = 0;        // leading path components dropped
};

// A source tree at a pinned commit: cloned into `dest` (replaced when it holds another commit),
// checked out detached, and accepted only when `git rev-parse HEAD` is the pin.
struct GitSourceStep {
  std::string component, version;
  std::string url; // redacted like artifact URLs
  std::string commit;
  std::string dest; // host path
  // From an offline bundle: the git bundle file it carries for this commit (path: its name in the
  // bundle's index), copied into the cache verified by its SHA-256 and cloned instead of `url`.
  std::optional<MirrorFile> bundle;
};

// A userspace component built on the node: each argv run in `dir` through the Runner with `env`
// added; the step fails naming the command and its output's tail, and when `creates` is missing
// afterwards.
struct BuildStep {
  std::string component, version;
  std::string dir;              // host path
  std::vector<std::string> env; // KEY=VALUE
  std::vector<std::vector<std::string>> commands;
  std::string creates; // host path
};

// A GPU or NIC of the size's published PCI layout (its NCCL topology file): NUMA node, bus id,
// PCI class, and the link it trains at.
struct PciTopologyEntry {
  int numa = 0;
  std::string bus_id;     // "0001:00:00.0"
  std::string pci_class;  // "0x030200" (3D controller: GPU), "0x020700" (InfiniBand controller)
  std::string link_speed; // "32.0 GT/s PCIe"
  int link_width = 0;     // 16
  // The bus id of the PCIe switch (bridge) it sits under in the file ("ffff:ff:01.0"); empty when
  // directly under its <cpu>. A GPU and a NIC under the same bridge are each other's nearest.
  std::string bridge;
};

// What the size promises, computed once by the planner from the size manifest and the plan:
// verify checks the machine against exactly this (verify::run). The *_source strings and
// size_file say where each value comes from (provenance: shown, never part of a step's digest).
struct VerifyExpectations {
  std::string size_file; // "sizes/nd96isr_h100_v5.yaml" (relative to the manifest dir)
  // GPU
  bool nvidia = false;
  int gpu_count = 0;                    // checks.gpu_count, else gpu.count
  std::string gpu_model;                // "H100" (gpu.model)
  std::vector<std::string> gpu_pci_ids; // "0x2330": the PCI device ids of that model (gpu.pci_ids)
  std::string driver_version;           // empty when the plan installs no NVIDIA driver
  std::string driver_source;            // "components/nvidia-cuda-driver.yaml for ubuntu-22.04"
  int nvswitch_count = 0;
  bool fabric_manager = false;
  std::vector<std::string> modules; // kernel modules the plan builds or loads (nvidia, nvidia-uvm, ...)
  // Other out-of-tree modules the plan builds with DKMS (a size's dkms_modules): DKMS package name
  // and its modules, in plan order; checked for every target kernel like NVIDIA's.
  std::vector<std::pair<std::string, std::vector<std::string>>> dkms_modules;
  std::vector<std::string> kernels; // target kernels; empty: resolved on the machine
  std::optional<double> gpu_bw_gbs; // checks.gpu_bw_h2d_gbs
  std::optional<double> gpu_bw_p2p_gbs;
  std::optional<std::int64_t> gpu_ecc_sram_threshold, gpu_ecc_dram_threshold;
  std::optional<double> nccl_allreduce_gbs;
  // InfiniBand
  int ib_ports = 0; // 0: no InfiniBand
  int ib_rate_gbps = 0;
  bool ipoib = false;
  bool peermem = false;
  std::optional<double> ib_bw_gbps; // loopback threshold (checks.ib_write_bw_gbps); none: a fraction of the rate
  std::string ib_bw_source;
  std::optional<double> ib_write_bw_gdr_gbps;
  // Containers: the engines whose configs name the runtime (the plan's container-runtime step).
  std::vector<std::pair<std::string, std::string>> container_engines; // engine -> config host path
  std::string container_runtime = "nvidia";
  std::string container_binary;
  bool container_kubernetes = false; // containerd's default runtime and CDI (the kubernetes option)
  bool container_rdma = false; // InfiniBand size: Docker's memlock, the HCAs' CDI spec (checks_container_rdma.cpp)
  bool dcgm = false;           // the plan installs DCGM
  std::string waagent_config;
  std::string waagent_service;
  // Host inventory (the size's cpu, memory_mb, nvme_count; checks.memory_tolerance_pct): each
  // none where no source publishes it, and the check says so.
  std::optional<int> cpu_sockets, cpu_cores, cpu_threads;
  std::optional<std::int64_t> memory_mb;
  std::optional<std::int64_t> memory_kb; // the size's memory_kb: exact where the conf gives kB
  std::optional<double> memory_tolerance_pct;
  std::optional<int> nvme_count;
  bool grid = false; // driver kind grid: the vGPU licence must be held
  // NCCL all-reduce: nccl-tests' message size, the all_reduce_perf and mpirun the plan builds or
  // unpacks (empty: the plan has none), the size's topology file as installed.
  std::string nccl_allreduce_message;
  std::string all_reduce_perf; // "/opt/nccl-tests/build/all_reduce_perf"
  std::string mpirun;          // HPC-X's "/opt/hpcx-.../ompi/bin/mpirun"
  std::string nccl_topo_file;  // "/opt/microsoft/ndv5/topo.xml"
  // The size's published PCI layout (GPUs and NICs of the topology file) and where it comes from.
  std::vector<PciTopologyEntry> pci_topology;
  std::string topology_source;
};

struct VerifyStep {
  VerifyExpectations expect;
  std::string thresholds_source; // where the size's figures come from (provenance)
  // `install --hardware-checks deferred`: this machine is not the size (a bake on another VM): the
  // closing verify runs the checks of what is on disk, and the hardware checks wait for the first
  // boot on the size (verify --boot). In plan JSON as "hardware_checks": "deferred", only then.
  bool defer_hardware = false;
};

using Action = std::variant<PackagesStep, RepositoryStep, HeadersStep, ArtifactStep, ConfigStep, ModulesLoadStep,
                            CommandStep, SigningKeyStep, RunInstallerStep, DkmsBuildStep, DkmsCheckStep, KernelHoldStep,
                            ServiceStep, WaagentStep, ContainerRuntimeStep, RebootStep, VerifyStep, CanonicalDriverStep,
                            UnpackStep, GitSourceStep, BuildStep>;

// The step kind names in `plan --json` (one per Action alternative, in order).
const char* kind_name(const Action& action);

struct Step {
  std::string id;                 // stable: "artifact:NVIDIA-Linux-x86_64-580.126.20.run"
  std::string title;              // one line for humans
  std::vector<std::string> after; // ids of steps that must finish first
  Action action;

  const char* kind() const { return kind_name(action); }
  template <class T> const T* as() const { return std::get_if<T>(&action); }
  // Everything the step does, as JSON: what `plan --json` shows and what plan.json stores;
  // step_from_json reads it back.
  nlohmann::json detail() const;
  // The step's canonical typed content: detail() without titles, reasons, provenance or other
  // prose. A step's digest covers this (install/engine.hpp step_digests), so rewording a
  // sentence or a manifest's `source:` re-runs nothing.
  nlohmann::json content() const;
};

// The component and version a step installs (artifact, packages, run-installer, dkms-build).
struct ComponentRef {
  std::string component, version;
};
std::optional<ComponentRef> component_of(const Step& step);

// An artifact as the manifests pin it (URLs with any query string intact, for the
// downloader only; the JSON shows them redacted).
using PlannedArtifact = manifest::PinnedArtifact;

// How modules are trusted under Secure Boot. The plan's `route`: who makes the NVIDIA driver's
// modules load (nobody needs to: none; hpcbake's key; Canonical's signature on its precompiled
// modules: canonical-signed). Its `signing.route` (Plan::signing_route): how the plan's own-built
// modules are (none: it signs nothing; hpcbake-key: every module it or a vendor installer builds
// is signed with the plan's key, whose certificate goes into MOK or the image's UEFI db).
enum class SigningRoute { none, hpcbake_key, canonical_signed };
const char* to_string(SigningRoute route);
std::optional<SigningRoute> parse_signing_route(std::string_view text);

// Where the NVIDIA driver comes from (--driver-source): automatic picks Canonical's signed
// precompiled modules when modules must be signed and the distro and branch have them, else what
// the component manifest gives for the distro (a signed vendor repository or a pinned .run);
// repository and run ask for that and refuse when the manifest gives the other.
enum class DriverSource { automatic, repository, run, canonical };
const char* to_string(DriverSource source);
std::optional<DriverSource> parse_driver_source(std::string_view text);

struct Plan {
  std::string size; // Standard_ND96isr_H100_v5
  std::string size_id;
  std::string family;
  std::string distro_id;
  std::string distro_name;
  std::string arch;    // x86_64, aarch64: the size's CPU
  std::string profile; // profiles/<id>.yaml the optional components came from; empty: none
  manifest::PackageManager package_manager = manifest::PackageManager::apt; // the distro's
  bool platform_keyring = false;    // the distro's kernels trust db's keys for modules (module_keyrings.platform)
  std::vector<std::string> kernels; // targets; empty when resolved at install time
  std::string kernels_source;
  driver::SigningPlan signing;
  SigningRoute route = SigningRoute::none; // how the driver's modules are trusted (plan JSON `route`)
  std::string route_reason;                // why that route: shown in the plan
  std::vector<Step> steps;
  std::vector<std::string> notes; // facts a reader must see (unknown SHA-256, Secure Boot, ...)
  // Values an overlay (--overlay, /etc/hpcbake/manifests.d/) set over the shipped manifests.
  struct Override {
    std::string what; // "components/nvidia-cuda-driver.yaml:variants[0].version"
    std::string value;
    std::string file; // the overlay
    int line = 0;
  };
  std::vector<Override> overrides; // plan JSON `overrides`, present only when not empty
  std::vector<PlannedArtifact> artifacts;
  // Artifacts whose URLs lost their query string or password when the plan was stored (plan.json
  // keeps no credential): a resumed install finds them in the cache or asks for a fresh install.
  std::vector<std::string> artifacts_redacted;

  const Step* find(const std::string& id) const;
  // hpcbake-key where the plan signs and builds modules (its build tools step); none otherwise, as
  // with Canonical's precompiled driver alone, where signing is on and nothing is built.
  SigningRoute signing_route() const {
    return signing.enabled && find("packages:build") ? SigningRoute::hpcbake_key : SigningRoute::none;
  }
};

// A prebuilt-modules file as the planner sees it: where, its digest, its manifest.
struct PrebuiltInput {
  std::string file;
  std::string sha256;
  driver::PrebuiltManifest manifest;
};

struct PlanRequest {
  std::string size;                                // VM size name (any case)
  std::string distro;                              // distro manifest id
  std::string profile = "default";                 // profiles/<id>.yaml: the optional components
  std::optional<manifest::DriverKind> driver_kind; // --driver; default from the size
  // Facts of the host being planned for, when it is this machine; used for kernels,
  // Secure Boot and nouveau. Null when planning for another machine.
  const detect::HostFacts* host = nullptr;
  driver::SigningRequest signing;
  // Hold the distro's kernel metapackages after the modules are built (distro kernel_hold).
  bool hold_kernel = false;
  // A plan read only for what the size promises (verify): refusals about how install would
  // sign modules do not apply.
  bool expectations_only = false;
  // Repositories an offline bundle carries (id -> files): trusted from a local copy under
  // paths::kRepoMirrorDir/<id>/ instead of the network, with the same pinned key.
  std::map<std::string, std::vector<MirrorFile>> mirrors;
  // Git sources an offline bundle carries (commit -> its git bundle file): cloned from that file.
  std::map<std::string, MirrorFile> git_bundles;
  // Prebuilt modules (--prebuilt): the DKMS builds they fit install them instead of compiling.
  const PrebuiltInput* prebuilt = nullptr;
  DriverSource driver_source = DriverSource::automatic; // --driver-source
  // --driver-version: the NVIDIA driver variant (and those of the components that follow it) that
  // pins this version for the distro; refused, listing the pinned ones, where none does.
  std::string driver_version;
  // The closing verify's hardware checks are deferred to the first boot on the size (VerifyStep),
  // and no service that needs the size's hardware is started now, only enabled.
  bool defer_hardware = false;
  // Target kernels given by the user (--kernel, plan and install --dry-run): the plan builds for
  // these instead of the host's running and next-boot kernels, so any size x distro can be
  // planned, exactly, from any machine. Empty: the host's (when it is the distro), else resolved
  // on the target at install time.
  std::vector<std::string> kernels;
};

// A kernel release as `uname -r` prints it and /lib/modules/<release> names it: letters, digits
// and . _ + ~ - only (no path separator, no space), not empty, not . or ... Errors: usage.
Result<void> check_kernel_release(const std::string& release);

// Resolves the request. Errors: unknown size/distro and combinations the manifests
// rule out (kind unsupported, listing what is supported); broken couplings such as
// Fabric Manager != driver version (kind manifest); a missing driver recipe.
Result<Plan> make_plan(const manifest::Manifests& manifests, const PlanRequest& request);

// What the size promises, from the manifests and the plan's steps (the verify step's content).
// The GPUs (class 0x0302xx) and NICs (0x0207xx, 0x0200xx) of an NCCL topology file (<system>,
// <cpu numaid>, nested <pci busid class link_speed link_width>), in file order; bridges and the
// virtual ffff: bus are left out. Errors: not such a file.
Result<std::vector<PciTopologyEntry>> parse_nccl_topology(std::string_view xml);

VerifyExpectations verify_expectations(const manifest::Manifests& manifests, const manifest::SizeManifest& size,
                                       const manifest::DistroManifest& distro, const Plan& plan);
nlohmann::json to_json(const VerifyExpectations& e);

// The plan as `plan --json` shows it (artifact URLs without query strings). With
// Urls::full, also what the downloader needs (each artifact's URLs as pinned), for plan.json.
enum class Urls { redacted, full };
nlohmann::json to_json(const Plan& plan, Urls urls = Urls::redacted);
// The plan back from to_json(plan, Urls::full): strict, as the journal reader is: an unknown
// key, a missing field, a wrong type or another schema is an error naming `where` and the field.
Result<Plan> plan_from_json(const nlohmann::json& doc, const std::string& where);
inline constexpr int kPlanSchema = 3;
std::string render_text(const Plan& plan);
// "download: 2 artifacts, 757.6 MiB (1 cached, 379.6 MiB); ...": what install fetches, what the
// cache already holds (cached(sha256)), what has no published size, and which packages come from
// repositories (the package manager sizes those). One line, for plan's text and install's prompt.
std::string download_summary(const Plan& plan, const std::function<bool(const std::string&)>& cached);
// The indented lines under a step's title: exactly what it runs or writes.
std::string step_lines(const Step& step);

// A file:/// URL: a repository or key on the machine's disk, read under --root.
bool is_local_url(std::string_view url);
// Nothing when the plan installs offline from a bundle: every repository it trusts is on the
// machine's disk (its URI and one of its key URLs file:///: a mirror the manifest names, or the
// copy a bundle carries), and every git source is a file:/// one or cloned from the bundle's git
// bundle file. Else why not, naming each; checked before any step runs.
Status offline_installable(const Plan& plan);
// Nothing when `bundle create` can make an offline bundle for the plan: it carries each network
// repository the plan uses (a snapshot of what it installs from it); a repository on the
// machine's disk whose key is only on the network is refused, naming it.
Status bundle_can_carry(const Plan& plan);

} // namespace hpcbake::plan
