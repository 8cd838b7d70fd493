#include "cli/rdma_cmd.hpp"
#include "cli/report.hpp"
#include "cli/test_runner.hpp"
#include "util/preflight.hpp"

#include "detect/os_release.hpp"
#include "detect/platform.hpp"
#include "exec/runner.hpp"
#include "manifest/manifests.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"
#include "util/json.hpp"
#include "util/strings.hpp"
#include "util/utf8.hpp"
#include "waagent/config.hpp"
#include "waagent/rdma.hpp"

#include <fmt/format.h>

namespace hpcbake::cli {

namespace {

using waagent::RdmaMode;

// What the verb is judged by: the manifests (only needed for --size or --distro, else used
// to map this host's os-release), the distro, the wanted state.
struct Context {
  std::optional<manifest::Manifests> manifests;
  std::optional<manifest::DistroManifest> distro;
  std::optional<waagent::Desired> from_size;
  waagent::RdmaOptions opts;
};

Result<Context> context(const RdmaCliOptions& o, const util::HostFs& host, const std::string& manifests_dir) {
  Context c;
  auto m = manifest::load_manifests(manifest::manifest_dir_or_default(manifests_dir));
  if (!m && (!o.size.empty() || !o.distro.empty())) return std::unexpected(m.error());
  if (m) c.manifests = std::move(*m);
  if (!o.distro.empty()) {
    const auto* d = c.manifests->find_distro_named(o.distro);
    if (!d)
      return fail(ErrorKind::unsupported, fmt::format("unsupported distro '{}'", o.distro),
                  "run 'hpcbake manifest lint' to list them");
    c.distro = *d;
  } else if (c.manifests) {
    if (auto os = detect::read_os_release(host))
      if (const auto* d = c.manifests->match_distro(os->id(), os->version_id())) c.distro = *d;
  }
  if (!o.size.empty()) {
    const auto* s = c.manifests->find_size(o.size);
    if (!s)
      return fail(ErrorKind::unsupported, fmt::format("unknown VM size '{}'", util::excerpt(o.size)),
                  "`hpcbake sizes` lists the sizes hpcbake knows");
    c.from_size = waagent::desired_for(*s);
  }
  c.opts.config = c.distro && !c.distro->waagent_config.empty() ? c.distro->waagent_config : waagent::default_config;
  c.opts.unit = detect::agent_unit(host, c.distro ? &*c.distro : nullptr);
  return c;
}

std::string value_text(const std::optional<std::string>& v) {
  return v ? *v : "(unset)";
}

void print_status(const waagent::RdmaStatus& s, std::ostream& out) {
  out << fmt::format("config     {}{}\n", s.path.string(), s.exists ? "" : " (does not exist)");
  for (const auto& k : s.keys) {
    const std::string where =
        k.line
            ? fmt::format("line {}{}", k.line, k.assignments > 1 ? fmt::format(" (the last of {})", k.assignments) : "")
            : "";
    out << fmt::format("{:<20} {}\n", k.key,
                       where.empty() ? value_text(k.value) : fmt::format("{:<8} {}", value_text(k.value), where));
  }
  out << fmt::format("agent      RDMA setup at start: {}; driver update: {}; driver check: {}\n",
                     s.rdma_enabled ? "on" : "off", s.driver_update ? "on" : "off", s.driver_check ? "on" : "off");
  if (s.wanted) {
    out << fmt::format("wanted     {} ({})\n", waagent::mode_name(s.wanted->mode), s.wanted->why);
    out << fmt::format("matches    {}\n", *s.matches ? "yes" : "no: " + util::join(s.differences, "; "));
  }
  out << fmt::format("backup     {}\n", s.backup ? s.backup->string() : "none");
}

int cmd_status(const Context& c, const RdmaCliOptions& o, const util::HostFs& host, std::ostream& out,
               std::ostream& err) {
  auto s = waagent::rdma_status(host, c.from_size, c.opts);
  if (!s) return report(s.error(), err);
  if (o.json)
    out << util::dump_json(waagent::to_json(*s), 2) << "\n";
  else
    print_status(*s, out);
  return 0;
}

int cmd_apply(Context c, RdmaMode mode, const RdmaCliOptions& o, const util::HostFs& host, std::ostream& out,
              std::ostream& err) {
  const char* verb = mode == RdmaMode::on ? "enable" : "disable";
  if (c.from_size && c.from_size->mode != mode)
    return report(
        Error{ErrorKind::unsupported,
              fmt::format("rdma {} --size {}: the size wants RDMA {}: {}", verb, o.size,
                          waagent::mode_name(c.from_size->mode), c.from_size->why),
              fmt::format("drop --size to {} anyway; 'hpcbake rdma status --size {}' compares the file with the size",
                          verb, o.size)},
        err);
  const waagent::Desired desired = c.from_size ? *c.from_size : waagent::desired_without_size(mode);
  c.opts.missing = o.create ? waagent::Missing::create : waagent::Missing::fail;
  if (o.no_restart) {
    c.opts.restart = waagent::Restart::never;
    c.opts.no_restart_reason = "--no-restart";
  }
  auto runner = make_runner(host);
  if (!o.no_restart && !exec::may_act_on_machine(host, *runner)) {
    c.opts.restart = waagent::Restart::never;
    c.opts.no_restart_reason = "--root is not /, so this machine's agent does not read that file";
  }
  auto r = waagent::apply_rdma(host, desired, *runner, c.opts);
  if (!r) return report(r.error(), err);
  if (o.json) {
    auto j = waagent::to_json(*r);
    if (auto s = waagent::rdma_status(host, desired, c.opts)) j["status"] = waagent::to_json(*s);
    out << util::dump_json(j, 2) << "\n";
    return 0;
  }
  for (const auto& e : r->edits)
    out << fmt::format("rdma: {}: {}={} (line {}, {}; was {})\n", r->path.string(), e.key, e.after, e.line,
                       waagent::how_name(e.how), value_text(e.before));
  if (r->created) out << fmt::format("rdma: {}: created\n", r->path.string());
  if (r->backup)
    out << fmt::format("rdma: original kept in {}{}\n", r->backup->string(),
                       r->backup_created ? "" : " (from an earlier run)");
  out << fmt::format("rdma: {}\n", r->note);
  return 0;
}

} // namespace

RdmaCommands add_rdma_commands(CLI::App& app, RdmaCliOptions& o) {
  RdmaCommands c;
  auto* rdma = app.add_subcommand("rdma", "the Azure Linux Agent's RDMA settings in /etc/waagent.conf");
  rdma->require_subcommand(1);
  c.enable = rdma->add_subcommand("enable",
                                  "set OS.EnableRDMA=y (and OS.UpdateRdmaDriver not y); restart the agent if it runs");
  c.disable = rdma->add_subcommand(
      "disable", "set each of OS.EnableRDMA, OS.UpdateRdmaDriver, OS.CheckRdmaDriver that reads y to n");
  c.status =
      rdma->add_subcommand("status", "print the RDMA keys as the agent reads them, and whether they match --size");
  for (auto* sub : {c.enable, c.disable, c.status}) {
    sub->add_option("--size", o.size, "VM size whose manifest decides what is wanted (default: the verb alone)")
        ->option_text("VM_SIZE");
    sub->add_option("--distro", o.distro, "distro manifest id: config path and agent unit (default: this host's)")
        ->option_text("ID");
  }
  for (auto* sub : {c.enable, c.disable}) {
    sub->add_flag("--no-restart", o.no_restart, "never restart the agent");
  }
  c.enable->add_flag("--create", o.create, "write a config holding only the settings when none exists");
  return c;
}

std::optional<int> run_rdma_command(const RdmaCommands& cmds, const RdmaCliOptions& o, const std::string& root,
                                    const std::string& manifests, std::ostream& out, std::ostream& err) {
  if (!cmds.enable->parsed() && !cmds.disable->parsed() && !cmds.status->parsed()) return std::nullopt;
  const util::HostFs host(root);
  if (!cmds.status->parsed()) {
    // The distro manifest names the config file edited and the unit restarted as root.
    if (auto s = util::preflight(cmds.enable->parsed() ? "rdma enable" : "rdma disable", host,
                                 {manifest::manifest_trust(manifests)});
        !s)
      return report(s.error(), err);
  }
  auto c = context(o, host, manifests);
  if (!c) return report(c.error(), err);
  if (cmds.status->parsed()) return cmd_status(*c, o, host, out, err);
  return cmd_apply(std::move(*c), cmds.enable->parsed() ? RdmaMode::on : RdmaMode::off, o, host, out, err);
}

} // namespace hpcbake::cli
