#include "driver/module_build.hpp"

#include "archive/extract.hpp"
#include "archive/makeself.hpp"
#include "util/atomic_file.hpp"
#include "util/datadir.hpp"

#include <fmt/format.h>

#include <algorithm>

#include <unistd.h>

namespace hpcbake::driver {

namespace fs = std::filesystem;

SourceKind source_kind(const fs::path& source) {
  std::error_code ec;
  if (fs::is_directory(source, ec)) return SourceKind::directory;
  // A script ("#!") is read as a makeself archive, so that a damaged header is reported by
  // field and line; anything else is an archive for libarchive.
  if (archive::looks_like_makeself(source)) return SourceKind::makeself;
  return SourceKind::archive;
}

namespace {

// The directory holding the module sources inside an extracted tree.
Result<fs::path> module_root(const fs::path& tree, const std::string& subdir, const fs::path& source) {
  std::error_code ec;
  if (!subdir.empty()) {
    const fs::path p = tree / subdir;
    if (subdir.find("..") != std::string::npos || !fs::is_directory(p, ec))
      return fail(ErrorKind::usage, fmt::format("{} has no directory '{}'", source.string(), subdir),
                  "name the directory that holds the module's Kbuild/Makefile (--subdir)");
    return p;
  }
  // An archive with one top-level directory (foo-1.0/...) means that directory.
  fs::path only;
  int count = 0;
  for (const auto& e : fs::directory_iterator(tree, ec)) {
    ++count;
    only = e.path();
  }
  if (count == 1 && fs::is_directory(only, ec) && !fs::is_symlink(only, ec)) return only;
  return tree;
}

// One kernel: the prebuilt modules when there are some, else (or when they fail) DKMS builds.
KernelBuild install_for(const BuildRequest& r, Dkms& dkms, const std::string& kernel) {
  std::string why_not;
  if (auto p = r.prebuilt.find(kernel); p != r.prebuilt.end()) {
    KernelBuild kb = dkms.install_prebuilt(r.spec, kernel, p->second.arch, p->second.files);
    if (kb.ok()) {
      kb.note = kb.prebuilt ? fmt::format("prebuilt, from {}; nothing compiled", p->second.from)
                            : "already built in the DKMS tree; the prebuilt modules were not needed";
      return kb;
    }
    why_not = fmt::format("their install failed: {}", kb.message);
  } else if (auto n = r.not_prebuilt.find(kernel); n != r.not_prebuilt.end()) {
    why_not = n->second;
  }
  KernelBuild kb = dkms.install(r.spec, kernel);
  if (!why_not.empty()) kb.note = fmt::format("built with DKMS; prebuilt modules not used: {}", why_not);
  return kb;
}

} // namespace

Result<std::vector<KernelBuild>> build_module(const BuildRequest& r, Dkms& dkms, const std::string& conf_template) {
  std::error_code ec;
  if (!fs::exists(r.source, ec))
    return fail(ErrorKind::usage, fmt::format("{}: module source not found", r.source.string()),
                "give a directory, a tarball or a makeself .run file");
  if (r.kernels.empty()) return fail(ErrorKind::usage, "no target kernel to build for");

  fs::path src_dir;
  fs::path scratch;
  const SourceKind kind = source_kind(r.source);
  if (kind == SourceKind::directory) {
    // A plain directory is taken as it is (or its --subdir); only archives get the
    // single-top-level-directory rule of module_root.
    src_dir = r.source;
    if (!r.subdir.empty()) {
      HPCBAKE_TRY_ASSIGN(auto root, module_root(r.source, r.subdir, r.source));
      src_dir = root;
    }
  } else {
    scratch = r.work_dir / fmt::format("extract-{}-{}", r.spec.name, ::getpid());
    fs::remove_all(scratch, ec);
    // A process killed while extracting left its scratch tree (and the extraction's staging
    // directory beside it): nothing else removes them.
    util::remove_stale_pid_entries(r.work_dir, fmt::format("extract-{}-", r.spec.name));
    fs::create_directories(r.work_dir, ec);
    archive::ExtractOptions xo; // defaults: no devices, no setuid, bomb limits
    auto extracted = kind == SourceKind::makeself ? archive::extract_makeself(r.source, scratch, xo)
                                                  : archive::extract_file(r.source, scratch, xo);
    auto root = extracted ? module_root(scratch, r.subdir, r.source) : std::unexpected(extracted.error());
    if (!root) {
      fs::remove_all(scratch, ec); // a half-extracted tree is not left for the next run
      return std::unexpected(root.error());
    }
    src_dir = *root;
  }
  // Sources a package put where DKMS reads them (/usr/src/NAME-VERSION) are used in place.
  const bool in_place = kind == SourceKind::directory && fs::equivalent(src_dir, dkms.source_dir(r.spec), ec);
  auto registered = in_place ? Status{} : dkms.register_source(src_dir, r.spec, conf_template);
  if (!scratch.empty()) fs::remove_all(scratch, ec);
  if (!registered) return std::unexpected(registered.error());

  std::vector<KernelBuild> builds;
  for (const auto& k : r.kernels)
    builds.push_back(install_for(r, dkms, k));
  // One kernel failed: nothing of this version stays half-installed (Dkms::roll_back).
  if (std::any_of(builds.begin(), builds.end(), [](const KernelBuild& b) { return !b.ok(); }))
    if (auto undone = dkms.roll_back(r.spec, builds, in_place); !undone)
      for (auto& b : builds)
        if (!b.ok()) b.message += fmt::format(" ({}; {})", undone.error().message, undone.error().hint);
  return builds;
}

} // namespace hpcbake::driver
