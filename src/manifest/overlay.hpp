#pragma once
// Overlays: small YAML files that override single values of the shipped manifests without forking
// them (/etc/hpcbake/manifests.d/*.yaml under --root, or --overlay PATH). Each names a manifest file
// and a path in it ("variants[0].version"); the new value replaces the shipped node before the
// strict reader reads the file, so an override obeys every rule a shipped value does. Each applied
// override is remembered with its overlay file and line (plan shows them, lint reports there).
#include "manifest/yaml_reader.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace hpcbake::manifest {

// One override as applied: `target` is the manifest file relative to the manifest directory
// ("components/nvidia-cuda-driver.yaml"), `path` the value's place in it.
struct Override {
  std::string target;
  std::string path;
  std::string value;   // the new value as YAML flow text
  std::string overlay; // the overlay file
  int line = 0;
  int column = 0;
  Pos value_at; // where the value is written in the overlay
  std::string what() const { return target + ":" + path; }
};

// One `set` entry of an overlay, not applied yet.
struct OverlayEntry {
  std::string target;
  std::string path;
  YAML::Node value;
  std::string overlay;
  Pos at;
};

// Every entry of the overlay files, in order: each path is a file, or a directory whose *.yaml
// files are read in name order. `dir` is the manifest directory the targets must exist in. A
// missing directory is no overlay; a missing file named explicitly is a diagnostic.
std::vector<OverlayEntry> read_overlays(const std::vector<std::filesystem::path>& paths,
                                        const std::filesystem::path& dir, std::vector<Diagnostic>& diags);

// Applies the entries for `target` to `node` (the parsed shipped file), in order; a later entry on
// the same path wins. A path that does not exist in the file, or a value of another type than the
// shipped one, is a diagnostic at the overlay's line.
void apply_overlays(const std::vector<OverlayEntry>& entries, const std::string& target, YAML::Node& node,
                    std::vector<Diagnostic>& diags, std::vector<Override>& applied);

// The reader reports an overridden value at the overlay's line under the shipped file's name:
// each diagnostic from diags[from] on at an applied value of `target` (its position, or later on
// its line: an item of a flow list) names the overlay instead.
void blame_overlays(const std::vector<Override>& applied, const std::string& target, const std::string& file,
                    std::vector<Diagnostic>& diags, std::size_t from);

// The overlays every command reads unless told otherwise (set once by the CLI from --overlay and
// --root): lint_manifests and load_manifests apply them.
void set_default_overlays(std::vector<std::filesystem::path> paths);
const std::vector<std::filesystem::path>& default_overlays();

} // namespace hpcbake::manifest
