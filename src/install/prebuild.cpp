#include "install/prebuild.hpp"

#include "driver/dkms.hpp"
#include "driver/modinfo.hpp"
#include "driver/module_build.hpp"
#include "driver/mok.hpp"
#include "driver/signing.hpp"
#include "fetch/bundle.hpp"
#include "fetch/cache.hpp"
#include "util/atomic_file.hpp"
#include "util/build_config.hpp"
#include "util/fd.hpp"
#include "util/sha256.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>

namespace hpcbake::install {

namespace fs = std::filesystem;

namespace {

class Quiet final : public fetch::Observer {
public:
  void on_event(const fetch::Event&) override {}
};

// A verified source artifact, and the shared lock that keeps `cache gc` away while it is read.
struct Source {
  fs::path path;
  std::string sha256;
  util::Fd lock;
};

Result<Source> fetch_source(const PrebuildRequest& rq, const std::string& name) {
  const auto& arts = rq.plan->artifacts;
  auto it = std::find_if(arts.begin(), arts.end(), [&](const auto& a) { return a.artifact.name == name; });
  if (it == arts.end()) return fail(ErrorKind::internal, fmt::format("artifact {} is not in the plan", name));
  HPCBAKE_TRY_ASSIGN(auto jobs, fetch::jobs_for({*it}, rq.sha256_pins, fetch::Unpinned::refuse));
  Quiet quiet;
  fetch::Cache cache(rq.fetch.cache_dir, rq.fetch.quarantine_budget);
  HPCBAKE_TRY_ASSIGN(auto rep, rq.bundle.empty() ? fetch::download(jobs, rq.fetch, quiet)
                                                 : fetch::fetch_from_bundle(rq.bundle, jobs, cache, quiet));
  const auto& r = rep.results.front();
  if (!r.ok)
    return fail(r.lock_held ? ErrorKind::lock_held : ErrorKind::fetch, fmt::format("{}: {}", name, r.error),
                rq.bundle.empty() ? "check the network or pass --bundle" : "make the bundle again for this plan");
  HPCBAKE_TRY_ASSIGN(auto lock, cache.lock_entry_shared(r.sha256));
  return Source{r.path, r.sha256, std::move(lock)};
}

// DKMS's trees for this build: its own, under work_dir; /lib/modules/K/build in them links to
// the kernel's headers on the host (under --root), which DKMS compiles against.
struct Trees {
  fs::path dir;
  ~Trees() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

Status make_trees(const PrebuildRequest& rq, const fs::path& dir) {
  std::error_code ec;
  util::remove_stale_pid_entries(rq.work_dir, "prebuild-");
  fs::remove_all(dir, ec);
  fs::create_directories(dir / "lib/modules" / rq.kernel, ec);
  fs::create_directories(dir / "dkms", ec);
  fs::create_directories(dir / "src", ec);
  if (!ec)
    fs::create_directory_symlink(rq.host.root() / "lib/modules" / rq.kernel / "build",
                                 dir / "lib/modules" / rq.kernel / "build", ec);
  if (ec)
    return fail(ErrorKind::internal, fmt::format("cannot create DKMS's trees in {}: {}", dir.string(), ec.message()),
                "check that the work directory is writable");
  return {};
}

// The signing key and sign-file the plan's decision names, or none.
struct Signing {
  std::optional<driver::SigningKey> key;
  std::optional<driver::Certificate> cert;
  fs::path sign_file;
};

Result<Signing> plan_signing(const PrebuildRequest& rq) {
  Signing s;
  if (!rq.plan->signing.enabled) return s;
  HPCBAKE_TRY_ASSIGN(s.key, driver::signing_key(rq.plan->signing));
  HPCBAKE_TRY_ASSIGN(s.cert, driver::read_certificate(s.key->cert_der));
  auto sf = driver::find_sign_file(rq.host, rq.kernel);
  if (!sf)
    return fail(ErrorKind::unsupported,
                fmt::format("the modules must be signed but kernel {} has no sign-file", rq.kernel),
                fmt::format("install the headers of {} (they ship scripts/sign-file)", rq.kernel));
  s.sign_file = *sf;
  return s;
}

// The DKMS architecture directory the build used (<dkms>/NAME/VERSION/KERNEL/<arch>).
Result<std::string> built_arch(const fs::path& kdir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kdir, ec))
    if (e.is_directory()) return e.path().filename().string();
  return fail(ErrorKind::internal, fmt::format("DKMS left no build directory in {}", kdir.string()));
}

// Every module file in DKMS's module directory of one build, by name (the file name without
// .ko and its compression suffix), in name order.
Result<std::vector<std::pair<std::string, fs::path>>> built_modules(const fs::path& dir) {
  std::vector<std::pair<std::string, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    const auto at = f.find(".ko");
    if (at == std::string::npos || !e.is_regular_file()) continue;
    out.emplace_back(f.substr(0, at), e.path());
  }
  if (ec) return fail(ErrorKind::internal, fmt::format("cannot list {}: {}", dir.string(), ec.message()));
  if (out.empty()) return fail(ErrorKind::build, fmt::format("DKMS left no module in {}", dir.string()));
  std::sort(out.begin(), out.end());
  return out;
}

// What one package is built from: a plan artifact (fetched and verified), or the sources a
// driver's -dkms package put in /usr/src/NAME-VERSION on the build host (digest: their tree).
struct PackageInput {
  std::string component, dkms_name, version, subdir;
  std::vector<std::string> modules;
  std::string artifact;    // the plan's source artifact, or empty
  fs::path installed_tree; // with no artifact: the package's sources on the build host
};

Result<PackageInput> packaged_input(const PrebuildRequest& rq, const plan::PackagesStep& p) {
  const auto& pm = *p.dkms;
  const std::string dir = fmt::format("/usr/src/{}-{}", pm.dkms_name, pm.version);
  const fs::path tree = rq.host.resolve(dir);
  std::error_code ec;
  if (!fs::exists(tree / "dkms.conf", ec))
    return fail(
        ErrorKind::unsupported,
        fmt::format("{} {} comes from {}'s packages, and the build host has not their DKMS sources: {} has no "
                    "dkms.conf",
                    pm.dkms_name, pm.version, p.repository, tree.string()),
        fmt::format("install the driver's packages on the build host first (hpcbake install, or apt-get install "
                    "{}), or unpack its -dkms package under --root (dpkg-deb -x PKG.deb ROOT)",
                    util::join(p.packages, " ")));
  return PackageInput{p.component, pm.dkms_name, pm.version, "", pm.modules, "", tree};
}

// One package: its source fetched (or found), built and signed by DKMS, each module read and hashed.
Result<driver::PrebuiltPackage> build_package(const PrebuildRequest& rq, const PackageInput& in, const fs::path& trees,
                                              const Signing& signing, std::string& arch,
                                              std::map<std::string, fs::path>& files) {
  std::optional<Source> fetched;
  driver::PrebuiltPackage p{in.component, in.dkms_name, in.version, in.artifact, {}, {}};
  driver::BuildRequest br;
  if (!in.artifact.empty()) {
    HPCBAKE_TRY_ASSIGN(fetched, fetch_source(rq, in.artifact));
    br.source = fetched->path;
    p.source_sha256 = fetched->sha256;
  } else {
    br.source = in.installed_tree;
    p.source = in.installed_tree.string();
    HPCBAKE_TRY_ASSIGN(p.source_sha256, driver::source_tree_sha256(in.installed_tree));
  }
  driver::DkmsOptions o;
  o.trees = {trees / "dkms", trees / "src", trees / "lib/modules"};
  o.depmod = false;
  o.kernel_modules_dir = trees / "lib/modules";
  o.log_dir = rq.log_dir;
  o.signing = signing.key;
  o.sign_file = signing.sign_file;
  driver::Dkms dkms(*rq.runner, o);
  br.subdir = in.subdir;
  br.spec = {in.dkms_name, in.version, in.modules, {}};
  br.kernels = {rq.kernel};
  br.work_dir = trees / "work";
  HPCBAKE_TRY_ASSIGN(auto builds, driver::build_module(br, dkms, rq.dkms_conf_template));
  HPCBAKE_TRY(driver::overall(br.spec, builds));
  HPCBAKE_TRY_ASSIGN(arch, built_arch(trees / "dkms" / in.dkms_name / in.version / rq.kernel));
  // A package's dkms.conf may build more modules than the plan checks (nvidia-peermem): every
  // one DKMS built goes in, since `dkms install` on the node wants them all.
  std::vector<std::pair<std::string, fs::path>> built;
  if (in.artifact.empty()) {
    HPCBAKE_TRY_ASSIGN(built, built_modules(trees / "dkms" / in.dkms_name / in.version / rq.kernel / arch / "module"));
  } else {
    const auto& kb = builds.front();
    for (std::size_t i = 0; i < kb.modules.size() && i < in.modules.size(); ++i)
      built.emplace_back(in.modules[i], kb.modules[i]);
  }
  for (const auto& [name, ko] : built) {
    HPCBAKE_TRY_ASSIGN(auto info, driver::read_module_info(ko));
    std::uint64_t size = 0;
    HPCBAKE_TRY_ASSIGN(auto sha, util::sha256_file(ko, &size));
    driver::PrebuiltModule m{name, ko.filename().string(), sha, size, info.vermagic, info.signer, info.sig_key};
    files[driver::prebuilt_member(p, m)] = ko;
    p.modules.push_back(std::move(m));
  }
  return p;
}

// Whether prebuilt modules can stand in for a dkms-build step: its sources are a pinned artifact.
// A checkout (source_dir) has no digest the build host and the nodes would agree on (its .git
// differs per clone), and the plan offers no prebuilt modules for it: each node builds it.
bool prebuildable(const plan::DkmsBuildStep& d) {
  return d.source_dir.empty();
}

// The plan's modules to prebuild: its dkms-build steps, and a repository driver's DKMS packages.
// A step whose sources are a checkout is named in `skipped`.
Result<std::vector<PackageInput>> plan_inputs(const PrebuildRequest& rq, std::vector<std::string>& skipped) {
  std::vector<PackageInput> inputs;
  for (const auto& s : rq.plan->steps) {
    if (const auto* d = s.as<plan::DkmsBuildStep>(); d && !prebuildable(*d))
      skipped.push_back(fmt::format("{} {}: not prebuilt (its sources are the checkout {}, which has no artifact "
                                    "digest to match on the nodes): each node builds it with DKMS",
                                    d->dkms_name, d->version, d->source_dir));
    else if (d)
      inputs.push_back({d->component, d->dkms_name, d->version, d->subdir, d->modules, d->source, {}});
    if (const auto* p = s.as<plan::PackagesStep>(); p && p->dkms) {
      HPCBAKE_TRY_ASSIGN(auto in, packaged_input(rq, *p));
      inputs.push_back(std::move(in));
    }
  }
  return inputs;
}

} // namespace

Result<PrebuildResult> prebuild(const PrebuildRequest& rq) {
  const plan::Plan& plan = *rq.plan;
  const bool any = std::any_of(plan.steps.begin(), plan.steps.end(), [](const plan::Step& s) {
    const auto* p = s.as<plan::PackagesStep>();
    const auto* d = s.as<plan::DkmsBuildStep>();
    return (d && prebuildable(*d)) || (p && p->dkms);
  });
  if (!any)
    return fail(
        ErrorKind::unsupported,
        fmt::format("{} on {} builds no module with DKMS: there is nothing to prebuild", plan.size, plan.distro_id),
        "prebuilt modules cover the plan's dkms-build steps from an artifact (dkms_modules of a size) and a "
        "repository driver's DKMS package; a vendor .run builds its own modules");
  std::error_code ec;
  if (rq.kernel.empty() || rq.kernel.find('/') != std::string::npos ||
      !fs::exists(rq.host.resolve("/lib/modules/" + rq.kernel + "/build"), ec))
    return fail(ErrorKind::unsupported,
                fmt::format("no kernel headers for '{}': {} does not exist", rq.kernel,
                            rq.host.resolve("/lib/modules/" + rq.kernel + "/build").string()),
                fmt::format("install the headers of {} on the build host (Debian/Ubuntu: linux-headers-{})", rq.kernel,
                            rq.kernel));
  HPCBAKE_TRY_ASSIGN(auto signing, plan_signing(rq));
  Trees trees{rq.work_dir / fmt::format("prebuild-{}", ::getpid())};
  HPCBAKE_TRY(make_trees(rq, trees.dir));
  PrebuildResult out;
  auto& m = out.manifest;
  m.created_by = std::string("hpcbake ") + build::version;
  m.kernel = rq.kernel;
  m.distro = plan.distro_id;
  m.is_signed = signing.key.has_value();
  if (signing.cert) {
    m.signer = signing.cert->subject;
    m.serial = signing.cert->serial;
  }
  std::map<std::string, fs::path> files;
  HPCBAKE_TRY_ASSIGN(auto inputs, plan_inputs(rq, out.lines));
  for (const auto& in : inputs) {
    HPCBAKE_TRY_ASSIGN(auto p, build_package(rq, in, trees.dir, signing, m.arch, files));
    out.lines.push_back(fmt::format("{} {} for {}: {} module(s){}", p.dkms_name, p.version, rq.kernel, p.modules.size(),
                                    m.is_signed ? fmt::format(", signed by '{}'", m.signer) : ", unsigned"));
    m.packages.push_back(std::move(p));
  }
  HPCBAKE_TRY(driver::write_prebuilt(rq.out, m, files));
  return out;
}

} // namespace hpcbake::install
