#pragma once
// A strict reader over one YAML mapping. Each getter records the key as known;
// finish() reports every key that no getter asked for ("unknown key"), so a typo
// in a manifest is an error, never a silently ignored fact. Type errors are
// collected as diagnostics with file:line:column, not thrown, so `manifest lint`
// reports all problems of a file at once.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hpcbake::manifest {

struct Diagnostic {
  std::string file;
  int line = 0;   // 1-based; 0 when unknown
  int column = 0; // 1-based
  std::string message;
  std::string str() const;
};

enum class Need { required, optional };

class MapReader {
public:
  // `where` names the mapping in messages ("gpu", "variants[2]"); empty at top level.
  MapReader(YAML::Node node, std::string file, std::string where, std::vector<Diagnostic>& diags);

  bool valid() const { return valid_; }

  std::optional<std::string> string(const std::string& key, Need need);
  std::optional<std::int64_t> integer(const std::string& key, Need need, std::int64_t min = 0);
  std::optional<double> number(const std::string& key, Need need);
  std::optional<bool> boolean(const std::string& key, Need need);
  std::optional<std::string> one_of(const std::string& key, Need need, const std::vector<std::string>& allowed);
  std::optional<std::vector<std::string>> strings(const std::string& key, Need need, bool allow_empty = false);
  std::optional<MapReader> map(const std::string& key, Need need);
  // A list of mappings.
  std::optional<std::vector<MapReader>> maps(const std::string& key, Need need);

  // Reports unknown keys. Call once after reading every known key.
  void finish();

  // Adds a diagnostic at `key`'s position (or the mapping's, if key is absent).
  void error(const std::string& key, const std::string& message);
  const std::string& file() const { return file_; }

private:
  YAML::Node find(const std::string& key, Need need);
  std::string qualified(const std::string& key) const;
  void add(const YAML::Mark& mark, const std::string& message);

  YAML::Node node_;
  std::string file_;
  std::string where_;
  std::vector<Diagnostic>* diags_;
  std::set<std::string> known_;
  bool valid_ = true;
};

// Loads a YAML file into a node; parse errors become diagnostics.
std::optional<YAML::Node> load_yaml_file(const std::string& path, std::vector<Diagnostic>& diags);

} // namespace hpcbake::manifest
