// The modules of a driver's packages installed by hpcbake rather than by their postinst: with
// prebuilt modules offered, or the plan signing with hpcbake's key (plan::PackagedModules), the
// packages went in with DKMS's autoinstall off, and here each target kernel gets the prebuilt
// modules (the package's sources compared with the ones they were built from, every module
// checked) or a DKMS build of those sources, which is what the postinst would have done: signed
// with hpcbake's key when the plan signs (each module's signer checked against its certificate),
// else by DKMS's own setup.
#include "driver/out_of_tree.hpp"
#include "driver/prebuilt.hpp"
#include "install/actions.hpp"
#include "util/atomic_file.hpp"
#include "util/paths.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <sstream>

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

std::set<std::string> Actions::dkms_sources() const {
  std::set<std::string> out;
  for (const auto& name : c_.host.list("/usr/src"))
    if (c_.host.exists("/usr/src/" + name + "/dkms.conf")) out.insert(name);
  return out;
}

namespace {

// PACKAGE_NAME and PACKAGE_VERSION of /usr/src/DIR/dkms.conf: literal values, else from DIR
// (NAME-VERSION, as DKMS itself requires). Empty name when neither says.
std::pair<std::string, std::string> dkms_package(const std::string& conf, const std::string& dir) {
  auto value = [&](const char* key) {
    static const std::regex quoted(R"(^\s*([A-Z_]+)=["']?([A-Za-z0-9._+~:-]+)["']?\s*$)");
    std::istringstream in(conf);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_match(line, m, quoted) && m[1] == key) return m[2].str();
    }
    return std::string();
  };
  std::string name = value("PACKAGE_NAME"), version = value("PACKAGE_VERSION");
  if (!name.empty() && version.empty() && dir.starts_with(name + "-")) version = dir.substr(name.size() + 1);
  if (name.empty() || version.empty() || dir != name + "-" + version) return {};
  return {name, version};
}

} // namespace

namespace {

// The DKMS sources this step is to build: those a package installed (dpkg's file lists name their
// dkms.conf: another step running beside this one, a .run driver or a size's own module, puts its
// sources in /usr/src too, and builds them itself) that are new since the packages went in, or not
// registered with DKMS, plus those an earlier run of this step recorded (a retry after a failed
// build finds every source old and registered by its own `dkms add`, and must build them still).
Result<std::vector<driver::DkmsSource>>
discovered_sources(const util::HostFs& host, const std::set<std::string>& sources, const plan::PackagesStep& p,
                   const std::set<std::string>& before, const fs::path& dkms_tree) {
  const std::string record = fmt::format("{}/dkms-sources-{}.list", paths::kStateDir, p.component);
  std::set<std::string> recorded;
  if (auto text = host.read(record, util::host_file::config))
    for (auto line : util::split(*text, '\n'))
      if (!util::trim(line).empty()) recorded.insert(std::string(util::trim(line)));
  std::set<std::string> confs;
  for (const auto& dir : sources)
    confs.insert("/usr/src/" + dir + "/dkms.conf");
  const auto owners = driver::dpkg_owners(host, confs);
  std::vector<driver::DkmsSource> todo;
  for (const auto& dir : sources) {
    if (!owners.contains("/usr/src/" + dir + "/dkms.conf")) continue; // no package's: not this step's
    const auto conf = host.read("/usr/src/" + dir + "/dkms.conf", util::host_file::config);
    if (!conf) continue;
    const auto [name, version] = dkms_package(*conf, dir);
    std::error_code ec;
    const bool registered = !name.empty() && fs::exists(dkms_tree / name / version, ec);
    if (before.contains(dir) && registered && !recorded.contains(dir)) continue; // not this step's
    if (name.empty())
      return fail(ErrorKind::build,
                  fmt::format("/usr/src/{}/dkms.conf names no literal PACKAGE_NAME and PACKAGE_VERSION matching its "
                              "directory, so hpcbake cannot build it with its key",
                              dir),
                  "Run 'dkms install -m NAME -v VERSION' for it with hpcbake's key in sign_file, mok_signing_key "
                  "and mok_certificate, or bake with Secure Boot off.");
    todo.push_back({dir, name, version, driver::dkms_build_depends(*conf)});
  }
  std::string text;
  for (const auto& d : todo)
    text += d.dir + "\n";
  if (!todo.empty())
    if (auto w = util::write_file_atomic(host.resolve(record), text, 0644); !w) return std::unexpected(w.error());
  return driver::dkms_build_order(std::move(todo));
}

} // namespace

StepResult Actions::discovered_modules(const plan::PackagesStep& p, const std::set<std::string>& before,
                                       const std::string& installed) {
  auto dk = dkms_options();
  if (!dk) return StepResult::failure(dk.error());
  if (!dk->signing)
    return StepResult::failure(Error{ErrorKind::internal,
                                     fmt::format("{}: the plan signs {}'s DKMS modules with hpcbake's key, but no key "
                                                 "is set up",
                                                 installed, p.component),
                                     "plan again: the plan's signing section names the key"});
  const fs::path dkms_tree = dk->trees.dkms_tree.empty() ? c_.host.resolve("/var/lib/dkms") : dk->trees.dkms_tree;
  auto todo = discovered_sources(c_.host, dkms_sources(), p, before, dkms_tree);
  if (!todo) {
    auto e = todo.error();
    e.message = installed + ": " + e.message;
    return StepResult::failure(e);
  }
  std::vector<std::string> built;
  for (const auto& d : *todo) {
    driver::BuildRequest rq;
    rq.source = c_.host.resolve("/usr/src/" + d.dir);
    rq.spec = {d.name, d.version, {}, {}}; // the package's dkms.conf names the modules: every one is checked
    rq.kernels = p.kernels;
    rq.work_dir = c_.work_dir;
    auto builds = build_checked(rq, *dk, c_.work_dir / fmt::format("discovered-{}-{}", d.name, ::getpid()), {});
    if (!builds) return StepResult::failure(builds.error());
    std::size_t n = 0;
    for (const auto& b : *builds)
      n += b.modules.size();
    built.push_back(fmt::format("{} {} ({} module(s) for {} kernel(s), signed by '{}')", d.name, d.version, n,
                                builds->size(), dk->signing->subject));
  }
  if (built.empty())
    return StepResult::ok(installed + "; they added no DKMS module (nothing to sign with hpcbake's key)");
  return StepResult::ok(fmt::format("{}; built with hpcbake's key: {}", installed, util::join(built, "; ")));
}

} // namespace hpcbake::install
