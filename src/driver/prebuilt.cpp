#include "driver/prebuilt.hpp"

#include "util/cleanup.hpp"

#include "util/atomic_file.hpp"
#include "util/clock.hpp"
#include "util/fd.hpp"
#include "util/json.hpp"
#include "util/sha256.hpp"
#include "util/strings.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <set>

namespace hpcbake::driver {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t kMaxManifestBytes = 1u << 20;
constexpr const char* kManifestMember = "manifest.json";
constexpr const char* kRemake = "make it again on the build host with 'hpcbake bundle modules'";

using ReadArchive = util::Owned<archive, archive_read_free>;

// A name that is one path component and nothing else: no '/', not "." or "..", no control or
// shell characters, so that it can never name a place outside the directory it is joined to.
bool plain_component(std::string_view s) {
  if (s.empty() || s.size() > 255 || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-' || c == '+' || c == '~';
  });
}

bool module_file(std::string_view f) {
  return plain_component(f) &&
         (f.ends_with(".ko") || f.ends_with(".ko.xz") || f.ends_with(".ko.zst") || f.ends_with(".ko.gz"));
}

bool hex64(std::string_view s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Error bad(std::string_view where, std::string what) {
  return Error{ErrorKind::usage, fmt::format("prebuilt modules {}: {}", where, what), kRemake};
}

// A string member of `j`; an error naming it when absent or not a string (or empty, unless allowed).
Result<std::string> str(const json& j, const char* key, std::string_view where, std::string_view in,
                        bool may_be_empty = false) {
  if (!j.contains(key) || !j[key].is_string())
    return std::unexpected(bad(where, fmt::format("{}: \"{}\" is missing or not a string", in, key)));
  std::string v = j[key];
  if (v.empty() && !may_be_empty) return std::unexpected(bad(where, fmt::format("{}: \"{}\" is empty", in, key)));
  return v;
}

Result<PrebuiltModule> parse_module(const json& j, std::string_view where, const std::string& in) {
  if (!j.is_object()) return std::unexpected(bad(where, in + " is not an object"));
  PrebuiltModule m;
  HPCBAKE_TRY_ASSIGN(m.name, str(j, "name", where, in));
  HPCBAKE_TRY_ASSIGN(m.file, str(j, "file", where, in));
  HPCBAKE_TRY_ASSIGN(m.sha256, str(j, "sha256", where, in));
  HPCBAKE_TRY_ASSIGN(m.vermagic, str(j, "vermagic", where, in));
  HPCBAKE_TRY_ASSIGN(m.signer, str(j, "signer", where, in, true));
  HPCBAKE_TRY_ASSIGN(m.sig_key, str(j, "sig_key", where, in, true));
  if (!j.contains("size") || !j["size"].is_number_unsigned())
    return std::unexpected(bad(where, in + ": \"size\" is missing or not a byte count"));
  m.size = j["size"].get<std::uint64_t>();
  if (!module_file(m.file))
    return std::unexpected(
        bad(where, fmt::format("{}: file '{}' is not a module file name (NAME.ko[.xz|.zst|.gz])", in, m.file)));
  if (!hex64(m.sha256)) return std::unexpected(bad(where, in + ": \"sha256\" is not 64 lower-case hex digits"));
  return m;
}

Result<PrebuiltPackage> parse_package(const json& j, std::string_view where, const std::string& in) {
  if (!j.is_object()) return std::unexpected(bad(where, in + " is not an object"));
  PrebuiltPackage p;
  HPCBAKE_TRY_ASSIGN(p.component, str(j, "component", where, in));
  HPCBAKE_TRY_ASSIGN(p.dkms_name, str(j, "dkms_name", where, in));
  HPCBAKE_TRY_ASSIGN(p.version, str(j, "version", where, in));
  HPCBAKE_TRY_ASSIGN(p.source, str(j, "source", where, in));
  HPCBAKE_TRY_ASSIGN(p.source_sha256, str(j, "source_sha256", where, in));
  if (!plain_component(p.dkms_name) || !plain_component(p.version))
    return std::unexpected(bad(where, fmt::format("{}: DKMS name '{}' or version '{}' cannot be a directory name", in,
                                                  p.dkms_name, p.version)));
  if (!hex64(p.source_sha256))
    return std::unexpected(bad(where, in + ": \"source_sha256\" is not 64 lower-case hex digits"));
  if (!j.contains("modules") || !j["modules"].is_array() || j["modules"].empty())
    return std::unexpected(bad(where, in + ": \"modules\" is missing or empty"));
  std::set<std::string> files;
  for (std::size_t i = 0; i < j["modules"].size(); ++i) {
    HPCBAKE_TRY_ASSIGN(auto m, parse_module(j["modules"][i], where, fmt::format("{}.modules[{}]", in, i)));
    if (!files.insert(m.file).second)
      return std::unexpected(bad(where, fmt::format("{}: module file '{}' is listed twice", in, m.file)));
    p.modules.push_back(std::move(m));
  }
  return p;
}

// The manifest's header fields: format, schema, kernel, arch, distro, signing.
Status parse_header(const json& j, std::string_view where, PrebuiltManifest& m) {
  // Not j.value(): it throws on a "format" that is not a string (fuzz/regressions/prebuilt).
  if (util::string_member(j, "format") != kPrebuiltFormat)
    return std::unexpected(
        bad(where, fmt::format("not a prebuilt-modules file (\"format\" is not \"{}\")", kPrebuiltFormat)));
  if (!j.contains("schema") || !j["schema"].is_number_integer() || j["schema"].get<int>() != kPrebuiltSchema)
    return fail(ErrorKind::unsupported,
                fmt::format("prebuilt modules {}: schema {} is not the one this hpcbake reads ({})", where,
                            j.contains("schema") ? j["schema"].dump() : "(none)", kPrebuiltSchema),
                "make it with the same hpcbake version as the nodes run");
  HPCBAKE_TRY_ASSIGN(m.created_by, str(j, "created_by", where, "manifest", true));
  HPCBAKE_TRY_ASSIGN(m.kernel, str(j, "kernel", where, "manifest"));
  HPCBAKE_TRY_ASSIGN(m.arch, str(j, "arch", where, "manifest"));
  HPCBAKE_TRY_ASSIGN(m.distro, str(j, "distro", where, "manifest"));
  if (!plain_component(m.kernel))
    return std::unexpected(bad(where, fmt::format("kernel '{}' is not a release", m.kernel)));
  if (!j.contains("signing") || !j["signing"].is_object() || !j["signing"].contains("signed") ||
      !j["signing"]["signed"].is_boolean())
    return std::unexpected(bad(where, "manifest: \"signing\" is missing or has no boolean \"signed\""));
  m.is_signed = j["signing"]["signed"].get<bool>();
  if (m.is_signed) {
    HPCBAKE_TRY_ASSIGN(m.signer, str(j["signing"], "signer", where, "signing"));
    HPCBAKE_TRY_ASSIGN(m.serial, str(j["signing"], "serial", where, "signing"));
  }
  return {};
}

} // namespace

const PrebuiltPackage* PrebuiltManifest::find(std::string_view dkms_name) const {
  for (const auto& p : packages)
    if (p.dkms_name == dkms_name) return &p;
  return nullptr;
}

std::string prebuilt_member(const PrebuiltPackage& package, const PrebuiltModule& module) {
  return fmt::format("modules/{}/{}/{}", package.dkms_name, package.version, module.file);
}

json to_json(const PrebuiltManifest& m) {
  json packages = json::array();
  for (const auto& p : m.packages) {
    json mods = json::array();
    for (const auto& x : p.modules)
      mods.push_back({{"name", x.name},
                      {"file", x.file},
                      {"sha256", x.sha256},
                      {"size", x.size},
                      {"vermagic", x.vermagic},
                      {"signer", x.signer},
                      {"sig_key", x.sig_key}});
    packages.push_back({{"component", p.component},
                        {"dkms_name", p.dkms_name},
                        {"version", p.version},
                        {"source", p.source},
                        {"source_sha256", p.source_sha256},
                        {"modules", mods}});
  }
  json signing = {{"signed", m.is_signed}};
  if (m.is_signed) {
    signing["signer"] = m.signer;
    signing["serial"] = m.serial;
  }
  return {{"format", kPrebuiltFormat},
          {"schema", kPrebuiltSchema},
          {"created_by", m.created_by},
          {"kernel", m.kernel},
          {"arch", m.arch},
          {"distro", m.distro},
          {"signing", signing},
          {"packages", packages}};
}

Result<PrebuiltManifest> parse_prebuilt_manifest(std::string_view text, std::string_view where) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::unexpected(bad(where, "manifest.json is not a JSON object"));
  PrebuiltManifest m;
  HPCBAKE_TRY(parse_header(j, where, m));
  if (!j.contains("packages") || !j["packages"].is_array() || j["packages"].empty())
    return std::unexpected(bad(where, "manifest: \"packages\" is missing or empty"));
  std::set<std::string> names;
  for (std::size_t i = 0; i < j["packages"].size(); ++i) {
    HPCBAKE_TRY_ASSIGN(auto p, parse_package(j["packages"][i], where, fmt::format("packages[{}]", i)));
    if (!names.insert(p.dkms_name).second)
      return std::unexpected(bad(where, fmt::format("DKMS package '{}' is listed twice", p.dkms_name)));
    m.packages.push_back(std::move(p));
  }
  return m;
}

namespace {

Status write_entry(archive* a, const std::string& name, std::uint64_t size,
                   const std::function<Status(archive*)>& body) {
  util::Owned<archive_entry, archive_entry_free> e(archive_entry_new());
  archive_entry_set_pathname(e.get(), name.c_str());
  archive_entry_set_size(e.get(), static_cast<la_int64_t>(size));
  archive_entry_set_filetype(e.get(), AE_IFREG);
  archive_entry_set_perm(e.get(), 0644);
  archive_entry_set_mtime(e.get(), util::source_date_epoch().value_or(0), 0);
  if (archive_write_header(a, e.get()) != ARCHIVE_OK)
    return fail(ErrorKind::internal,
                fmt::format("prebuilt modules: cannot write {}: {}", name, archive_error_string(a)));
  return body(a);
}

// Copies `src` as `name`, hashing what it copies: the bytes written must be the manifest's.
Status write_module(archive* a, const std::string& name, const fs::path& src, const PrebuiltModule& entry) {
  const util::Fd fd(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd)
    return fail(ErrorKind::internal,
                fmt::format("prebuilt modules: cannot open {}: {}", src.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) != entry.size)
    return fail(ErrorKind::internal, fmt::format("prebuilt modules: {} changed while it was packed ({} bytes, "
                                                 "expected {})",
                                                 src.string(), st.st_size, entry.size));
  return write_entry(a, name, entry.size, [&](archive* ar) -> Status {
    std::vector<char> buf(1 << 20);
    util::Sha256 h;
    std::uint64_t done = 0;
    while (done < entry.size) {
      const ssize_t n = ::read(fd.get(), buf.data(), std::min<std::size_t>(buf.size(), entry.size - done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return fail(ErrorKind::internal, fmt::format("prebuilt modules: {} ended after {} of {} bytes while it was "
                                                     "packed",
                                                     src.string(), done, entry.size));
      HPCBAKE_TRY(h.update(buf.data(), static_cast<std::size_t>(n)));
      if (archive_write_data(ar, buf.data(), static_cast<std::size_t>(n)) != n)
        return fail(ErrorKind::internal,
                    fmt::format("prebuilt modules: writing {}: {}", name, archive_error_string(ar)));
      done += static_cast<std::uint64_t>(n);
    }
    HPCBAKE_TRY_ASSIGN(auto hex, h.hex());
    if (hex != entry.sha256)
      return fail(ErrorKind::internal, fmt::format("prebuilt modules: {} changed while it was packed (SHA-256 {} , "
                                                   "expected {})",
                                                   src.string(), hex, entry.sha256));
    return {};
  });
}

Status write_members(archive* a, const PrebuiltManifest& m, const std::map<std::string, fs::path>& files) {
  const std::string text = json(to_json(m)).dump(2) + "\n";
  HPCBAKE_TRY(write_entry(a, kManifestMember, text.size(), [&](archive* ar) -> Status {
    if (archive_write_data(ar, text.data(), text.size()) != static_cast<la_ssize_t>(text.size()))
      return fail(ErrorKind::internal, "prebuilt modules: writing manifest.json failed");
    return {};
  }));
  for (const auto& p : m.packages)
    for (const auto& mod : p.modules) {
      const std::string member = prebuilt_member(p, mod);
      auto it = files.find(member);
      if (it == files.end())
        return fail(ErrorKind::internal, fmt::format("prebuilt modules: no file given for {}", member));
      HPCBAKE_TRY(write_module(a, member, it->second, mod));
    }
  return {};
}

} // namespace

Status write_prebuilt(const fs::path& out, const PrebuiltManifest& m, const std::map<std::string, fs::path>& files) {
  // The manifest must read back as written: the same rules as a node applies.
  HPCBAKE_TRY(parse_prebuilt_manifest(json(to_json(m)).dump(), out.string()));
  const fs::path tmp = out.string() + fmt::format(".tmp.{}", ::getpid());
  util::remove_stale_pid_entries(out.parent_path().empty() ? fs::path(".") : out.parent_path(),
                                 out.filename().string() + ".tmp.");
  util::Owned<archive, archive_write_free> a(archive_write_new());
  archive_write_set_format_pax_restricted(a.get());
  if (archive_write_open_filename(a.get(), tmp.c_str()) != ARCHIVE_OK)
    return fail(ErrorKind::internal,
                fmt::format("prebuilt modules: cannot create {}: {}", tmp.string(), archive_error_string(a.get())),
                "check that the directory exists and is writable");
  auto written = write_members(a.get(), m, files);
  if (written && archive_write_close(a.get()) != ARCHIVE_OK)
    written = fail(ErrorKind::internal,
                   fmt::format("prebuilt modules: closing {}: {}", tmp.string(), archive_error_string(a.get())));
  a.reset();
  if (written) written = util::sync_path(tmp, O_RDONLY);
  std::error_code ec;
  if (written) {
    fs::rename(tmp, out, ec);
    if (ec)
      written = fail(ErrorKind::internal, fmt::format("prebuilt modules: cannot rename {} to {}: {}", tmp.string(),
                                                      out.string(), ec.message()));
  }
  if (!written) fs::remove(tmp, ec);
  return written;
}

namespace {

Result<ReadArchive> open_tar(const fs::path& bundle) {
  ReadArchive a(archive_read_new());
  archive_read_support_format_tar(a.get());
  if (archive_read_open_filename(a.get(), bundle.c_str(), 1 << 20) != ARCHIVE_OK)
    return fail(ErrorKind::usage,
                fmt::format("prebuilt modules {}: {}", bundle.string(), archive_error_string(a.get())),
                "check the path: the file is made by 'hpcbake bundle modules'");
  return a;
}

// The next header; false at the end. A damaged or truncated tar is an error.
Result<bool> next(archive* a, archive_entry** entry, const fs::path& bundle) {
  const int rc = archive_read_next_header(a, entry);
  if (rc == ARCHIVE_EOF) return false;
  if (rc != ARCHIVE_OK)
    return std::unexpected(
        bad(bundle.string(), fmt::format("the tar is truncated or damaged: {}", archive_error_string(a))));
  return true;
}

// The first member, manifest.json, read and parsed.
Result<PrebuiltManifest> read_manifest_member(archive* a, const fs::path& bundle) {
  archive_entry* e = nullptr;
  HPCBAKE_TRY_ASSIGN(bool more, next(a, &e, bundle));
  if (!more) return std::unexpected(bad(bundle.string(), "the file holds no member (empty, or not a tar)"));
  if (std::string_view(archive_entry_pathname(e)) != kManifestMember || archive_entry_filetype(e) != AE_IFREG)
    return std::unexpected(
        bad(bundle.string(), fmt::format("the first member is '{}', not manifest.json", archive_entry_pathname(e))));
  if (archive_entry_size(e) < 0 || static_cast<std::uint64_t>(archive_entry_size(e)) > kMaxManifestBytes)
    return std::unexpected(bad(bundle.string(), "manifest.json is larger than 1 MiB"));
  std::string text(static_cast<std::size_t>(archive_entry_size(e)), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const la_ssize_t n = archive_read_data(a, text.data() + got, text.size() - got);
    if (n <= 0)
      return std::unexpected(bad(bundle.string(), fmt::format("manifest.json is truncated after {} bytes", got)));
    got += static_cast<std::size_t>(n);
  }
  return parse_prebuilt_manifest(text, bundle.string());
}

struct Expected {
  const PrebuiltModule* module = nullptr;
  bool seen = false;
};

// Streams the current member to `dest` (created exclusively, never through a link), hashing it;
// it must have the manifest's size and SHA-256.
Status copy_member(archive* a, const fs::path& bundle, const std::string& member, const PrebuiltModule& m,
                   const fs::path& dest) {
  std::error_code ec;
  fs::create_directories(dest.parent_path(), ec);
  util::Fd fd(::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd)
    return fail(ErrorKind::internal,
                fmt::format("prebuilt modules: cannot create {}: {}", dest.string(), std::strerror(errno)));
  std::vector<char> buf(1 << 20);
  util::Sha256 h;
  std::uint64_t bytes = 0;
  la_ssize_t n;
  while ((n = archive_read_data(a, buf.data(), buf.size())) > 0) {
    bytes += static_cast<std::uint64_t>(n);
    if (bytes > m.size) break;
    HPCBAKE_TRY(h.update(buf.data(), static_cast<std::size_t>(n)));
    for (la_ssize_t off = 0; off < n;) {
      const ssize_t w = ::write(fd.get(), buf.data() + off, static_cast<std::size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0)
        return fail(ErrorKind::internal,
                    fmt::format("prebuilt modules: writing {}: {}", dest.string(), std::strerror(errno)));
      off += w;
    }
  }
  if (n < 0)
    return std::unexpected(
        bad(bundle.string(), fmt::format("{} is truncated or damaged: {}", member, archive_error_string(a))));
  if (fd.close() != 0)
    return fail(ErrorKind::internal,
                fmt::format("prebuilt modules: writing {}: {}", dest.string(), std::strerror(errno)));
  if (bytes != m.size)
    return std::unexpected(bad(bundle.string(), bytes > m.size ? fmt::format("{} holds more than the {} bytes the "
                                                                             "manifest says",
                                                                             member, m.size)
                                                               : fmt::format("{} holds {} bytes, the manifest says {}",
                                                                             member, bytes, m.size)));
  HPCBAKE_TRY_ASSIGN(auto hex, h.hex());
  if (hex != m.sha256)
    return std::unexpected(bad(bundle.string(), fmt::format("{} has SHA-256 {}, the manifest says {}: the file is "
                                                            "damaged or was altered",
                                                            member, hex, m.sha256)));
  return {};
}

} // namespace

Result<PrebuiltManifest> read_prebuilt_manifest(const fs::path& bundle) {
  HPCBAKE_TRY_ASSIGN(auto a, open_tar(bundle));
  return read_manifest_member(a.get(), bundle);
}

Result<PrebuiltManifest> extract_prebuilt(const fs::path& bundle, const fs::path& dir) {
  HPCBAKE_TRY_ASSIGN(auto a, open_tar(bundle));
  HPCBAKE_TRY_ASSIGN(auto m, read_manifest_member(a.get(), bundle));
  std::map<std::string, Expected> expected;
  for (const auto& p : m.packages)
    for (const auto& mod : p.modules)
      expected[prebuilt_member(p, mod)] = {&mod, false};
  archive_entry* e = nullptr;
  for (;;) {
    HPCBAKE_TRY_ASSIGN(bool more, next(a.get(), &e, bundle));
    if (!more) break;
    const std::string member = archive_entry_pathname(e);
    auto it = expected.find(member);
    if (it == expected.end())
      return std::unexpected(
          bad(bundle.string(), fmt::format("member '{}' is not a module the manifest lists", member)));
    if (it->second.seen) return std::unexpected(bad(bundle.string(), fmt::format("member '{}' appears twice", member)));
    if (archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e) != nullptr)
      return std::unexpected(bad(bundle.string(), fmt::format("member '{}' is not a regular file", member)));
    it->second.seen = true;
    // The member name was matched against names built from checked components: it stays in dir.
    HPCBAKE_TRY(copy_member(a.get(), bundle, member, *it->second.module, dir / member.substr(8)));
  }
  for (const auto& [member, x] : expected)
    if (!x.seen) return std::unexpected(bad(bundle.string(), fmt::format("{} is listed but missing", member)));
  return m;
}

std::string prebuilt_mismatch(const PrebuiltManifest& m, const PrebuiltWant& w) {
  if (m.kernel != w.kernel) return fmt::format("built for kernel {}, the target kernel is {}", m.kernel, w.kernel);
  if (m.arch != w.arch) return fmt::format("built for {}, this machine is {}", m.arch, w.arch);
  const PrebuiltPackage* p = m.find(w.dkms_name);
  if (!p) return fmt::format("holds no {} modules", w.dkms_name);
  if (p->version != w.version)
    return fmt::format("holds {} {}, the plan installs {}", w.dkms_name, p->version, w.version);
  if (!w.source_after_unpack && p->source_sha256 != w.source_sha256)
    return fmt::format("was built from a source with SHA-256 {}, the plan's {} has {}", p->source_sha256, p->source,
                       w.source_sha256);
  for (const auto& want : w.modules) {
    const bool has = std::any_of(p->modules.begin(), p->modules.end(),
                                 [&](const PrebuiltModule& x) { return module_name(x.name) == module_name(want); });
    if (!has) return fmt::format("lacks module {}", want);
  }
  if (w.signing && !m.is_signed) return "its modules are unsigned, and this plan signs modules (Secure Boot)";
  return {};
}

Result<std::string> source_tree_sha256(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return fail(ErrorKind::usage, fmt::format("{}: module source directory not found", dir.string()));
  std::vector<std::string> paths;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const auto st = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_directory(st)) continue;
    const std::string rel = it->path().lexically_relative(dir).string();
    if (!fs::is_regular_file(st) && !fs::is_symlink(st))
      return fail(ErrorKind::usage,
                  fmt::format("{}: neither a file nor a link in module sources", it->path().string()));
    paths.push_back(rel);
  }
  if (ec) return fail(ErrorKind::internal, fmt::format("cannot list {}: {}", dir.string(), ec.message()));
  std::sort(paths.begin(), paths.end());
  util::Sha256 all;
  for (const auto& rel : paths) {
    const fs::path p = dir / rel;
    std::string line = rel + '\0';
    if (fs::is_symlink(p, ec)) {
      const auto target = fs::read_symlink(p, ec);
      if (ec) return fail(ErrorKind::internal, fmt::format("cannot read the link {}: {}", p.string(), ec.message()));
      line += "->" + target.string();
    } else {
      HPCBAKE_TRY_ASSIGN(auto sha, util::sha256_file(p));
      line += sha;
    }
    line += '\n';
    HPCBAKE_TRY(all.update(line.data(), line.size()));
  }
  return all.hex();
}

Status check_prebuilt_module(const fs::path& ko, const PrebuiltModule& entry, const std::string& kernel,
                             const std::optional<Certificate>& cert) {
  HPCBAKE_TRY(check_module(ko, kernel, std::nullopt));
  HPCBAKE_TRY_ASSIGN(auto info, read_module_info(ko));
  if (info.vermagic != entry.vermagic)
    return fail(ErrorKind::build,
                fmt::format("{}: vermagic '{}', the manifest says '{}'", ko.string(), info.vermagic, entry.vermagic));
  if (!cert) return {};
  if (info.signer.empty())
    return fail(ErrorKind::build,
                fmt::format("{}: not signed, and this plan needs modules signed by '{}'", ko.string(), cert->subject));
  if (info.signer != cert->issuer || serial_key(info.sig_key) != cert->serial)
    return fail(ErrorKind::build,
                fmt::format("{}: signed by '{}' (serial {}), this plan signs with '{}' (serial {})", ko.string(),
                            info.signer, serial_key(info.sig_key), cert->subject, cert->serial),
                "give the nodes the build host's signing key, or prebuild with the nodes' key");
  return {};
}

} // namespace hpcbake::driver
