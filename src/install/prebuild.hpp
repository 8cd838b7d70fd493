#pragma once
// `bundle modules`: the plan's DKMS modules built once, for one kernel release, on a build host,
// and written as a prebuilt-modules file (driver/prebuilt.hpp) that `install --prebuilt` puts on
// any number of nodes of that kernel without compiling. The build is install's: each module's
// pinned source artifact (fetched and verified, or taken from an offline bundle), real DKMS,
// signed as the plan decides (its key), every module checked (vermagic, signer). DKMS works in
// trees of its own under the work directory, so the build host's DKMS state and /lib/modules
// are untouched; they are removed afterwards.
#include "driver/prebuilt.hpp"
#include "exec/runner.hpp"
#include "fetch/downloader.hpp"
#include "fetch/jobs.hpp"
#include "plan/plan.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace hpcbake::install {

struct PrebuildRequest {
  util::HostFs host{"/"};
  const plan::Plan* plan = nullptr;
  std::string kernel;             // the release to build for: its headers at /lib/modules/K/build
  std::filesystem::path out;      // the file to write
  fetch::Options fetch;           // the source artifacts: cache, mirrors
  fetch::Sha256Pins sha256_pins;  // --sha256
  std::filesystem::path bundle;   // non-empty: the sources come only from this offline bundle
  exec::Runner* runner = nullptr; // DKMS runs through it
  std::string dkms_conf_template; // drivers/dkms/dkms.conf.in
  std::filesystem::path work_dir; // DKMS's trees live in a directory of this process under it
  std::filesystem::path log_dir;  // where a failed build's make.log is kept
};

struct PrebuildResult {
  driver::PrebuiltManifest manifest;
  std::vector<std::string> lines; // one per package and kernel, for people
};

// Errors: the plan builds no module with DKMS (unsupported), no headers for the kernel, a source
// that cannot be fetched, a build that fails (with DKMS's log as install reports it), a write.
Result<PrebuildResult> prebuild(const PrebuildRequest& request);

} // namespace hpcbake::install
