#include "cli/app.hpp"

#include "detect/host.hpp"
#include "manifest/manifests.hpp"
#include "plan/plan.hpp"
#include "util/build_config.hpp"
#include "util/error.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <optional>

namespace hpcbake::cli {

namespace {

struct Options {
  std::string root = "/";
  std::string manifests;
  std::string imds_url;
  bool no_imds = false;
  bool json = false;
  std::string size;
  std::string distro;
  std::string driver;
  std::string lint_dir;
};

int report(const Error& e, std::ostream& err) {
  err << "hpcbake: error: " << e.message << "\n";
  if (!e.hint.empty()) err << "  hint: " << e.hint << "\n";
  return static_cast<int>(exit_code_for(e.kind));
}

std::filesystem::path manifest_dir(const Options& o) {
  return o.manifests.empty() ? manifest::default_manifest_dir() : std::filesystem::path(o.manifests);
}

// The metadata service is asked only about the real machine, unless an endpoint is
// named explicitly (tests and fixture roots).
detect::ImdsOptions imds_options(const Options& o, const util::HostFs& host) {
  detect::ImdsOptions imds;
  const char* env = std::getenv("HPCBAKE_IMDS_URL");
  if (!o.imds_url.empty()) imds.url = o.imds_url;
  else if (env && *env) imds.url = env;
  else if (!host.is_real_root()) {
    imds.enabled = false;
  }
  if (o.no_imds) imds.enabled = false;
  return imds;
}

int cmd_detect(const Options& o, std::ostream& out, std::ostream& err) {
  const util::HostFs host(o.root);
  // Manifests map os-release to a distro id and vmSize to a size; detect still works without them.
  auto manifests = manifest::load_manifests(manifest_dir(o));
  if (!manifests) err << "hpcbake: warning: manifests not loaded, distro and size are not mapped:\n  "
                      << manifests.error().message << "\n";
  util::CurlHttpClient http;
  auto facts = detect::detect_host(host, http, imds_options(o, host), manifests ? &*manifests : nullptr);
  if (o.json) out << detect::to_json(facts).dump(2) << "\n";
  else out << detect::render_text(facts);
  return 0;
}

int cmd_plan(const Options& o, std::ostream& out, std::ostream& err) {
  auto manifests = manifest::load_manifests(manifest_dir(o));
  if (!manifests) return report(manifests.error(), err);
  const util::HostFs host(o.root);
  auto imds = imds_options(o, host);
  if (!o.size.empty()) imds.enabled = false; // the size is given: no need to ask the network
  util::CurlHttpClient http;
  const auto facts = detect::detect_host(host, http, imds, &*manifests);

  plan::PlanRequest req;
  req.size = o.size;
  if (req.size.empty()) {
    if (!facts.imds.on_azure)
      return report({ErrorKind::usage, fmt::format("no --size given, and the VM size is unknown: {}", facts.imds.status),
                     "pass --size VM_SIZE, e.g. --size Standard_ND96isr_H100_v5"},
                    err);
    req.size = facts.imds.vm_size;
  }
  req.distro = o.distro;
  if (req.distro.empty()) {
    if (facts.distro_id.empty())
      return report({ErrorKind::unsupported,
                     facts.os ? fmt::format("this host's distro (ID={} VERSION_ID={}, {}) has no manifest",
                                            facts.os->id(), facts.os->version_id(), facts.os->source)
                              : facts.os_error,
                     "pass --distro ID-VERSION to plan for another distro; run 'hpcbake manifest lint' to list them"},
                    err);
    req.distro = facts.distro_id;
  }
  if (!o.driver.empty()) req.driver_kind = o.driver;
  req.host = &facts;
  auto p = plan::make_plan(*manifests, req);
  if (!p) return report(p.error(), err);
  if (o.json) out << plan::to_json(*p).dump(2) << "\n";
  else out << plan::render_text(*p);
  return 0;
}

int cmd_lint(const Options& o, std::ostream& out, std::ostream& err) {
  const std::filesystem::path dir = o.lint_dir.empty() ? manifest_dir(o) : std::filesystem::path(o.lint_dir);
  auto result = manifest::lint_manifests(dir);
  for (const auto& d : result.diagnostics) err << d.str() << "\n";
  const auto& m = result.manifests;
  if (!result.diagnostics.empty()) {
    err << fmt::format("hpcbake: {} problem(s) in {} file(s) under {}\n", result.diagnostics.size(), result.files,
                       dir.string());
    return static_cast<int>(ExitCode::usage);
  }
  out << fmt::format("{}: {} files clean ({} sizes, {} distros, {} components)\n", dir.string(), result.files,
                     m.sizes.size(), m.distros.size(), m.components.size());
  return 0;
}

} // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Options o;
  CLI::App app{"hpcbake: turn a Linux VM into a working GPU/InfiniBand machine, then into an image", "hpcbake"};
  app.set_version_flag("--version", std::string("hpcbake ") + build::version);
  app.require_subcommand(1);
  app.add_option("--root", o.root, "read every host path under DIR (a fixture tree can stand in for a machine)")
      ->option_text("DIR");
  app.add_option("--manifests", o.manifests,
                 "manifest directory (default: $HPCBAKE_MANIFESTS, the installed manifests, then the source tree's)")
      ->option_text("DIR");
  app.add_option("--imds-url", o.imds_url, "metadata service endpoint (default: $HPCBAKE_IMDS_URL or Azure's)")
      ->option_text("URL");
  app.add_flag("--no-imds", o.no_imds, "do not ask the metadata service");

  auto* detect = app.add_subcommand("detect", "print this machine's facts, each with where it came from");
  detect->add_flag("--json", o.json, "machine-readable output");

  auto* planc = app.add_subcommand("plan", "print what install would do for a size and distro");
  planc->add_option("--size", o.size, "VM size (default: from the metadata service)")->option_text("VM_SIZE");
  planc->add_option("--distro", o.distro, "distro manifest id (default: this host's)")->option_text("ID-VERSION");
  planc->add_option("--driver", o.driver, "driver kind; must agree with the size")
      ->check(CLI::IsMember({"cuda", "grid"}));
  planc->add_flag("--json", o.json, "machine-readable output");

  auto* manifest_cmd = app.add_subcommand("manifest", "manifest tools");
  manifest_cmd->require_subcommand(1);
  auto* lint = manifest_cmd->add_subcommand("lint", "check every manifest; errors name file:line:column");
  lint->add_option("DIR", o.lint_dir, "manifest directory (default: --manifests)");

  std::vector<std::string> rev(args.rbegin(), args.rend() - 1);
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion&) {
    out << "hpcbake " << build::version << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    err << "hpcbake: usage error: " << e.what() << "\n  hint: run 'hpcbake --help'\n";
    return static_cast<int>(ExitCode::usage);
  }
  try {
    if (detect->parsed()) return cmd_detect(o, out, err);
    if (planc->parsed()) return cmd_plan(o, out, err);
    if (lint->parsed()) return cmd_lint(o, out, err);
  } catch (const std::exception& e) {
    err << "hpcbake: internal error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::internal);
  }
  return static_cast<int>(ExitCode::usage);
}

} // namespace hpcbake::cli
