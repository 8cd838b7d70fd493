#include "manifest/yaml_reader.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <cmath>

#include <fstream>
#include <sstream>

namespace hpcbake::manifest {

std::string Diagnostic::str() const {
  if (line > 0) return fmt::format("{}:{}:{}: {}", file, line, column, message);
  return fmt::format("{}: {}", file, message);
}

MapReader::MapReader(YAML::Node node, std::string file, std::string where, std::vector<Diagnostic>& diags)
    : node_(std::move(node)), file_(std::move(file)), where_(std::move(where)), diags_(&diags) {
  if (!node_.IsMap()) {
    add(node_.Mark(),
        where_.empty() ? "expected a mapping at the top of the file" : fmt::format("'{}' must be a mapping", where_));
    valid_ = false;
  }
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
  return n;
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
    add(n.Mark(), fmt::format("'{}' must be a quoted string: write \"{}\"", qualified(key), n.Scalar()));
    return std::nullopt;
  }
  return n.Scalar();
}

std::optional<std::int64_t> MapReader::integer(const std::string& key, Need need, std::int64_t min) {
  YAML::Node n = find(key, need);
  if (!n.IsDefined()) return std::nullopt;
  auto v = n.IsScalar() && n.Tag() == "?" ? util::parse_int(n.Scalar()) : std::nullopt;
  if (!v) {
    add(n.Mark(), fmt::format("'{}' must be an integer", qualified(key)));
    return std::nullopt;
  }
  if (*v < min) {
    add(n.Mark(), fmt::format("'{}' must be at least {}", qualified(key), min));
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
      fmt::format("'{}' is '{}'; expected one of: {}", qualified(key), *v, util::join(allowed, ", ")));
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
    out.push_back(item.Scalar());
  }
  return out;
}

std::optional<MapReader> MapReader::map(const std::string& key, Need need) {
  YAML::Node n = find(key, need);
  if (!n.IsDefined()) return std::nullopt;
  MapReader sub(n, file_, qualified(key), *diags_);
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
    MapReader sub(item, file_, fmt::format("{}[{}]", qualified(key), i++), *diags_);
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
      add(it->first.Mark(), fmt::format("unknown key '{}'{}", qualified(key),
                                        close.empty() ? "" : fmt::format(" (did you mean '{}'?)", close.front())));
    }
  }
}

std::optional<YAML::Node> load_yaml_file(const std::string& path, std::vector<Diagnostic>& diags) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    diags.push_back({path, 0, 0, "cannot open file"});
    return std::nullopt;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return YAML::Load(buffer.str());
  } catch (const YAML::Exception& e) {
    diags.push_back({path, e.mark.is_null() ? 0 : e.mark.line + 1, e.mark.is_null() ? 0 : e.mark.column + 1,
                     fmt::format("YAML syntax error: {}", e.msg)});
    return std::nullopt;
  }
}

} // namespace hpcbake::manifest
