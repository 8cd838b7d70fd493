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
    return fail(ErrorKind::fetch, fmt::format("{}: {}", name, r.error),
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

// One package: its source fetched, built and signed by DKMS, each module read and hashed.
Result<driver::PrebuiltPackage> build_package(const PrebuildRequest& rq, const plan::DkmsBuildStep& d,
                                              const fs::path& trees, const Signing& signing, std::string& arch,
                                              std::map<std::string, fs::path>& files) {
  HPCBAKE_TRY_ASSIGN(auto src, fetch_source(rq, d.source));
  driver::DkmsOptions o;
  o.trees = {trees / "dkms", trees / "src", trees / "lib/modules"};
  o.depmod = false;
  o.kernel_modules_dir = trees / "lib/modules";
  o.log_dir = rq.log_dir;
  o.signing = signing.key;
  o.sign_file = signing.sign_file;
  driver::Dkms dkms(*rq.runner, o);
  driver::BuildRequest br;
  br.source = src.path;
  br.subdir = d.subdir;
  br.spec = {d.dkms_name, d.version, d.modules, {}};
  br.kernels = {rq.kernel};
  br.work_dir = trees / "work";
  HPCBAKE_TRY_ASSIGN(auto builds, driver::build_module(br, dkms, rq.dkms_conf_template));
  HPCBAKE_TRY(driver::overall(br.spec, builds));
  HPCBAKE_TRY_ASSIGN(arch, built_arch(trees / "dkms" / d.dkms_name / d.version / rq.kernel));
  driver::PrebuiltPackage p{d.component, d.dkms_name, d.version, d.source, src.sha256, {}};
  const auto& kb = builds.front();
  for (std::size_t i = 0; i < kb.modules.size() && i < d.modules.size(); ++i) {
    const fs::path& ko = kb.modules[i];
    HPCBAKE_TRY_ASSIGN(auto info, driver::read_module_info(ko));
    std::uint64_t size = 0;
    HPCBAKE_TRY_ASSIGN(auto sha, util::sha256_file(ko, &size));
    driver::PrebuiltModule m{d.modules[i], ko.filename().string(), sha, size, info.vermagic, info.signer, info.sig_key};
    files[driver::prebuilt_member(p, m)] = ko;
    p.modules.push_back(std::move(m));
  }
  return p;
}

} // namespace

Result<PrebuildResult> prebuild(const PrebuildRequest& rq) {
  const plan::Plan& plan = *rq.plan;
  std::vector<const plan::DkmsBuildStep*> steps;
  for (const auto& s : plan.steps)
    if (const auto* d = s.as<plan::DkmsBuildStep>()) steps.push_back(d);
  if (steps.empty())
    return fail(
        ErrorKind::unsupported,
        fmt::format("{} on {} builds no module with DKMS: there is nothing to prebuild", plan.size, plan.distro_id),
        "prebuilt modules cover the plan's dkms-build steps (dkms_modules of a size); a vendor .run or a "
        "repository's packages build their own modules");
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
  for (const auto* d : steps) {
    HPCBAKE_TRY_ASSIGN(auto p, build_package(rq, *d, trees.dir, signing, m.arch, files));
    out.lines.push_back(fmt::format("{} {} for {}: {} module(s){}", p.dkms_name, p.version, rq.kernel, p.modules.size(),
                                    m.is_signed ? fmt::format(", signed by '{}'", m.signer) : ", unsigned"));
    m.packages.push_back(std::move(p));
  }
  HPCBAKE_TRY(driver::write_prebuilt(rq.out, m, files));
  return out;
}

} // namespace hpcbake::install
