#include "driver/recipe.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hpcbake::driver {

namespace fs = std::filesystem;
using manifest::MapReader;
using manifest::Need;

const Recipe* Recipes::find(const std::string& kind) const {
  auto it = by_kind.find(kind);
  return it == by_kind.end() ? nullptr : &it->second;
}

namespace {

std::map<std::string, std::vector<std::string>> string_lists(MapReader& parent, const std::string& key,
                                                             const std::vector<std::string>& allowed) {
  std::map<std::string, std::vector<std::string>> out;
  auto m = parent.map(key, Need::optional);
  if (!m) return out;
  for (const auto& k : allowed)
    if (auto v = m->strings(k, Need::optional, true)) out[k] = *v;
  m->finish();
  return out;
}

std::string substitute(std::string s, const std::map<std::string, std::string>& vars) {
  for (const auto& [k, v] : vars) s = util::replace_all(std::move(s), "{" + k + "}", v);
  return s;
}

} // namespace

Result<Recipes> load_recipes(const fs::path& dir, std::vector<manifest::Diagnostic>* out_diags) {
  std::vector<manifest::Diagnostic> diags;
  Recipes recipes;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  if (ec) return fail(ErrorKind::manifest, fmt::format("{}: cannot read the driver recipes: {}", dir.string(), ec.message()));
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    auto node = manifest::load_yaml_file(f.string(), diags);
    if (!node) continue;
    MapReader r(*node, f.string(), "", diags);
    if (!r.valid()) continue;
    Recipe rec;
    rec.file = f.string();
    if (auto v = r.integer("schema", Need::required, 1); v && *v != 1) r.error("schema", "unsupported schema version (this hpcbake reads 1)");
    rec.kind = r.string("kind", Need::required).value_or("");
    if (!rec.kind.empty() && rec.kind + ".yaml" != f.filename().string())
      r.error("kind", fmt::format("kind '{}' must match the file name {}", rec.kind, f.filename().string()));
    rec.description = r.string("description", Need::required).value_or("");
    rec.installer = r.one_of("installer", Need::required, {"nvidia-run", "packages", "modules-load", "dkms"}).value_or("");
    if (auto run = r.map("run", Need::optional)) {
      RunInstaller ri;
      ri.args = run->strings("args", Need::required).value_or(std::vector<std::string>{});
      ri.flavour_args = string_lists(*run, "flavour_args", {"open", "proprietary"});
      ri.kernel_args = run->strings("kernel_args", Need::required).value_or(std::vector<std::string>{});
      ri.signing_args = run->strings("signing_args", Need::required).value_or(std::vector<std::string>{});
      run->finish();
      rec.run = ri;
    }
    if (rec.installer == "nvidia-run" && !rec.run) r.error("run", "installer nvidia-run needs a run: section");
    rec.dkms_name = r.string("dkms_name", Need::optional).value_or("");
    rec.modules = r.strings("modules", Need::optional, true).value_or(std::vector<std::string>{});
    rec.modules_load = r.strings("modules_load", Need::optional, true).value_or(std::vector<std::string>{});
    rec.packages = string_lists(r, "packages", {"apt", "dnf"});
    rec.packages_from_component = r.boolean("packages_from_component", Need::optional).value_or(false);
    rec.hold = r.boolean("hold", Need::optional).value_or(false);
    rec.service = r.string("service", Need::optional).value_or("");
    r.finish();
    if (recipes.by_kind.contains(rec.kind)) r.error("kind", fmt::format("kind '{}' is defined twice", rec.kind));
    recipes.by_kind[rec.kind] = rec;
  }
  if (out_diags) *out_diags = diags;
  if (!diags.empty()) {
    std::vector<std::string> lines;
    for (const auto& d : diags) lines.push_back(d.str());
    return fail(ErrorKind::manifest, fmt::format("driver recipes under {} have {} problem(s):\n  {}", dir.string(), diags.size(), util::join(lines, "\n  ")),
                "fix the recipe files named above");
  }
  return recipes;
}

Result<std::vector<std::string>> run_installer_argv(const Recipe& recipe, const RunRequest& q) {
  if (!recipe.run)
    return fail(ErrorKind::usage, fmt::format("driver kind {} is not installed from a .run file ({})", recipe.kind, recipe.file));
  const auto& run = *recipe.run;
  auto flav = run.flavour_args.find(q.flavour);
  if (flav == run.flavour_args.end())
    return fail(ErrorKind::unsupported, fmt::format("{} does not offer the '{}' kernel modules ({})", recipe.kind, q.flavour, recipe.file),
                "use the flavour the VM size's manifest names (driver.module_flavour)");
  if (q.signing_key.empty() != q.signing_cert.empty())
    return fail(ErrorKind::usage, "a signing key needs its certificate, and the other way round");
  const std::map<std::string, std::string> vars = {
      {"kernel", q.kernel}, {"key", q.signing_key.string()}, {"cert", q.signing_cert.string()}};
  std::vector<std::string> argv = {q.run_file.string()};
  for (const auto& a : run.args) argv.push_back(substitute(a, vars));
  for (const auto& a : flav->second) argv.push_back(substitute(a, vars));
  for (const auto& a : run.kernel_args) argv.push_back(substitute(a, vars));
  if (!q.signing_key.empty())
    for (const auto& a : run.signing_args) argv.push_back(substitute(a, vars));
  return argv;
}

} // namespace hpcbake::driver
