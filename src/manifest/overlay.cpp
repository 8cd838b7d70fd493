#include "manifest/overlay.hpp"

#include "util/strings.hpp"
#include "util/utf8.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <system_error>

namespace hpcbake::manifest {
namespace fs = std::filesystem;

namespace {

std::vector<fs::path>& overlay_paths() {
  static std::vector<fs::path> paths;
  return paths;
}

// The folders an overlay may name, and the key that names a file of each by its id.
struct TargetKey {
  const char* key;
  const char* folder;
};
constexpr TargetKey kTargets[] = {{"component", "components"},    {"size", "sizes"},
                                  {"distro", "distros"},          {"profile", "profiles"},
                                  {"repository", "repositories"}, {"settings", "settings"}};

// The manifest file an override names, relative to the manifest directory; empty (with a
// diagnostic) when it names none or more than one, or one that is not there.
std::string target_of(MapReader& r, const fs::path& dir) {
  std::vector<std::string> named;
  std::string target;
  if (auto f = r.string("file", Need::optional)) {
    named.push_back("file");
    target = *f;
    static const std::regex shape(R"((components|sizes|distros|profiles|repositories|settings)/[a-z0-9._-]+\.yaml)");
    if (!std::regex_match(target, shape) || target.find("..") != std::string::npos) {
      r.error("file", fmt::format("'{}' is no manifest file: write FOLDER/NAME.yaml, FOLDER one of components, sizes, "
                                  "distros, profiles, repositories, settings",
                                  util::excerpt(target)));
      return {};
    }
  }
  for (const auto& t : kTargets)
    if (auto id = r.string(t.key, Need::optional)) {
      named.push_back(t.key);
      std::string stem = util::to_lower(*id);
      if (std::string(t.key) == "size" && stem.starts_with("standard_")) stem.erase(0, 9);
      target = fmt::format("{}/{}.yaml", t.folder, stem);
    }
  if (named.size() != 1) {
    r.error(named.empty() ? "set" : named[1],
            named.empty() ? "an override names its manifest: file, component, size, distro, profile, repository or "
                            "settings"
                          : fmt::format("an override names one manifest, not {}", util::join(named, " and ")));
    return {};
  }
  std::error_code ec;
  if (!fs::is_regular_file(dir / target, ec)) {
    r.error(named[0], fmt::format("{} is not a manifest under {}", target, dir.string()));
    return {};
  }
  return target;
}

void read_overlay_file(const fs::path& file, const fs::path& dir, std::vector<Diagnostic>& diags,
                       std::vector<OverlayEntry>& out) {
  auto node = load_yaml_file(file.string(), diags);
  if (!node) return;
  MapReader top(*node, file.string(), "", diags);
  if (!top.valid()) return;
  top.integer("schema", Need::required, 1, 1);
  if (auto items = top.maps("overrides", Need::required))
    for (auto& item : *items) {
      const std::string target = target_of(item, dir);
      YAML::Node set = item.raw("set", Need::required);
      item.finish();
      if (target.empty() || !set.IsDefined()) continue;
      if (!set.IsMap() || set.size() == 0) {
        diags.push_back(diagnostic_at(file.string(), {set.Mark().line + 1, set.Mark().column + 1},
                                      "'set' must be a mapping of PATH: VALUE (e.g. variants[0].version: \"1.2\")"));
        continue;
      }
      for (const auto& kv : set)
        out.push_back({target,
                       kv.first.Scalar(),
                       kv.second,
                       file.string(),
                       {kv.first.Mark().line + 1, kv.first.Mark().column + 1}});
    }
  top.finish();
}

// The kind of a value, as the strict reader would take it: a quoted scalar is a string.
std::string kind_of(const YAML::Node& n) {
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "null";
  if (n.Tag() == "!") return "a string";
  static const std::regex integer(R"(-?[0-9]+)"), number(R"(-?[0-9]+\.[0-9]+)");
  const std::string& s = n.Scalar();
  if (s == "true" || s == "false") return "a boolean";
  if (std::regex_match(s, integer)) return "an integer";
  if (std::regex_match(s, number)) return "a number";
  return "a string";
}

std::string flow_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

// The parts of a path ("variants[0].version" -> "variants", 0, "version"); empty when malformed.
struct Part {
  std::string key;
  long index = -1;
};
std::vector<Part> parse_path(const std::string& path) {
  static const std::regex whole(R"([A-Za-z0-9_-]+(\[[0-9]+\])*(\.[A-Za-z0-9_-]+(\[[0-9]+\])*)*)");
  if (path.size() > 200 || !std::regex_match(path, whole)) return {};
  std::vector<Part> parts;
  static const std::regex part(R"(([A-Za-z0-9_-]+)|\[([0-9]+)\])");
  for (std::sregex_iterator it(path.begin(), path.end(), part), end; it != end; ++it)
    parts.push_back((*it)[1].matched ? Part{(*it)[1].str(), -1} : Part{{}, std::stol((*it)[2].str())});
  return parts;
}

} // namespace

std::vector<OverlayEntry> read_overlays(const std::vector<fs::path>& paths, const fs::path& dir,
                                        std::vector<Diagnostic>& diags) {
  std::vector<OverlayEntry> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> files;
      for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == ".yaml") files.push_back(it->path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files)
        read_overlay_file(f, dir, diags, out);
    } else if (fs::exists(p, ec)) {
      read_overlay_file(p, dir, diags, out);
    } else {
      diags.push_back({p.string(), 0, 0, "overlay does not exist: pass --overlay FILE or DIR"});
    }
  }
  return out;
}

void apply_overlays(const std::vector<OverlayEntry>& entries, const std::string& target, YAML::Node& node,
                    std::vector<Diagnostic>& diags, std::vector<Override>& applied) {
  for (const auto& e : entries) {
    if (e.target != target) continue;
    const auto parts = parse_path(e.path);
    if (parts.empty()) {
      diags.push_back(diagnostic_at(e.overlay, e.at,
                                    fmt::format("'{}' is no value path: write KEY, KEY[N] or KEY.KEY (e.g. "
                                                "variants[0].version)",
                                                util::excerpt(e.path))));
      continue;
    }
    YAML::Node cur;
    cur.reset(node);
    std::string walked;
    bool found = true;
    for (const auto& p : parts) {
      walked += p.index < 0 ? (walked.empty() ? "" : ".") + p.key : fmt::format("[{}]", p.index);
      const YAML::Node& at = cur; // const: looking a key up adds nothing to the tree
      YAML::Node next;
      if (p.index < 0 && at.IsMap() && at[p.key].IsDefined())
        next.reset(at[p.key]);
      else if (p.index >= 0 && at.IsSequence() && static_cast<std::size_t>(p.index) < at.size())
        next.reset(at[static_cast<std::size_t>(p.index)]);
      else {
        found = false;
        break;
      }
      cur.reset(next);
    }
    if (!found) {
      diags.push_back(diagnostic_at(e.overlay, e.at,
                                    fmt::format("{} has no value at '{}' (no '{}'): an overlay overrides values the "
                                                "shipped file has, it adds none",
                                                target, util::excerpt(e.path), util::excerpt(walked))));
      continue;
    }
    if (kind_of(cur) != kind_of(e.value)) {
      diags.push_back(diagnostic_at(
          e.overlay, e.at,
          fmt::format("'{}' in {} is {}, and the overlay gives {}: write the same type (a version is a quoted string)",
                      util::excerpt(e.path), target, kind_of(cur), kind_of(e.value))));
      continue;
    }
    // Replaces the shipped node in the tree (a Node's assignment rebinds the node the parent holds),
    // with the overlay's position and quoting: the strict reader reads it as it reads the file.
    cur = e.value;
    applied.erase(std::remove_if(applied.begin(), applied.end(),
                                 [&](const Override& o) { return o.target == target && o.path == e.path; }),
                  applied.end());
    applied.push_back({target,
                       e.path,
                       flow_text(e.value),
                       e.overlay,
                       e.at.line,
                       e.at.column,
                       {e.value.Mark().line + 1, e.value.Mark().column + 1}});
  }
}

void blame_overlays(const std::vector<Override>& applied, const std::string& target, const std::string& file,
                    std::vector<Diagnostic>& diags, std::size_t from) {
  for (std::size_t i = from; i < diags.size(); ++i) {
    auto& d = diags[i];
    if (d.file != file) continue;
    for (const auto& o : applied)
      if (o.target == target && d.line == o.value_at.line && d.column >= o.value_at.column) {
        d.file = o.overlay;
        break;
      }
  }
}

void set_default_overlays(std::vector<fs::path> paths) {
  overlay_paths() = std::move(paths);
}

const std::vector<fs::path>& default_overlays() {
  return overlay_paths();
}

} // namespace hpcbake::manifest
