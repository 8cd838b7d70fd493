#include "cli/container_cmd.hpp"
#include "cli/report.hpp"
#include "cli/test_runner.hpp"

#include "container/cdi_rdma.hpp"
#include "container/runtime.hpp"
#include "exec/runner.hpp"
#include "util/hostfs.hpp"
#include "util/json.hpp"
#include "util/preflight.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <chrono>

namespace hpcbake::cli {

namespace {

using container::Engine;

struct Target {
  Engine engine;
  std::string config;
};

std::vector<Target> targets(const ContainerCliOptions& o) {
  std::vector<Target> out;
  const std::vector<std::string> names =
      o.engines.empty() ? std::vector<std::string>{"docker", "containerd"} : o.engines;
  for (const auto& n : names) {
    const Engine e = *container::parse_engine(n);
    const std::string& given = e == Engine::docker ? o.docker_config : o.containerd_config;
    out.push_back({e, given.empty() ? container::default_config(e) : given});
  }
  return out;
}

container::Runtime runtime(const ContainerCliOptions& o) {
  container::Runtime rt;
  if (!o.binary.empty()) rt.binary = o.binary;
  return rt;
}

// The engine reads its configuration at start: restarted when it runs (systemctl try-restart).
std::string restart(Engine engine, const util::HostFs& host, bool no_restart) {
  const std::string unit = fmt::format("{}.service", container::engine_name(engine));
  if (no_restart) return fmt::format("{} not restarted (--no-restart)", unit);
  auto runner = make_runner(host);
  if (!exec::may_act_on_machine(host, *runner)) return fmt::format("{} not restarted: --root is not /", unit);
  exec::Command cmd;
  cmd.argv = {"systemctl", "try-restart", unit};
  cmd.timeout = std::chrono::seconds(120);
  auto r = runner->run(cmd);
  if (!r) return fmt::format("{} not restarted: {}", unit, r.error().message);
  if (!r->ok()) return fmt::format("{} not restarted: {}", unit, r->describe());
  return fmt::format("{} restarted if it was running", unit);
}

int cmd_configure(const ContainerCliOptions& o, const util::HostFs& host, std::ostream& out, std::ostream& err) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& t : targets(o)) {
    auto rt = runtime(o);
    rt.set_as_default = rt.enable_cdi = o.kubernetes && t.engine == Engine::containerd;
    rt.memlock_unlimited = o.rdma && t.engine == Engine::docker;
    auto c = container::configure(host, t.engine, rt, t.config);
    if (!c) return report(c.error(), err);
    const std::string note = c->changed ? restart(t.engine, host, o.no_restart) : "nothing to restart";
    if (o.json) {
      auto j = container::to_json(*c);
      j["note"] = note;
      all.push_back(j);
      continue;
    }
    out << fmt::format("container: {}: {}: {}\n", container::engine_name(t.engine), c->path.string(), c->what);
    if (c->backup)
      out << fmt::format("container: original kept in {}{}\n", c->backup->string(),
                         c->backup_created ? "" : " (from an earlier run)");
    if (c->changed) out << fmt::format("container: {}\n", note);
  }
  if (o.json) out << util::dump_json(nlohmann::json{{"schema", 1}, {"engines", all}}, 2) << "\n";
  return 0;
}

int cmd_status(const ContainerCliOptions& o, const util::HostFs& host, std::ostream& out, std::ostream& err) {
  nlohmann::json all = nlohmann::json::array();
  bool ok = true;
  for (const auto& t : targets(o)) {
    auto s = container::status(host, t.engine, runtime(o), t.config);
    if (!s) return report(s.error(), err);
    ok = ok && s->configured;
    all.push_back({{"engine", container::engine_name(t.engine)},
                   {"config", s->config},
                   {"exists", s->exists},
                   {"binary", s->binary ? nlohmann::json(*s->binary) : nlohmann::json(nullptr)},
                   {"configured", s->configured},
                   {"detail", s->detail}});
    if (!o.json)
      out << fmt::format("{:<11} {:<4} {}\n", container::engine_name(t.engine), s->configured ? "ok" : "no", s->detail);
  }
  if (o.json) out << util::dump_json(nlohmann::json{{"schema", 1}, {"engines", all}}, 2) << "\n";
  return ok ? 0 : static_cast<int>(exit_code_for(ErrorKind::smoke_test));
}

// `container cdi --rdma`: the HCAs' CDI spec, written when it differs (--dry-run: printed only).
int cmd_cdi(const ContainerCliOptions& o, const util::HostFs& host, std::ostream& out, std::ostream& err) {
  if (!o.rdma) return report(Error{ErrorKind::usage, "container cdi: say which spec: --rdma", ""}, err);
  const std::string path = o.cdi_output.empty() ? container::kRdmaCdiSpec : o.cdi_output;
  auto w = container::write_rdma_spec(host, path, o.dry_run);
  if (!w) return report(w.error(), err);
  if (o.json) {
    nlohmann::json hcas = nlohmann::json::array();
    for (const auto& h : w->devices.hcas)
      hcas.push_back({{"name", h.name}, {"nodes", h.nodes}});
    out << util::dump_json(nlohmann::json{{"schema", 1},
                                          {"path", w->path},
                                          {"kind", container::kRdmaCdiKind},
                                          {"dry_run", o.dry_run},
                                          {"changed", w->changed},
                                          {"hcas", hcas},
                                          {"shared", w->devices.shared},
                                          {"left_out", w->devices.left_out},
                                          {"spec", w->text}},
                           2)
        << "\n";
    return 0;
  }
  if (o.dry_run) out << w->text;
  for (const auto& l : w->devices.left_out)
    out << fmt::format("container: left out {}\n", l);
  const char* verb = !w->changed ? "already names" : o.dry_run ? "would name" : "names";
  std::vector<std::string> names;
  for (const auto& h : w->devices.hcas)
    names.push_back(h.name);
  out << fmt::format("container: {} {} {} HCAs ({}) as {}=NAME and {}=all{}\n", w->path, verb, names.size(),
                     util::join(names, ", "), container::kRdmaCdiKind, container::kRdmaCdiKind,
                     w->changed || o.dry_run ? "" : ": nothing changed");
  return 0;
}

} // namespace

ContainerCommands add_container_commands(CLI::App& app, ContainerCliOptions& o) {
  ContainerCommands c;
  auto* top =
      app.add_subcommand("container", "the NVIDIA runtime in Docker's daemon.json and containerd's config.toml");
  top->require_subcommand(1);
  c.configure = top->add_subcommand(
      "configure",
      "add the nvidia runtime to each engine's config (every other byte kept); restart an engine that runs");
  c.status = top->add_subcommand("status", "say whether each engine's config names the nvidia runtime (exit 6 if not)");
  for (auto* sub : {c.configure, c.status}) {
    sub->add_option("--engine", o.engines, "docker or containerd (repeatable; default: both)")
        ->check(CLI::IsMember({"docker", "containerd"}));
    sub->add_option("--docker-config", o.docker_config, "default /etc/docker/daemon.json")->option_text("PATH");
    sub->add_option("--containerd-config", o.containerd_config, "default /etc/containerd/config.toml")
        ->option_text("PATH");
    sub->add_option("--runtime-binary", o.binary, "default /usr/bin/nvidia-container-runtime")->option_text("PATH");
  }
  c.configure->add_flag("--no-restart", o.no_restart, "never restart an engine");
  c.configure->add_flag("--kubernetes", o.kubernetes,
                        "also make nvidia containerd's default runtime and enable CDI in its CRI plugin");
  c.configure->add_flag("--rdma", o.rdma, "also give Docker's containers an unlimited memlock by default (InfiniBand)");
  c.cdi =
      top->add_subcommand("cdi", "write the CDI spec of this VM's InfiniBand HCAs (/var/run/cdi/hpcbake-rdma.yaml)");
  c.cdi->add_flag("--rdma", o.rdma, "the InfiniBand HCAs (kind hpcbake/rdma): one device per HCA, and all");
  c.cdi->add_option("--output", o.cdi_output, "default /var/run/cdi/hpcbake-rdma.yaml")->option_text("PATH");
  c.cdi->add_flag("--dry-run", o.dry_run, "print the spec and what would change; write nothing");
  return c;
}

std::optional<int> run_container_command(const ContainerCommands& cmds, const ContainerCliOptions& o,
                                         const std::string& root, std::ostream& out, std::ostream& err) {
  if (!cmds.configure->parsed() && !cmds.status->parsed() && !cmds.cdi->parsed()) return std::nullopt;
  const util::HostFs host(root);
  if (cmds.status->parsed()) return cmd_status(o, host, out, err);
  if (cmds.cdi->parsed() && o.dry_run) return cmd_cdi(o, host, out, err);
  if (cmds.cdi->parsed()) {
    if (auto s = util::preflight("container cdi", host, {}); !s) return report(s.error(), err);
    return cmd_cdi(o, host, out, err);
  }
  if (auto s = util::preflight("container configure", host, {}); !s) return report(s.error(), err);
  return cmd_configure(o, host, out, err);
}

} // namespace hpcbake::cli
