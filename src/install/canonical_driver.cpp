// Canonical's signed precompiled NVIDIA modules (plan::CanonicalDriverStep): none of the driver's
// packages is installed until the archive keyring holds a pinned fingerprint and the refreshed
// index has the modules package of every target kernel and each userspace package; then exactly
// the versions read are installed and held, and the step's result records them. The plan's
// earlier steps (build tools, DOCA-OFED, ...) have run by then: only this step's packages wait.
#include "install/actions.hpp"
#include "repo/openpgp.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hpcbake::install {

namespace {

StepResult refused(ErrorKind kind, std::string message, std::string hint) {
  return StepResult::failure(Error{kind, std::move(message), std::move(hint)});
}

} // namespace

StepResult Actions::canonical_driver(const plan::Step& s, const plan::CanonicalDriverStep& c) {
  std::lock_guard lock(pkg_mu_);
  // The archive apt verifies these packages against: the keyring must hold a key Canonical signs
  // the archive with, by fingerprint, or the trust rests on whatever the image ships.
  auto data = c_.host.read_checked(c.keyring);
  if (!data) return StepResult::failure(data.error());
  if (!*data)
    return refused(ErrorKind::unsupported,
                   fmt::format("{}: {} is missing, so apt cannot verify Ubuntu's archive", s.id,
                               c_.host.display(c.keyring).string()),
                   "install the ubuntu-keyring package, or use --driver-source repository");
  auto keys = repo::read_key_file(**data, c.keyring);
  if (!keys) return StepResult::failure(keys.error());
  std::vector<std::string> found;
  for (const auto& k : keys->keys)
    found.push_back(k.fingerprint);
  if (std::none_of(found.begin(), found.end(), [&](const std::string& f) {
        return std::find(c.fingerprints.begin(), c.fingerprints.end(), f) != c.fingerprints.end();
      }))
    return refused(ErrorKind::fetch,
                   fmt::format("{}: {} holds {}, none of the pinned Ubuntu archive keys {}", s.id, c.keyring,
                               found.empty() ? std::string("no key") : util::join(found, ", "),
                               util::join(c.fingerprints, ", ")),
                   "restore the keyring from the ubuntu-keyring package (apt-get install --reinstall ubuntu-keyring)");
  // The candidates are read from an index refreshed in this run after the last change of the
  // sources (as packages() does: once per change, not once per step).
  if (const unsigned sources = sources_changed_.load(); sources != index_refreshed_at_) {
    if (auto r = c_.packages->refresh(); !r) return StepResult::failure(r.error());
    index_refreshed_at_ = sources;
  }
  // Every package and its version, read before anything is installed.
  std::vector<std::string> wanted, missing;
  for (const auto& k : c.kernels) {
    if (k == "{kernel}")
      return refused(ErrorKind::internal, fmt::format("{}: the plan names no kernel to install modules for", s.id),
                     "plan on the machine itself ('hpcbake install' plans for its next-boot kernel)");
    wanted.push_back(c.modules_for(k));
  }
  const std::size_t n_modules = wanted.size();
  wanted.insert(wanted.end(), c.packages.begin(), c.packages.end());
  const std::size_t n_held = wanted.size(); // the flavour's metapackage, last, is not held
  if (!c.flavour_package.empty()) wanted.push_back(c.flavour_package);
  std::vector<std::string> pinned;
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    auto v = c_.packages->candidate_version(wanted[i]);
    if (!v) return StepResult::failure(v.error());
    if (!*v)
      missing.push_back(i < n_modules ? fmt::format("{} (kernel {})", wanted[i], c.kernels[i]) : wanted[i]);
    else
      pinned.push_back(wanted[i] + "=" + **v);
  }
  if (!missing.empty())
    return refused(
        ErrorKind::unsupported,
        fmt::format("{}: Ubuntu's archive has no {}: Canonical has not published its signed precompiled NVIDIA {} "
                    "modules of branch {} for this kernel (yet); none of the NVIDIA driver's packages was installed "
                    "(the plan's steps before {} have run)",
                    s.id, util::join(missing, ", "), c.flavour, c.branch, s.id),
        "choose one: --driver-source repository (the modules are built with DKMS and signed with hpcbake's key, "
        "which must be enrolled), bake with Secure Boot off, or wait for Canonical's package for this kernel (it "
        "follows each kernel release) and run install again");
  if (auto r = c_.packages->install(pinned); !r) return StepResult::failure(r.error());
  const std::vector<std::string> held(pinned.begin(), pinned.begin() + static_cast<long>(n_held));
  if (auto r = c_.packages->hold(held); !r) return StepResult::failure(r.error());
  return StepResult::ok(fmt::format("installed and held {}{}", util::join(held, ", "),
                                    pinned.size() > n_held
                                        ? "; installed, not held (kernel updates bring its modules) " + pinned.back()
                                        : std::string()));
}

} // namespace hpcbake::install
