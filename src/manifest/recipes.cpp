#include "manifest/recipes.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hpcbake::manifest {

namespace fs = std::filesystem;

const char* to_string(Installer installer) {
  switch (installer) {
  case Installer::nvidia_run:
    return "nvidia-run";
  case Installer::packages:
    return "packages";
  case Installer::modules_load:
    return "modules-load";
  case Installer::dkms:
    return "dkms";
  }
  return "unknown";
}

fs::path recipes_dir(const fs::path& manifest_dir) {
  fs::path dir = manifest_dir;
  if (!dir.has_filename()) dir = dir.parent_path(); // "manifests/"
  return dir.parent_path() / "drivers";
}

namespace {

std::optional<Installer> installer_of(const std::string& s) {
  for (auto i : {Installer::nvidia_run, Installer::packages, Installer::modules_load, Installer::dkms})
    if (s == to_string(i)) return i;
  return std::nullopt;
}

std::optional<RunInstaller> read_run(MapReader& r) {
  auto run = r.map("run", Need::optional);
  if (!run) return std::nullopt;
  RunInstaller ri;
  ri.args = run->strings("args", Need::required).value_or(std::vector<std::string>{});
  if (auto fl = run->map("flavour_args", Need::required)) {
    for (const char* k : {"open", "proprietary"})
      if (auto v = fl->strings(k, Need::optional, true)) ri.flavour_args[k] = *v;
    fl->finish();
  }
  ri.kernel_args = run->strings("kernel_args", Need::required).value_or(std::vector<std::string>{});
  ri.signing_args = run->strings("signing_args", Need::required).value_or(std::vector<std::string>{});
  run->finish();
  return ri;
}

} // namespace

std::map<ComponentKind, Recipe> read_recipes(const fs::path& dir, std::vector<Diagnostic>& diags, int* count) {
  std::map<ComponentKind, Recipe> recipes;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    diags.push_back({dir.string(), 0, 0, "missing driver recipe directory (drivers/ beside the manifests)"});
    return recipes;
  }
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".yaml") files.push_back(it->path());
  if (ec) diags.push_back({dir.string(), 0, 0, fmt::format("cannot list the driver recipes: {}", ec.message())});
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    if (count) ++*count;
    const std::size_t before = diags.size();
    if (!inside_tree(f, dir, diags)) continue;
    auto node = load_yaml_file(f.string(), diags);
    if (!node) continue;
    MapReader r(*node, f.string(), "", diags);
    if (!r.valid()) continue;
    Recipe rec;
    rec.file = f.string();
    if (auto v = r.integer_as<int>("schema", Need::required, 1); v && *v != 1)
      r.error("schema", "unsupported schema version (this hpcbake reads 1)");
    const auto kind = r.one_of("kind", Need::required, component_kind_names());
    rec.kind = parse_component_kind(kind.value_or("")).value_or(ComponentKind::nvidia_driver);
    if (kind && *kind + ".yaml" != f.filename().string())
      r.error("kind", fmt::format("kind '{}' must match the file name {}", *kind, f.filename().string()));
    rec.description = r.string("description", Need::required).value_or("");
    const auto inst = r.one_of("installer", Need::required, {"nvidia-run", "packages", "modules-load", "dkms"});
    rec.installer = installer_of(inst.value_or("packages")).value_or(Installer::packages);
    rec.run = read_run(r);
    if (rec.installer == Installer::nvidia_run && !rec.run)
      r.error("installer", "installer nvidia-run needs a run: section");
    if (rec.installer != Installer::nvidia_run && rec.run) r.error("run", "a run: section needs installer: nvidia-run");
    rec.dkms_name = r.string("dkms_name", Need::optional).value_or("");
    if (rec.installer == Installer::nvidia_run && rec.dkms_name.empty())
      r.error("dkms_name", "installer nvidia-run registers a DKMS package: name it (dkms_name)");
    rec.modules = r.strings("modules", Need::optional, true).value_or(std::vector<std::string>{});
    rec.modules_load = r.strings("modules_load", Need::optional, true).value_or(std::vector<std::string>{});
    rec.service = r.string("service", Need::optional).value_or("");
    rec.service_unit = r.string("service_unit", Need::optional).value_or("");
    if (!rec.service_unit.empty() && rec.service.empty())
      r.error("service_unit", "a service_unit needs the service it defines (service:)");
    if (auto rp = r.map("repository_packages", Need::optional)) {
      for (const char* flavour : {"open", "proprietary"})
        if (auto list = rp->strings(flavour, Need::optional)) rec.repository_packages[flavour] = *list;
      rp->finish();
    }
    rec.hold = r.boolean("hold", Need::optional).value_or(false);
    r.finish();
    if (diags.size() != before) continue;
    recipes[rec.kind] = std::move(rec);
  }
  return recipes;
}

} // namespace hpcbake::manifest
