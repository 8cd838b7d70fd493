#pragma once
// A strict reader over one YAML mapping. Each getter records the key as known;
// finish() reports every key that no getter asked for ("unknown key"), so a typo
// in a manifest is an error, never a silently ignored fact. A key written twice in one
// mapping is an error too (YAML readers keep one of them silently, and not all the same
// one). Type errors are collected as diagnostics with file:line:column, not thrown, so
// `manifest lint` reports all problems of a file at once. Values quoted in messages are
// excerpts (util::excerpt).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
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

// A 1-based line and column in a file; 0 when unknown.
struct Pos {
  int line = 0;
  int column = 0;
};

Diagnostic diagnostic_at(const std::string& file, Pos at, std::string message);

// Where each key and list item of one file was written, by its qualified name ("gpu.count",
// "variants[0].distros[1]"): the cross-file rules run after the YAML is gone and report at the
// field they are about.
class Positions {
public:
  void add(const std::string& path, Pos at) { at_.emplace(path, at); }
  Pos at(const std::string& path) const;

private:
  std::map<std::string, Pos> at_;
};

enum class Need { required, optional };

class MapReader {
public:
  // `where` names the mapping in messages ("gpu", "variants[2]"); empty at top level. With
  // `positions`, every key read (and every item of a list of strings) is recorded there.
  MapReader(YAML::Node node, std::string file, std::string where, std::vector<Diagnostic>& diags,
            Positions* positions = nullptr);

  bool valid() const { return valid_; }

  // A string scalar; one holding a control character other than TAB and LF (a "\0" escape gives a
  // NUL) is a diagnostic at file:line:column, never a value. strings() does the same per item.
  std::optional<std::string> string(const std::string& key, Need need);
  // An integer in [min, max], written as plain decimal digits: no '+', leading zero, exponent,
  // fraction, '_' or hex, which YAML readers disagree on (010 is 8 to YAML 1.1, 10 to 1.2). Read
  // into int64 with overflow checked, never through a narrower type that would wrap.
  std::optional<std::int64_t> integer(const std::string& key, Need need, std::int64_t min, std::int64_t max);
  // The same into T, with max capped at T's own maximum.
  template <typename T>
  std::optional<T> integer_as(const std::string& key, Need need, std::int64_t min,
                              std::int64_t max = std::numeric_limits<T>::max()) {
    static_assert(std::numeric_limits<T>::is_integer && sizeof(T) <= sizeof(std::int64_t));
    const auto v = integer(key, need, std::max<std::int64_t>(min, std::numeric_limits<T>::min()),
                           std::min<std::int64_t>(max, std::numeric_limits<T>::max()));
    if (!v) return std::nullopt;
    return static_cast<T>(*v);
  }
  std::optional<double> number(const std::string& key, Need need);
  std::optional<bool> boolean(const std::string& key, Need need);
  std::optional<std::string> one_of(const std::string& key, Need need, const std::vector<std::string>& allowed);
  std::optional<std::vector<std::string>> strings(const std::string& key, Need need, bool allow_empty = false);
  // A non-empty list of non-empty lists of strings (argv lists: a build's commands).
  std::optional<std::vector<std::vector<std::string>>> string_lists(const std::string& key, Need need);
  std::optional<MapReader> map(const std::string& key, Need need);
  // A list of mappings.
  std::optional<std::vector<MapReader>> maps(const std::string& key, Need need);
  // The node itself, for a caller that reads free-form keys (an overlay's `set`).
  YAML::Node raw(const std::string& key, Need need) { return find(key, need); }

  // Reports unknown keys. Call once after reading every known key.
  void finish();

  // Adds a diagnostic at `key`'s position (or the mapping's, if key is absent).
  void error(const std::string& key, const std::string& message);
  const std::string& file() const { return file_; }

private:
  YAML::Node find(const std::string& key, Need need);
  std::string qualified(const std::string& key) const;
  void add(const YAML::Mark& mark, const std::string& message);
  void record(const std::string& path, const YAML::Mark& mark);
  void check_duplicates();
  // False, with a diagnostic at the scalar, when it holds a control character (NUL, CR, ESC...).
  bool text_ok(const YAML::Node& n, const std::string& what);

  YAML::Node node_;
  std::string file_;
  std::string where_;
  std::vector<Diagnostic>* diags_;
  Positions* positions_ = nullptr;
  std::set<std::string> known_;
  bool valid_ = true;
};

// Loads a YAML file into a node; parse errors become diagnostics, and so does a file that is
// not UTF-8 text (the first bad byte's line and column; comments included, since a byte that is
// not UTF-8 anywhere means the file was saved in another encoding).
std::optional<YAML::Node> load_yaml_file(const std::string& path, std::vector<Diagnostic>& diags);

// Whether `file`, all links followed, lies inside `tree` (the manifest or recipe directory, links
// followed too). A manifest that is a link out of the tree (sizes/x.yaml -> /etc/shadow) is a
// diagnostic naming the link and its target, and the caller does not read it: a link inside the
// tree stays allowed.
bool inside_tree(const std::filesystem::path& file, const std::filesystem::path& tree, std::vector<Diagnostic>& diags);

} // namespace hpcbake::manifest
