#include "manifest/yaml_reader.hpp"

#include "util/hostfs.hpp"
#include "util/strings.hpp"
#include "util/utf8.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>

#include <fstream>
#include <sstream>

namespace hpcbake::manifest {

std::string Diagnostic::str() const {
  if (line > 0) return fmt::format("{}:{}:{}: {}", file, line, column, message);
  return fmt::format("{}: {}", file, message);
}

Diagnostic diagnostic_at(const std::string& file, Pos at, std::string message) {
  return {file, at.line, at.column, std::move(message)};
}

Pos Positions::at(const std::string& path) const {
  auto it = at_.find(path);
  return it == at_.end() ? Pos{} : it->second;
}

namespace {
// A key as a message may show it: one that looks like a manifest key (letters, digits, '_', '-',
// '.', at most 64 bytes). Anything else is described, not quoted: a file that is no manifest (a
// link to /etc/shadow, a pasted secret) must not be echoed line by line as "unknown keys".
std::string shown_key(const std::string& key) {
  const bool key_like = !key.empty() && key.size() <= 64 && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
  return key_like ? key : fmt::format("<{} bytes that are no manifest key, not shown>", key.size());
}
} // namespace

MapReader::MapReader(YAML::Node node, std::string file, std::string where, std::vector<Diagnostic>& diags,
                     Positions* positions)
    : node_(std::move(node)), file_(std::move(file)), where_(std::move(where)), diags_(&diags), positions_(positions) {
  if (!node_.IsMap()) {
    add(node_.Mark(), where_.empty() ? "expected a mapping at the top of the file"
                                     : fmt::format("'{}' must be a mapping", util::excerpt(where_)));
    valid_ = false;
    return;
  }
  check_duplicates();
}

// yaml-cpp keeps every pair of a mapping and node[key] finds the first: a second `count:` would
// be ignored without a word. Both positions are named, so either can be removed.
void MapReader::check_duplicates() {
  std::map<std::string, YAML::Mark> seen;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (!it->first.IsScalar()) continue;
    const auto [first, fresh] = seen.emplace(it->first.Scalar(), it->first.Mark());
    if (fresh) continue;
    add(it->first.Mark(), fmt::format("duplicate key '{}': first at {}:{}:{}; remove one of them",
                                      util::excerpt(qualified(shown_key(it->first.Scalar()))), file_,
                                      first->second.line + 1, first->second.column + 1));
  }
}

void MapReader::record(const std::string& path, const YAML::Mark& mark) {
  if (positions_ && !mark.is_null()) positions_->add(path, {mark.line + 1, mark.column + 1});
}

void MapReader::add(const YAML::Mark& mark, const std::string& message) {
  Diagnostic d{file_, 0, 0, message};
  if (!mark.is_null()) {
    d.line = mark.line + 1;
    d.column = mark.column + 1;
  }
  diags_->push_back(std::move(d));
}

std::string MapReader::qualified(const std::string& key) const {
  return where_.empty() ? key : where_ + "." + key;
}

void MapReader::error(const std::string& key, const std::string& message) {
  YAML::Node n = valid_ ? node_[key] : YAML::Node();
  add(n.IsDefined() ? n.Mark() : node_.Mark(), fmt::format("'{}': {}", qualified(key), message));
}

YAML::Node MapReader::find(const std::string& key, Need need) {
  known_.insert(key);
  if (!valid_) return YAML::Node(YAML::NodeType::Undefined);
  YAML::Node n = node_[key];
  if (!n.IsDefined() || n.IsNull()) {
    if (need == Need::required) add(node_.Mark(), fmt::format("missing required key '{}'", qualified(key)));
    return YAML::Node(YAML::NodeType::Undefined);
  }
  record(qualified(key), n.Mark());
  return n;
}

namespace {
// The first control character in a manifest string: a C0 byte other than TAB and LF (a block
// scalar holds those), or DEL. YAML's "\0" and "\x01" escapes write them; a NUL would end the
// string early for every C interface it reaches (curl would fetch a URL cut there while the
// message printed all of it), and CR or ESC would rewrite what a terminal shows.
std::optional<std::size_t> first_control(std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) return i;
  }
  return std::nullopt;
}
} // namespace

bool MapReader::text_ok(const YAML::Node& n, const std::string& what) {
  const auto at = first_control(n.Scalar());
  if (!at) return true;
  add(n.Mark(), fmt::format("'{}' holds the control character \\x{:02x} at byte {}: manifest strings are text; "
                            "remove it (a NUL would cut the value short where it is used)",
                            what, static_cast<unsigned char>(n.Scalar()[*at]), *at));
  return false;
}

std::optional<std::string> MapReader::string(const std::string& key, Need need) {
  YAML::Node n = find(key, need);
  if (!n.IsDefined()) return std::nullopt;
  if (!n.IsScalar()) {
    add(n.Mark(), fmt::format("'{}' must be a string", qualified(key)));
    return std::nullopt;
  }
  // A plain scalar such as 22.04 or 9 is a number to most YAML readers: require quotes
  // so that "9.10" never turns into 9.1 in some other tool reading the same file.
  if (n.Tag() == "?" && (util::parse_double(n.Scalar()) || util::parse_int(n.Scalar()))) {
    add(n.Mark(), fmt::format("'{}' must be a quoted string: write \"{}\"", qualified(key), util::excerpt(n.Scalar())));
    return std::nullopt;
  }
  if (!text_ok(n, qualified(key))) return std::nullopt;
  return n.Scalar();
}

namespace {
// -?[1-9][0-9]*|0: the one spelling of an integer every YAML reader agrees on.
bool plain_decimal(std::string_view s) {
  const bool negative = s.starts_with('-');
  if (negative) s.remove_prefix(1);
  if (s.empty() || (s[0] == '0' && (s.size() > 1 || negative))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
} // namespace

std::optional<std::int64_t> MapReader::integer(const std::string& key, Need need, std::int64_t min, std::int64_t max) {
  YAML::Node n = find(key, need);
  if (!n.IsDefined()) return std::nullopt;
  const std::string text = n.IsScalar() ? n.Scalar() : std::string();
  if (!n.IsScalar() || n.Tag() != "?" || !plain_decimal(text)) {
    add(n.Mark(), fmt::format("'{}' must be an integer (decimal digits, no leading zero)", qualified(key)));
    return std::nullopt;
  }
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  // Past int64 (ec is result_out_of_range) is out of every field's range, and said as such.
  if (ec != std::errc() || end != text.data() + text.size() || v < min || v > max) {
    add(n.Mark(), fmt::format("'{}' is {}: must be from {} to {}", qualified(key), util::excerpt(text), min, max));
    return std::nullopt;
  }
  return v;
}

std::optional<double> MapReader::number(const std::string& key, Need need) {
  YAML::Node n = find(key, need);
  if (!n.IsDefined()) return std::nullopt;
  auto v = n.IsScalar() && n.Tag() == "?" ? util::parse_double(n.Scalar()) : std::nullopt;
  // from_chars reads "nan" and "inf" too: a threshold of either would make every check
  // pass or fail whatever was measured.
  if (!v || !std::isfinite(*v) || *v < 0) {
    add(n.Mark(), fmt::format("'{}' must be a non-negative number", qualified(key)));
    return std::nullopt;
  }
  return v;
}

std::optional<bool> MapReader::boolean(const std::string& key, Need need) {
  YAML::Node n = find(key, need);
  if (!n.IsDefined()) return std::nullopt;
  if (n.IsScalar() && n.Tag() == "?") {
    if (n.Scalar() == "true") return true;
    if (n.Scalar() == "false") return false;
  }
  add(n.Mark(), fmt::format("'{}' must be true or false", qualified(key)));
  return std::nullopt;
}

std::optional<std::string> MapReader::one_of(const std::string& key, Need need,
                                             const std::vector<std::string>& allowed) {
  auto v = string(key, need);
  if (!v) return std::nullopt;
  for (const auto& a : allowed)
    if (*v == a) return v;
  add(node_[key].Mark(),
      fmt::format("'{}' is '{}'; expected one of: {}", qualified(key), util::excerpt(*v), util::join(allowed, ", ")));
  return std::nullopt;
}

std::optional<std::vector<std::string>> MapReader::strings(const std::string& key, Need need, bool allow_empty) {
  YAML::Node n = find(key, need);
  if (!n.IsDefined()) return std::nullopt;
  if (!n.IsSequence()) {
    add(n.Mark(), fmt::format("'{}' must be a list of strings", qualified(key)));
    return std::nullopt;
  }
  if (n.size() == 0 && !allow_empty) {
    add(n.Mark(), fmt::format("'{}' must not be empty", qualified(key)));
    return std::nullopt;
  }
  std::vector<std::string> out;
  for (const auto& item : n) {
    if (!item.IsScalar()) {
      add(item.Mark(), fmt::format("'{}' must be a list of strings", qualified(key)));
      return std::nullopt;
    }
    const std::string item_name = fmt::format("{}[{}]", qualified(key), out.size());
    if (!text_ok(item, item_name)) return std::nullopt;
    record(item_name, item.Mark());
    out.push_back(item.Scalar());
  }
  return out;
}

std::optional<std::vector<std::vector<std::string>>> MapReader::string_lists(const std::string& key, Need need) {
  YAML::Node n = find(key, need);
  if (!n.IsDefined()) return std::nullopt;
  if (!n.IsSequence() || n.size() == 0) {
    add(n.Mark(), fmt::format("'{}' must be a non-empty list of lists of strings", qualified(key)));
    return std::nullopt;
  }
  std::vector<std::vector<std::string>> out;
  for (const auto& list : n) {
    const std::string list_name = fmt::format("{}[{}]", qualified(key), out.size());
    if (!list.IsSequence() || list.size() == 0) {
      add(list.Mark(), fmt::format("'{}' must be a non-empty list of strings", list_name));
      return std::nullopt;
    }
    std::vector<std::string> items;
    for (const auto& item : list) {
      const std::string item_name = fmt::format("{}[{}]", list_name, items.size());
      if (!item.IsScalar()) {
        add(item.Mark(), fmt::format("'{}' must be a string", item_name));
        return std::nullopt;
      }
      if (!text_ok(item, item_name)) return std::nullopt;
      record(item_name, item.Mark());
      items.push_back(item.Scalar());
    }
    out.push_back(std::move(items));
  }
  return out;
}

std::optional<MapReader> MapReader::map(const std::string& key, Need need) {
  YAML::Node n = find(key, need);
  if (!n.IsDefined()) return std::nullopt;
  MapReader sub(n, file_, qualified(key), *diags_, positions_);
  if (!sub.valid()) return std::nullopt;
  return sub;
}

std::optional<std::vector<MapReader>> MapReader::maps(const std::string& key, Need need) {
  YAML::Node n = find(key, need);
  if (!n.IsDefined()) return std::nullopt;
  if (!n.IsSequence() || n.size() == 0) {
    add(n.Mark(), fmt::format("'{}' must be a non-empty list of mappings", qualified(key)));
    return std::nullopt;
  }
  std::vector<MapReader> out;
  std::size_t i = 0;
  for (const auto& item : n) {
    MapReader sub(item, file_, fmt::format("{}[{}]", qualified(key), i++), *diags_, positions_);
    if (sub.valid()) out.push_back(std::move(sub));
  }
  return out;
}

void MapReader::finish() {
  if (!valid_) return;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string("<non-scalar key>");
    if (!known_.contains(key)) {
      std::vector<std::string> close;
      for (const auto& k : known_)
        if (util::edit_distance(k, key) <= 2) close.push_back(k);
      add(it->first.Mark(), fmt::format("unknown key '{}'{}", util::excerpt(qualified(shown_key(key))),
                                        close.empty() ? "" : fmt::format(" (did you mean '{}'?)", close.front())));
    }
  }
}

bool inside_tree(const std::filesystem::path& file, const std::filesystem::path& tree, std::vector<Diagnostic>& diags) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path real_tree = fs::weakly_canonical(tree, ec);
  const fs::path real = fs::weakly_canonical(file, ec);
  if (!ec && !real_tree.empty()) {
    const auto rel = real.lexically_relative(real_tree);
    if (!rel.empty() && *rel.begin() != "..") return true;
  }
  const bool link = fs::is_symlink(file, ec);
  const std::string target = link ? fs::read_symlink(file, ec).string() : real.string();
  diags.push_back({file.string(), 0, 0,
                   fmt::format("{} {}, outside the tree {}: refused, not read",
                               link ? "is a symbolic link to" : "resolves to", target, tree.string())});
  return false;
}

std::optional<YAML::Node> load_yaml_file(const std::string& path, std::vector<Diagnostic>& diags) {
  // A FIFO or a directory named *.yaml is refused, never a hang; 64 MiB is far above any
  // manifest (the largest shipped is a few KB) and bounds what a mistaken file costs.
  auto read = util::read_small_file(path, std::size_t{64} << 20);
  if (!read) {
    // The message starts with the path, which the diagnostic prints already.
    std::string why = read.error().message;
    if (why.starts_with(path + ": ")) why.erase(0, path.size() + 2);
    diags.push_back({path, 0, 0, why});
    return std::nullopt;
  }
  const std::string& text = *read;
  if (const auto bad = util::first_invalid_utf8(text)) {
    const std::size_t nl = text.rfind('\n', *bad); // text[*bad] is not '\n': the line's own start
    const std::size_t line_start = nl == std::string::npos ? 0 : nl + 1;
    const auto line = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(line_start), '\n') + 1;
    diags.push_back({path, static_cast<int>(line), static_cast<int>(*bad - line_start + 1),
                     fmt::format("invalid UTF-8 (byte 0x{:02x}): manifests are UTF-8 text; save the file as UTF-8",
                                 static_cast<unsigned char>(text[*bad]))});
    return std::nullopt;
  }
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    diags.push_back({path, e.mark.is_null() ? 0 : e.mark.line + 1, e.mark.is_null() ? 0 : e.mark.column + 1,
                     fmt::format("YAML syntax error: {}", util::excerpt(e.msg, 200))});
    return std::nullopt;
  }
}

} // namespace hpcbake::manifest
