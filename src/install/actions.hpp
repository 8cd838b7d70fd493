#pragma once
// What each plan step kind does on the machine (every host path under the HostFs root,
// every command through exec::Runner, every package through pkg::PackageManager):
//   packages        install (and hold) distro packages; a pinned .deb/.rpm of the step first
//   kernel-headers  install missing headers for the target kernel (driver::ensure_headers)
//   artifact        fetch the pinned file into the cache, or take it from --bundle, verified
//   config          write the file atomically when its content differs
//   initramfs       run the distro's initramfs tool for the kernel
//   driver          by the component's recipe: the NVIDIA .run per kernel, packages, or a
//                   DKMS module from the artifact (installer: dkms)
//   dkms            check each module is installed for the kernel (libkmod vermagic)
//   service         systemctl enable --now (units hpcbake's packages ship)
//   waagent         OS.EnableRDMA and friends in waagent.conf (waagent::apply_rdma)
//   verify          the smoke tests for the size (verify::run)
//   reboot          asks for a reboot once (the engine records the boot that asked)
// Every action is idempotent: re-running a done or half-done step converges.
#include "driver/dkms.hpp"
#include "driver/recipe.hpp"
#include "exec/runner.hpp"
#include "fetch/downloader.hpp"
#include "install/engine.hpp"
#include "manifest/manifests.hpp"
#include "pkg/manager.hpp"
#include "plan/plan.hpp"
#include "util/hostfs.hpp"

#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::install {

struct ActionsConfig {
  util::HostFs host{"/"};
  exec::Runner* runner = nullptr;
  pkg::PackageManager* packages = nullptr;
  const manifest::DistroManifest* distro = nullptr;
  const driver::Recipes* recipes = nullptr;
  const plan::Plan* plan = nullptr;
  // Artifacts.
  fetch::Options fetch;                       // cache_dir, mirrors, timeouts
  std::filesystem::path bundle;               // non-empty: artifacts come only from it
  std::vector<std::string> sha256_overrides;  // NAME=HEX, as for fetch
  // Kernel modules. Signing is resolved when a module is first built (the kernels' headers,
  // which carry sign-file, are installed by earlier steps).
  driver::DkmsOptions dkms;
  bool sign = false;
  std::filesystem::path key_dir;              // generated key (signing.key, signing.der)
  std::filesystem::path sign_key, sign_cert;  // or the user's
  std::string dkms_conf_template;
  std::filesystem::path work_dir;             // scratch for extraction
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
  StepResult packages(const plan::Step& s);
  // A pinned .deb/.rpm from the cache, through dpkg -i / rpm -U.
  StepResult package_file(const plan::Step& s, const std::string& name);
  StepResult headers(const plan::Step& s);
  StepResult artifact(const plan::Step& s);
  StepResult config(const plan::Step& s);
  StepResult command(const plan::Step& s, const std::vector<std::string>& argv);
  StepResult driver(const plan::Step& s);
  StepResult dkms_check(const plan::Step& s);
  StepResult service(const plan::Step& s);
  // The verified cache entry of a planned artifact, by file name.
  Result<std::filesystem::path> cached(const std::string& name);
  // DKMS options with the signing key and sign-file settled (once).
  Result<driver::DkmsOptions> dkms_options();

  ActionsConfig c_;
  std::mutex pkg_mu_; // one package-manager transaction at a time
  std::mutex sign_mu_;
  bool signing_ready_ = false;
};

} // namespace hpcbake::install
