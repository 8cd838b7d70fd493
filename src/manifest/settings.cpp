#include "manifest/settings.hpp"

#include "manifest/manifests.hpp"
#include "util/hostfs.hpp"
#include "util/strings.hpp"
#include "util/utf8.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

namespace hpcbake::manifest {

namespace fs = std::filesystem;
using util::excerpt;

const char* to_string(SettingsScope scope) {
  return scope == SettingsScope::infiniband ? "infiniband" : "size";
}

namespace {

// The content of `from` (relative to the manifest directory `dir`): a text file inside it.
std::optional<std::string> read_from(MapReader& f, const fs::path& dir, const std::string& from) {
  const fs::path rel(from);
  if (rel.is_absolute() || from.find("..") != std::string::npos) {
    f.error("from", fmt::format("'{}' must be a path relative to the manifest directory, without '..'", excerpt(from)));
    return std::nullopt;
  }
  const fs::path file = dir / rel;
  std::vector<Diagnostic> diags;
  if (!inside_tree(file, dir, diags)) {
    for (const auto& d : diags)
      f.error("from", d.message);
    return std::nullopt;
  }
  auto text = util::read_file(file);
  if (!text) {
    f.error("from", fmt::format("cannot read {} (relative to {})", excerpt(from), dir.string()));
    return std::nullopt;
  }
  if (auto bad = util::first_invalid_utf8(*text)) {
    f.error("from", fmt::format("{} is not UTF-8 text (byte {})", excerpt(from), *bad));
    return std::nullopt;
  }
  return text;
}

std::optional<SettingsFile> read_file_entry(MapReader& f, const fs::path& dir) {
  SettingsFile out;
  out.name = f.string("name", Need::required).value_or("");
  out.path = f.string("path", Need::required).value_or("");
  out.source = f.string("source", Need::required).value_or("");
  const auto mode = f.one_of("mode", Need::optional, {"0644", "0755"});
  out.mode = mode == "0755" ? 0755 : 0644;
  const auto content = f.string("content", Need::optional);
  const auto from = f.string("from", Need::optional);
  if (content.has_value() == from.has_value())
    f.error("content", "give the file's text in exactly one of content or from");
  if (from) {
    out.from = *from;
    out.content = read_from(f, dir, *from).value_or("");
  } else {
    out.content = content.value_or("");
  }
  if (!out.path.empty() &&
      (!out.path.starts_with("/") || out.path.find("..") != std::string::npos || out.path.ends_with("/")))
    f.error("path", fmt::format("'{}' is not an absolute file path", excerpt(out.path)));
  f.finish();
  return out;
}

const std::regex& name_re() {
  static const std::regex re("[a-z0-9][a-z0-9-]*");
  return re;
}

} // namespace

std::optional<SettingsManifest> read_settings(MapReader& r, const std::string& id) {
  SettingsManifest s;
  s.id = id;
  s.file = r.file();
  const fs::path dir = fs::path(r.file()).parent_path().parent_path();
  if (auto v = r.integer_as<int>("schema", Need::required, 1); v && *v != schema_version)
    r.error("schema", fmt::format("schema version {} is not supported by this hpcbake (it reads version {})", *v,
                                  schema_version));
  if (auto name = r.string("settings", Need::required); name && *name != id)
    r.error("settings", fmt::format("settings '{}' must match its file name '{}.yaml'", excerpt(*name), id));
  s.applies_to = r.one_of("applies_to", Need::required, {"infiniband", "size"}) == "infiniband"
                     ? SettingsScope::infiniband
                     : SettingsScope::size;
  s.description = r.string("description", Need::required).value_or("");
  s.source = r.string("source", Need::required).value_or("");
  s.notes = r.strings("notes", Need::optional).value_or(std::vector<std::string>{});
  std::vector<std::string> names;
  const auto unique = [&](MapReader& at, const std::string& name) {
    if (!std::regex_match(name, name_re()))
      at.error("name", fmt::format("'{}' is not a name like \"sysctl\" (a-z, 0-9, '-')", excerpt(name)));
    else if (std::find(names.begin(), names.end(), name) != names.end())
      at.error("name", fmt::format("'{}' is named twice: each file and command needs its own name", name));
    names.push_back(name);
  };
  for (auto& f : r.maps("files", Need::optional).value_or(std::vector<MapReader>{}))
    if (auto file = read_file_entry(f, dir)) {
      unique(f, file->name);
      s.files.push_back(std::move(*file));
    }
  for (auto& c : r.maps("commands", Need::optional).value_or(std::vector<MapReader>{})) {
    SettingsCommand cmd;
    cmd.name = c.string("name", Need::required).value_or("");
    cmd.argv = c.strings("argv", Need::required).value_or(std::vector<std::string>{});
    cmd.source = c.string("source", Need::required).value_or("");
    c.finish();
    unique(c, cmd.name);
    s.commands.push_back(std::move(cmd));
  }
  s.services = r.strings("services", Need::optional).value_or(std::vector<std::string>{});
  for (const auto& unit : s.services)
    if (!unit.ends_with(".service") || unit.find('/') != std::string::npos)
      r.error("services", fmt::format("'{}' is not a unit name like \"foo.service\"", excerpt(unit)));
  if (s.files.empty() && s.commands.empty() && s.services.empty() && s.notes.empty())
    r.error("files", "the settings set nothing: give files, commands, services or notes");
  r.finish();
  return s;
}

} // namespace hpcbake::manifest
