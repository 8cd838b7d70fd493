// The modules of a driver's packages installed by hpcbake rather than by their postinst: with
// prebuilt modules offered, or the plan signing with hpcbake's key (plan::PackagedModules), the
// packages went in with DKMS's autoinstall off, and here each target kernel gets the prebuilt
// modules (the package's sources compared with the ones they were built from, every module
// checked) or a DKMS build of those sources, which is what the postinst would have done: signed
// with hpcbake's key when the plan signs (each module's signer checked against its certificate),
// else by DKMS's own setup.
#include "driver/prebuilt.hpp"
#include "install/actions.hpp"
#include "util/atomic_file.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <unistd.h>

namespace hpcbake::install {

namespace fs = std::filesystem;

StepResult Actions::packaged_modules(const plan::PackagesStep& p, const std::string& installed) {
  const plan::PackagedModules& pm = *p.dkms;
  driver::BuildRequest rq;
  rq.source = c_.host.resolve(fmt::format("/usr/src/{}-{}", pm.dkms_name, pm.version));
  std::error_code ec;
  if (!fs::exists(rq.source / "dkms.conf", ec))
    return StepResult::failure(
        Error{ErrorKind::build,
              fmt::format("{}: the packages installed no DKMS sources at {} (no dkms.conf there)", installed,
                          rq.source.string()),
              fmt::format("Check which package ships /usr/src/{}-{} (dpkg -S), and the driver's version pin.",
                          pm.dkms_name, pm.version)});
  rq.spec = {pm.dkms_name, pm.version, pm.modules, {}};
  rq.kernels = p.kernels;
  rq.work_dir = c_.work_dir;
  auto dk = dkms_options();
  if (!dk) return StepResult::failure(dk.error());
  if (pm.sign && !dk->signing)
    return StepResult::failure(Error{ErrorKind::internal,
                                     fmt::format("{}: the plan signs {} {} with hpcbake's key, but no key is set up",
                                                 installed, pm.dkms_name, pm.version),
                                     "plan again: the plan's signing section names the key"});
  if (!pm.sign) { // signed as the package would have it (DKMS's own setup)
    dk->signing.reset();
    dk->dkms_signs = true;
  }

  const fs::path scratch = c_.work_dir / fmt::format("prebuilt-{}-{}", pm.dkms_name, ::getpid());
  util::remove_stale_pid_entries(c_.work_dir, fmt::format("prebuilt-{}-", pm.dkms_name));
  fs::remove_all(scratch, ec);
  if (!pm.prebuilt) {
    // nothing offered: every kernel is built with DKMS
  } else if (auto tree = driver::source_tree_sha256(rq.source); !tree) {
    for (const auto& [k, why] : pm.prebuilt->kernels)
      rq.not_prebuilt[k] = why.empty() ? tree.error().message : why;
  } else {
    use_prebuilt(*pm.prebuilt, {{}, c_.plan->arch, pm.dkms_name, pm.version, *tree, pm.modules, pm.sign},
                 pm.sign ? &c_.plan->signing : nullptr, rq, scratch);
  }
  // The package's sources in /usr/src are used in place, with the package's own dkms.conf.
  auto builds = build_checked(rq, *dk, scratch, {});
  if (!builds) return StepResult::failure(builds.error());
  std::vector<std::string> notes;
  for (const auto& b : *builds)
    notes.push_back(fmt::format(
        "{}: {}", b.kernel, b.note.empty() ? (pm.sign ? "built with DKMS, " + b.message : "built with DKMS") : b.note));
  return StepResult::ok(fmt::format("{}; {} {} ({})", installed, pm.dkms_name, pm.version, util::join(notes, "; ")));
}

} // namespace hpcbake::install
