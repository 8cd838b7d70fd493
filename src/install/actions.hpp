#pragma once
// What each typed plan step does on the machine (every host path under the HostFs root,
// every command through exec::Runner, every package through pkg::PackageManager). Nothing
// here decides what to run: the step says it (plan/plan.hpp); an "{artifact:NAME}" argument
// becomes the verified cache path of the plan's artifact NAME.
//   packages        pinned package files (dpkg -i / rpm -U), an index refresh, packages, holds
//   kernel-headers  install missing headers for the target kernel (driver::ensure_headers)
//   artifact        fetch the pinned file into the cache, or take it from --bundle, verified
//   config          write the file atomically when its content differs
//   command         run the argv
//   signing-key     generate (or check) the module signing key the plan names
//   run-installer   the vendor .run's argv for each target kernel
//   dkms-build      a DKMS module from the artifact's sources, for every target kernel (or,
//                   where the step's prebuilt modules fit a kernel, those, compiling nothing)
//   dkms-check      each module installed for the kernel (libkmod vermagic, signer)
//   service         the step's systemctl argv
//   waagent         OS.EnableRDMA and friends in waagent.conf (the caller's editor)
//   verify          the smoke tests for the size (the caller's verifier)
//   reboot          asks for a reboot once (the engine records the boot that asked)
// Every action is idempotent: re-running a done or half-done step converges.
#include "driver/dkms.hpp"
#include "driver/module_build.hpp"
#include "exec/runner.hpp"
#include "fetch/downloader.hpp"
#include "fetch/jobs.hpp"
#include "install/engine.hpp"
#include "manifest/manifests.hpp"
#include "pkg/manager.hpp"
#include "plan/plan.hpp"
#include "util/fd.hpp"
#include "util/hostfs.hpp"
#include "util/http.hpp"

#include <atomic>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hpcbake::install {

struct ActionsConfig {
  util::HostFs host{"/"};
  exec::Runner* runner = nullptr;
  pkg::PackageManager* packages = nullptr;
  const plan::Plan* plan = nullptr;
  // Artifacts.
  fetch::Options fetch;                 // cache_dir, mirrors, timeouts
  std::filesystem::path bundle;         // non-empty: artifacts come only from it
  fetch::Sha256Pins sha256_pins;        // --sha256, checked against the whole plan
  util::HttpClient* http = nullptr;     // repository keys (small; pinned by fingerprint, not SHA-256)
  fetch::Observer* downloads = nullptr; // artifact download events (from several steps at once); null: none
  // Kernel modules. The key is the plan's (Plan::signing); sign-file is found when a module is
  // first built (the kernels' headers, which carry it, are installed by earlier steps).
  driver::DkmsOptions dkms;
  std::filesystem::path work_dir; // scratch for extraction
  // The smoke tests, provided by the caller (verify lives above install in the graph).
  std::function<StepResult(const plan::Step&)> verify;
  // The Azure agent's RDMA settings; provided by the caller.
  std::function<StepResult(const plan::Step&)> waagent;
  // Each line of a step's command output, for logs and progress.
  std::function<void(const plan::Step&, const std::string&)> on_output;
};

class Actions final : public StepExecutor {
public:
  explicit Actions(ActionsConfig config);
  StepResult execute(const plan::Step& step) override;
  std::string boot_id() override;

private:
  StepResult packages(const plan::Step& s, const plan::PackagesStep& p);
  StepResult hold(const plan::Step& s, const plan::PackagesStep& p);
  bool all_installed(const std::vector<std::string>& packages);
  StepResult headers(const plan::HeadersStep& h);
  StepResult artifact(const plan::ArtifactStep& a);
  StepResult config(const plan::Step& s, const plan::ConfigStep& c);
  StepResult container_runtime(const plan::Step& s, const plan::ContainerRuntimeStep& c);
  StepResult repository(const plan::Step& s, const plan::RepositoryStep& r);
  Result<std::string> repository_key(const std::string& url) const;
  Result<std::filesystem::path> rpm_path(const std::string& name);
  // Runs argv with "{artifact:NAME}" arguments replaced by the verified cache paths.
  StepResult command(const plan::Step& s, const std::vector<std::string>& argv);
  // `argv` with each {artifact:NAME} replaced by the verified cache file, whose shared lock is kept
  // in `held` until the command is done.
  Status resolve_argv(const std::vector<std::string>& argv, std::vector<std::string>& out, std::vector<util::Fd>& held);
  StepResult initramfs(const plan::Step& s, const plan::CommandStep& c);
  StepResult signing_key();
  StepResult run_installer(const plan::Step& s, const plan::RunInstallerStep& r);
  StepResult dkms_build(const plan::DkmsBuildStep& d);
  StepResult unpack(const plan::Step& s, const plan::UnpackStep& u);
  StepResult git_source(const plan::Step& s, const plan::GitSourceStep& g);
  StepResult build(const plan::Step& s, const plan::BuildStep& b);
  // driver::build_module for every kernel of rq, `scratch` removed after, and any kernel's failure
  // the error (driver::overall).
  Result<std::vector<driver::KernelBuild>> build_checked(const driver::BuildRequest& rq,
                                                         const driver::DkmsOptions& options,
                                                         const std::filesystem::path& scratch,
                                                         const std::string& dkms_conf_template);
  // A step's prebuilt modules, checked against `want` (its kernel set per target kernel) and,
  // with `signing`, the plan's certificate, into rq.prebuilt (extracted under `scratch`); every
  // kernel they do not fit into rq.not_prebuilt with the reason.
  void use_prebuilt(const plan::PrebuiltUse& p, const driver::PrebuiltWant& want, const driver::SigningPlan* signing,
                    driver::BuildRequest& rq, const std::filesystem::path& scratch);
  // After a driver's packages went in with DKMS's autoinstall off: their modules for every
  // target kernel, prebuilt where they fit, else built by DKMS from the package's sources.
  StepResult packaged_modules(const plan::PackagesStep& p, const std::string& installed);
  // Canonical's signed precompiled modules (install/canonical_driver.cpp).
  StepResult canonical_driver(const plan::Step& s, const plan::CanonicalDriverStep& c);
  // The DKMS sources on the machine: the NAME-VERSION directories of /usr/src with a dkms.conf.
  std::set<std::string> dkms_sources() const;
  // A discovered PackagedModules (DOCA's kernel packages): every DKMS source the packages added
  // (not in `before`, or not registered with DKMS), built for each target kernel with the plan's
  // key, each built module's signer checked.
  StepResult discovered_modules(const plan::PackagesStep& p, const std::set<std::string>& before,
                                const std::string& installed);
  StepResult dkms_check(const plan::Step& s, const plan::DkmsCheckStep& d);
  StepResult repository_copy(const plan::Step& s, const plan::RepositoryStep& r);
  // The verified cache entry of a planned artifact, by file name, with a shared lock on it that
  // keeps `cache gc` away while the step reads it.
  struct Cached {
    std::filesystem::path path;
    util::Fd lock;
  };
  Result<Cached> cached(const std::string& name);
  // A git-source step's git bundle file, out of the offline bundle into the cache (userspace.cpp).
  Result<Cached> git_bundle_file(const plan::Step& s, const plan::GitSourceStep& g);
  // DKMS options with the signing key and sign-file settled (once).
  Result<driver::DkmsOptions> dkms_options();

  ActionsConfig c_;
  std::mutex pkg_mu_; // one package-manager transaction at a time
  // The package sources' changes in this run (repository steps, repository packages), and the
  // count when the index was last refreshed (under pkg_mu_): a step asking for a refresh gets
  // one only when the sources changed since.
  std::atomic<unsigned> sources_changed_{1};
  unsigned index_refreshed_at_ = 0;
  std::mutex bundle_mu_; // one copy out of the bundle at a time: two steps may want the same digest
  std::mutex sign_mu_;
  bool signing_ready_ = false;
};

} // namespace hpcbake::install
