#include "driver/dkms.hpp"

#include "driver/modinfo.hpp"
#include "util/atomic_file.hpp"
#include "util/hostfs.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <sstream>

namespace hpcbake::driver {

namespace fs = std::filesystem;

const char* to_string(BuildOutcome outcome) {
  switch (outcome) {
  case BuildOutcome::installed:
    return "installed";
  case BuildOutcome::already_installed:
    return "already installed";
  case BuildOutcome::excluded:
    return "excluded by BUILD_EXCLUSIVE";
  case BuildOutcome::missing_headers:
    return "kernel headers missing";
  case BuildOutcome::build_failed:
    return "build failed";
  case BuildOutcome::install_failed:
    return "install failed";
  }
  return "unknown";
}

namespace {

// Verbose kbuild logs (NVIDIA's dkms.conf sets NV_VERBOSE=1) have compiler command lines of several
// KB: each line longer than `width` bytes is cut, never inside a UTF-8 sequence (gcc quotes with
// U+2018/U+2019).
std::string cut_lines(std::string_view text, std::size_t width) {
  std::string out;
  for (auto line : util::split(text, '\n')) {
    if (line.size() <= width) {
      out += std::string(line) + "\n";
      continue;
    }
    std::size_t cut = width;
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80)
      --cut;
    out += std::string(line.substr(0, cut)) + " [...]\n";
  }
  return out;
}

} // namespace

std::string first_error(std::string_view log) {
  // gcc/clang: "file.c:LINE:COL: error: ..." or "fatal error:"; then ld, make and kbuild.
  static const std::regex compiler(R"(:\d+(:\d+)?: (fatal )?error: )");
  static const std::regex other(R"((^|\s)(ERROR: |make(\[\d+\])?: \*\*\* |\S*ld: ))");
  std::string fallback;
  for (auto line : util::split(log, '\n')) {
    const std::string l(util::trim(line));
    if (std::regex_search(l, compiler)) return l;
    if (fallback.empty() && std::regex_search(l, other)) fallback = l;
  }
  return fallback;
}

std::string sign_tool_script(const fs::path& sign_file, const SigningKey& signing) {
  return fmt::format("#!/bin/sh\n"
                     "# Written by hpcbake: DKMS 2.8 runs it as sign_tool KERNELVER MODULE on each built module\n"
                     "# (dell/dkms v2.8.7 dkms, run_sign_tool). DKMS 3.0 ignores sign_tool.\n"
                     "exec {} sha512 {} {} \"$2\"\n",
                     exec::shell_quote({sign_file.string()}), exec::shell_quote({signing.key.string()}),
                     exec::shell_quote({signing.cert_der.string()}));
}

std::string render_dkms_conf(const std::string& conf_template, const ModuleSpec& spec) {
  std::string modules;
  for (std::size_t i = 0; i < spec.modules.size(); ++i)
    modules += fmt::format("BUILT_MODULE_NAME[{0}]=\"{1}\"\nDEST_MODULE_LOCATION[{0}]=\"/updates/dkms\"\n", i,
                           spec.modules[i]);
  std::string directives;
  for (const auto& d : spec.directives)
    directives += d + "\n";
  std::string out = util::replace_all(conf_template, "@NAME@", spec.name);
  out = util::replace_all(out, "@VERSION@", spec.version);
  out = util::replace_all(out, "@MODULES@\n", modules);
  out = util::replace_all(out, "@DIRECTIVES@\n", directives);
  return out;
}

Dkms::Dkms(exec::Runner& runner, DkmsOptions options) : runner_(runner), opt_(std::move(options)) {}

fs::path Dkms::dkms_tree() const {
  return opt_.trees.dkms_tree.empty() ? fs::path("/var/lib/dkms") : opt_.trees.dkms_tree;
}
fs::path Dkms::install_tree() const {
  return opt_.trees.install_tree.empty() ? fs::path("/lib/modules") : opt_.trees.install_tree;
}
fs::path Dkms::source_dir(const ModuleSpec& spec) const {
  const fs::path tree = opt_.trees.source_tree.empty() ? fs::path("/usr/src") : opt_.trees.source_tree;
  return tree / (spec.name + "-" + spec.version);
}

std::vector<std::string> Dkms::tree_args() const {
  std::vector<std::string> a;
  if (!opt_.trees.dkms_tree.empty()) a.insert(a.end(), {"--dkmstree", opt_.trees.dkms_tree.string()});
  if (!opt_.trees.source_tree.empty()) a.insert(a.end(), {"--sourcetree", opt_.trees.source_tree.string()});
  if (!opt_.trees.install_tree.empty()) a.insert(a.end(), {"--installtree", opt_.trees.install_tree.string()});
  return a;
}

Status Dkms::register_source(const fs::path& dir, const ModuleSpec& spec, const std::string& conf_template) {
  if (spec.name.empty() || spec.version.empty() || spec.name.find('/') != std::string::npos ||
      spec.version.find('/') != std::string::npos)
    return fail(ErrorKind::usage, fmt::format("DKMS module name '{}' and version '{}' must be non-empty, without '/'",
                                              spec.name, spec.version));
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return fail(ErrorKind::usage, fmt::format("{}: module source directory not found", dir.string()));
  const bool ships_conf = fs::exists(dir / "dkms.conf", ec);
  if (!ships_conf && spec.modules.empty())
    return fail(ErrorKind::usage, fmt::format("{} has no dkms.conf and no module names were given", dir.string()),
                "name the modules the sources build (--module NAME), or ship a dkms.conf");
  const fs::path dest = source_dir(spec);
  // Copy beside the destination, then swap it in: an earlier copy is replaced whole or not at all.
  const fs::path staging = dest.string() + ".hpcbake-new";
  fs::remove_all(staging, ec);
  fs::create_directories(staging.parent_path(), ec);
  fs::copy(dir, staging, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (ec) {
    fs::remove_all(staging, ec);
    return fail(ErrorKind::internal,
                fmt::format("copying {} to {} failed: {}", dir.string(), staging.string(), ec.message()));
  }
  if (!ships_conf)
    if (auto s = util::write_file_atomic(staging / "dkms.conf", render_dkms_conf(conf_template, spec)); !s) {
      fs::remove_all(staging, ec);
      return s;
    }
  fs::remove_all(dest, ec);
  fs::rename(staging, dest, ec);
  if (ec)
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot move the sources into place: {}", dest.string(), ec.message()));
  return {};
}

bool Dkms::remove_half_built(const ModuleSpec& spec, const std::string& kernel) const {
  // DKMS builds in <tree>/NAME/VERSION/build, then creates <tree>/NAME/VERSION/KERNEL/ARCH/log and
  // module/ and copies the modules in. Killed in between (a crash, a SIGKILL, a full disk), it
  // leaves KERNEL/ARCH without the modules: DKMS does not count it as built, refuses to build
  // there again ("already been built ... use the dkms remove function", exit 3), and its remove
  // and unbuild skip it as not built. So every later install of the module fails until someone
  // deletes the directory: that is done here, as DKMS's own unbuild would.
  const fs::path kdir = dkms_tree() / spec.name / spec.version / kernel;
  std::error_code ec;
  bool removed = false;
  for (fs::directory_iterator it(kdir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory() || it->is_symlink()) continue;
    const fs::path mod = it->path() / "module";
    auto has = [&](const std::string& m) {
      for (const char* ext : {".ko", ".ko.xz", ".ko.zst", ".ko.gz"})
        if (fs::exists(mod / (m + ext))) return true;
      return false;
    };
    bool complete = fs::is_directory(mod);
    if (complete && spec.modules.empty()) { // a shipped dkms.conf names them: any module counts
      complete = false;
      for (const auto& e : fs::directory_iterator(mod, ec))
        if (e.path().filename().string().find(".ko") != std::string::npos) complete = true;
    }
    for (const auto& m : spec.modules)
      complete = complete && has(m);
    if (complete) continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);
    removed = removed || !rm;
  }
  if (removed && fs::is_empty(kdir, ec)) fs::remove(kdir, ec);
  return removed;
}

std::vector<std::string> Dkms::install_argv(const ModuleSpec& spec, const std::string& kernel) const {
  std::vector<std::string> argv = {"dkms", "install", "-m", spec.name, "-v", spec.version, "-k", kernel};
  const auto trees = tree_args();
  argv.insert(argv.end(), trees.begin(), trees.end());
  if (!opt_.depmod) argv.push_back("--no-depmod");
  return argv;
}

KernelBuild Dkms::install(const ModuleSpec& spec, const std::string& kernel) {
  KernelBuild kb;
  kb.kernel = kernel;
  kb.command = exec::shell_quote(install_argv(spec, kernel));

  std::error_code ec;
  const fs::path build_dir = opt_.kernel_modules_dir / kernel / "build";
  if (!fs::exists(build_dir, ec)) { // DKMS would say so too, but only after registering things
    kb.outcome = BuildOutcome::missing_headers;
    kb.message = fmt::format("no kernel headers for {}: {} does not exist", kernel, build_dir.string());
    return kb;
  }

  remove_half_built(spec, kernel);
  run_install(kb, spec);
  return kb;
}

// Whether the files were placed; false with kb's outcome and message set when that failed, and
// false when DKMS has this version built for the kernel already (then nothing is replaced).
bool Dkms::place_prebuilt(KernelBuild& kb, const ModuleSpec& spec, const std::string& arch,
                          const std::vector<fs::path>& files) {
  const fs::path vdir = dkms_tree() / spec.name / spec.version;
  std::error_code ec;
  fs::create_directories(dkms_tree(), ec); // `dkms add` refuses a tree that does not exist yet
  if (!fs::exists(vdir / "source", ec)) {
    std::vector<std::string> argv = {"dkms", "add", "-m", spec.name, "-v", spec.version};
    const auto trees = tree_args();
    argv.insert(argv.end(), trees.begin(), trees.end());
    exec::Command add;
    add.argv = argv;
    auto r = runner_.run(add);
    if (!r || !r->ok()) {
      kb.outcome = BuildOutcome::install_failed;
      kb.message = fmt::format("`{}` {}", exec::shell_quote(argv),
                               r ? r->describe() + ": " + util::last_lines(r->output, 8) : r.error().message);
      return false;
    }
  }
  remove_half_built(spec, kb.kernel);
  const fs::path kdir = vdir / kb.kernel / arch;
  if (fs::exists(kdir, ec)) return false; // built here before: `dkms install` takes that build
  // Staged beside its place, then renamed: DKMS sees the module directory whole or not at all.
  const fs::path staging = vdir / kb.kernel / (arch + ".hpcbake-new");
  fs::remove_all(staging, ec);
  fs::create_directories(staging / "module", ec);
  for (const auto& f : files)
    if (!ec) fs::copy_file(f, staging / "module" / f.filename(), fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(staging, kdir, ec);
  if (ec) {
    fs::remove_all(staging, ec);
    kb.outcome = BuildOutcome::install_failed;
    kb.message = fmt::format("cannot put the prebuilt modules in {}: {}", kdir.string(), ec.message());
    return false;
  }
  return true;
}

KernelBuild Dkms::install_prebuilt(const ModuleSpec& spec, const std::string& kernel, const std::string& arch,
                                   const std::vector<fs::path>& files) {
  KernelBuild kb;
  kb.kernel = kernel;
  kb.command = exec::shell_quote(install_argv(spec, kernel));
  if (arch.empty() || arch.find('/') != std::string::npos || arch == "..") {
    kb.outcome = BuildOutcome::install_failed;
    kb.message = fmt::format("'{}' is not an architecture", arch);
    return kb;
  }
  const bool placed = place_prebuilt(kb, spec, arch, files);
  if (!placed && !kb.message.empty()) return kb;
  run_install(kb, spec);
  kb.prebuilt = placed && kb.ok();
  std::error_code ec;
  if (placed && !kb.dkms_installed) fs::remove_all(dkms_tree() / spec.name / spec.version / kernel / arch, ec);
  return kb;
}

// `dkms install` for kb.kernel (which builds first unless the version is built for it), read by
// its exit status, then the installed modules checked.
void Dkms::run_install(KernelBuild& kb, const ModuleSpec& spec) {
  const std::string& kernel = kb.kernel;
  std::error_code ec;
  exec::Command cmd;
  cmd.argv = install_argv(spec, kernel);
  if (opt_.signing) {
    cmd.env = {"sign_file=" + opt_.sign_file.string(), "mok_signing_key=" + opt_.signing->key.string(),
               "mok_certificate=" + opt_.signing->cert_der.string()};
    if (!opt_.sign_tool.empty()) cmd.env.push_back("sign_tool=" + opt_.sign_tool.string());
  } else if (!opt_.dkms_signs) {
    cmd.env = {"sign_file=/nonexistent/hpcbake-signing-is-off"};
  }
  auto run = runner_.run(cmd);
  if (!run) {
    kb.outcome = BuildOutcome::install_failed;
    kb.message = run.error().message;
    return;
  }
  const exec::Completed& c = *run;
  kb.dkms_installed = c.ok();
  if (c.ok()) {
    kb.outcome = BuildOutcome::installed;
  } else if (c.exit_code == 5 && c.output.find("already installed") != std::string::npos) {
    kb.outcome = BuildOutcome::already_installed;
  } else if (c.exit_code == 77) {
    kb.outcome = BuildOutcome::excluded;
    kb.message =
        fmt::format("DKMS did not build {} for {}: its dkms.conf BUILD_EXCLUSIVE_* settings leave this kernel out, "
                    "so the module will be missing when the machine boots it",
                    spec.name, kernel);
    return;
  } else if (c.output.find("kernel headers for kernel") != std::string::npos) {
    kb.outcome = BuildOutcome::missing_headers;
    kb.message = fmt::format("DKMS found no kernel headers for {}: {}", kernel, util::last_lines(c.output, 3));
    return;
  } else if (c.exit_code == 10) {
    record_build_failure(kb, spec, c);
    return;
  } else {
    kb.outcome = BuildOutcome::install_failed;
    kb.message = fmt::format("`{}` {}: {}", kb.command, c.describe(), util::last_lines(c.output, 8));
    return;
  }

  // DKMS builds in <tree>/NAME/VERSION/build and deletes it once the modules are copied out. A
  // DKMS killed in between leaves it (the sources and every object file: hundreds of MB for
  // NVIDIA's modules), and since the module then counts as built, no later DKMS run deletes it.
  // After a successful run it is only that leftover.
  fs::remove_all(dkms_tree() / spec.name / spec.version / "build", ec);

  check_installed(kb, spec);
}

namespace {

// Each module file's vermagic and, when signing, its signer (check_module); the first that fails
// fails the kernel's build. Else they are the build's modules, and the message says `where`.
void accept_modules(KernelBuild& kb, const std::vector<fs::path>& files, const std::optional<std::string>& signer,
                    const std::string& where) {
  for (const auto& ko : files) {
    if (auto s = check_module(ko, kb.kernel, signer); !s) {
      kb.outcome = BuildOutcome::install_failed;
      kb.message = s.error().message;
      return;
    }
    kb.modules.push_back(ko);
  }
  kb.message = fmt::format("{} module(s) {}{}", kb.modules.size(), where,
                           signer ? fmt::format(", signed by '{}'", *signer) : std::string());
}

} // namespace

// Check what is installed, module by module: it is what the kernel will load.
void Dkms::check_installed(KernelBuild& kb, const ModuleSpec& spec) const {
  std::error_code ec;
  const std::optional<std::string> signer =
      opt_.signing ? std::optional<std::string>(opt_.signing->subject) : std::nullopt;
  const fs::path dir = install_tree() / kb.kernel / "updates" / "dkms";
  if (spec.modules.empty()) { // a package's own dkms.conf names them: every module DKMS built
    check_built(kb, spec, signer);
    return;
  }
  std::vector<fs::path> files;
  for (const auto& m : spec.modules) {
    fs::path found;
    for (const char* ext : {".ko", ".ko.xz", ".ko.zst", ".ko.gz"})
      if (fs::exists(dir / (m + ext), ec)) {
        found = dir / (m + ext);
        break;
      }
    if (found.empty()) {
      kb.outcome = BuildOutcome::install_failed;
      kb.message = fmt::format("DKMS reported success but {} is not in {}", m, dir.string());
      return;
    }
    files.push_back(found);
  }
  accept_modules(kb, files, signer, fmt::format("in {}", dir.string()));
}

// Every module DKMS built for kb.kernel (<dkms_tree>/NAME/VERSION/KERNEL/ARCH/module/, the copies it
// installs), its vermagic and, when signing, its signer: for sources whose dkms.conf alone names them.
void Dkms::check_built(KernelBuild& kb, const ModuleSpec& spec, const std::optional<std::string>& signer) const {
  std::error_code ec;
  const fs::path kdir = dkms_tree() / spec.name / spec.version / kb.kernel;
  std::vector<fs::path> found;
  for (fs::directory_iterator a(kdir, ec), end; !ec && a != end; a.increment(ec))
    for (fs::directory_iterator m(a->path() / "module", ec), mend; !ec && m != mend; m.increment(ec))
      if (m->path().filename().string().find(".ko") != std::string::npos) found.push_back(m->path());
  std::sort(found.begin(), found.end());
  if (found.empty()) {
    kb.outcome = BuildOutcome::install_failed;
    kb.message = fmt::format("DKMS reported success but built no module in {}/*/module", kdir.string());
    return;
  }
  accept_modules(kb, found, signer, fmt::format("built in {}", kdir.string()));
}

// DKMS exit 10: the module's make failed. DKMS leaves make.log in the build directory on failure
// (and moves it into the kernel's log/ directory on success).
void Dkms::record_build_failure(KernelBuild& kb, const ModuleSpec& spec, const exec::Completed& c) const {
  kb.outcome = BuildOutcome::build_failed;
  kb.make_log = dkms_tree() / spec.name / spec.version / "build" / "make.log";
  kb.message = fmt::format("{} {} failed to build for {} ({})", spec.name, spec.version, kb.kernel, c.describe());
  const std::string log = util::read_file(kb.make_log).value_or("");
  kb.make_log_tail = cut_lines(util::last_lines(log, 12), 200);
  kb.first_error = first_error(log);
  if (opt_.log_dir.empty()) return;
  // DKMS builds every kernel in the same directory: the next kernel's build replaces this log.
  const fs::path kept = opt_.log_dir / fmt::format("{}-{}-{}.make.log", spec.name, spec.version, kb.kernel);
  std::error_code ec;
  fs::create_directories(opt_.log_dir, ec);
  if (auto w = util::write_file_atomic(kept, log); w)
    kb.make_log = kept;
  else // roll_back then keeps DKMS's build directory, where the log still is
    kb.message += fmt::format(" (the log could not be kept in {}: {})", opt_.log_dir.string(), w.error().message);
}

Status Dkms::roll_back(const ModuleSpec& spec, const std::vector<KernelBuild>& builds, bool keep_source) {
  if (opt_.log_dir.empty()) return {};
  std::error_code ec;
  std::vector<std::string> left;
  auto dkms_remove = [&](std::vector<std::string> what) {
    std::vector<std::string> argv = {"dkms", "remove", "-m", spec.name, "-v", spec.version};
    argv.insert(argv.end(), what.begin(), what.end());
    const auto trees = tree_args();
    argv.insert(argv.end(), trees.begin(), trees.end());
    if (!opt_.depmod) argv.push_back("--no-depmod");
    exec::Command cmd;
    cmd.argv = argv;
    auto r = runner_.run(cmd);
    return r && r->ok();
  };
  // Kept registered: a version some kernel still has built, whether this run found it installed
  // or an earlier one built it for a kernel that is no longer a target (the kernel the machine
  // falls back to). And a log that could not be copied out keeps DKMS's build directory.
  bool keep_registered = false;
  std::vector<std::string> this_run;
  for (const auto& b : builds) {
    this_run.push_back(b.kernel);
    if (b.outcome == BuildOutcome::already_installed) keep_registered = true;
    if (!b.make_log.empty() && b.make_log.parent_path() != opt_.log_dir) keep_registered = true;
    if (!b.dkms_installed || b.outcome == BuildOutcome::already_installed) continue;
    if (!dkms_remove({"-k", b.kernel})) left.push_back(fmt::format("the modules installed for {}", b.kernel));
  }
  const fs::path vdir = dkms_tree() / spec.name / spec.version;
  for (fs::directory_iterator it(vdir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string k = it->path().filename().string();
    if (k == "build" || k == "source" || std::find(this_run.begin(), this_run.end(), k) != this_run.end()) continue;
    for (fs::recursive_directory_iterator m(it->path(), ec), mend; !ec && m != mend; m.increment(ec))
      if (m->path().parent_path().filename() == "module" &&
          m->path().filename().string().find(".ko") != std::string::npos)
        keep_registered = true;
  }
  ec.clear();
  if (!keep_registered) {
    // `remove --all` on a version that is added but built for no kernel unregisters it; a build
    // directory DKMS left behind (hundreds of MB for NVIDIA's modules) goes with its tree.
    dkms_remove({"--all"});
    fs::remove_all(dkms_tree() / spec.name / spec.version, ec);
    if (fs::is_directory(dkms_tree() / spec.name, ec) && fs::is_empty(dkms_tree() / spec.name, ec))
      fs::remove(dkms_tree() / spec.name, ec);
    if (!keep_source) fs::remove_all(source_dir(spec), ec);
    if (fs::exists(dkms_tree() / spec.name / spec.version, ec))
      left.push_back((dkms_tree() / spec.name / spec.version).string());
  }
  if (left.empty()) return {};
  return fail(ErrorKind::build,
              fmt::format("{} {}: the failed build could not be undone completely: {} remain", spec.name, spec.version,
                          util::join(left, ", ")),
              fmt::format("remove them by hand: `dkms remove -m {} -v {} --all`", spec.name, spec.version));
}

std::string summarize(const std::vector<KernelBuild>& builds) {
  std::string out;
  for (const auto& b : builds) {
    out += fmt::format("  {:<28} {}: {}\n", b.kernel, to_string(b.outcome), b.message);
    if (!b.note.empty()) out += fmt::format("    {}\n", b.note);
    if (!b.first_error.empty()) out += fmt::format("    first error: {}\n", b.first_error);
    if (!b.make_log_tail.empty()) {
      out += fmt::format("    last lines of {}:\n", b.make_log.string());
      std::istringstream in(b.make_log_tail);
      for (std::string line; std::getline(in, line);)
        out += "    | " + line + "\n";
    }
  }
  return out;
}

Status overall(const ModuleSpec& spec, const std::vector<KernelBuild>& builds) {
  std::vector<std::string> bad, hints;
  auto hint = [&](std::string h) {
    if (std::find(hints.begin(), hints.end(), h) == hints.end()) hints.push_back(std::move(h));
  };
  for (const auto& b : builds) {
    if (b.ok()) continue;
    bad.push_back(b.kernel);
    switch (b.outcome) {
    case BuildOutcome::missing_headers:
      hint(fmt::format("install the headers of {} (Debian/Ubuntu: linux-headers-{}; RHEL: kernel-devel-{})", b.kernel,
                       b.kernel, b.kernel));
      break;
    case BuildOutcome::build_failed:
      hint(fmt::format("the full log is {}", b.make_log.string()));
      hint(fmt::format("{} {} does not build for kernel {}: pin a version of it that supports that kernel, or hold "
                       "the kernel at one this version supports (docs/kernels.md)",
                       spec.name, spec.version, b.kernel));
      break;
    case BuildOutcome::excluded:
      hint("drop that kernel from the targets, or use a driver version that supports it");
      break;
    default:
      hint("run the dkms command above by hand to see its full output");
      break;
    }
  }
  if (bad.empty()) return {};
  return fail(ErrorKind::build,
              fmt::format("{} {} is not installed for kernel(s) {}:\n{}", spec.name, spec.version,
                          util::join(bad, ", "), summarize(builds)),
              util::join(hints, "; "));
}

Result<AutoinstallOff> AutoinstallOff::hold(const util::HostFs& host) {
  HPCBAKE_TRY_ASSIGN(auto path, host.resolve_checked(kNoAutoinstall));
  std::error_code ec;
  if (fs::exists(path, ec)) {
    std::string first;
    if (auto text = host.read(kNoAutoinstall, util::host_file::config); text) first = text->substr(0, text->find('\n'));
    if (first != kAutoinstallOffMark) return AutoinstallOff({}); // the administrator's: it stays
  }
  fs::create_directories(path.parent_path(), ec);
  HPCBAKE_TRY(util::write_file_atomic(path, std::string(kAutoinstallOffMark) +
                                                "\n# hpcbake installs the modules itself, then removes this file.\n"));
  return AutoinstallOff(path);
}

AutoinstallOff::~AutoinstallOff() {
  std::error_code ec;
  if (!path_.empty()) fs::remove(path_, ec);
}

std::vector<std::string> dkms_build_depends(const std::string& conf) {
  static const std::regex line(R"(^\s*BUILD_DEPENDS(\[[0-9]+\])?=["']?([A-Za-z0-9._+~:-]+)["']?\s*$)");
  std::vector<std::string> out;
  std::istringstream in(conf);
  for (std::string l; std::getline(in, l);)
    if (std::smatch m; std::regex_match(l, m, line)) out.push_back(m[2].str());
  return out;
}

std::vector<DkmsSource> dkms_build_order(std::vector<DkmsSource> todo) {
  std::vector<DkmsSource> out;
  while (!todo.empty()) {
    auto ready = std::find_if(todo.begin(), todo.end(), [&](const DkmsSource& d) {
      return std::none_of(d.depends.begin(), d.depends.end(), [&](const std::string& dep) {
        return std::any_of(todo.begin(), todo.end(), [&](const DkmsSource& o) { return o.name == dep; });
      });
    });
    if (ready == todo.end()) ready = todo.begin();
    out.push_back(std::move(*ready));
    todo.erase(ready);
  }
  return out;
}

} // namespace hpcbake::driver
