#include "container/runtime.hpp"

#include "util/config_file.hpp"

#include <fmt/format.h>

namespace hpcbake::container {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* engine_name(Engine engine) {
  return engine == Engine::docker ? "docker" : "containerd";
}

std::optional<Engine> parse_engine(std::string_view name) {
  if (name == "docker") return Engine::docker;
  if (name == "containerd") return Engine::containerd;
  return std::nullopt;
}

const char* default_config(Engine engine) {
  return engine == Engine::docker ? "/etc/docker/daemon.json" : "/etc/containerd/config.toml";
}

namespace {

Result<TextEdit> edit(Engine engine, std::string_view text, const Runtime& rt, const std::string& where) {
  if (engine != Engine::docker) return edit_containerd(text, rt, where);
  HPCBAKE_TRY_ASSIGN(auto e, edit_docker(text, rt, where));
  if (!rt.memlock_unlimited) return e;
  HPCBAKE_TRY_ASSIGN(auto m, edit_docker_ulimit(e.text, "memlock", -1, -1, where));
  if (!m.changed) return e;
  m.what = e.changed ? e.what + ", " + m.what : m.what;
  return m;
}

Result<std::optional<std::string>> read_runtime(Engine engine, std::string_view text, const Runtime& rt,
                                                const std::string& where) {
  return engine == Engine::docker ? docker_runtime(text, rt.name, where) : containerd_runtime(text, rt.name, where);
}

} // namespace

Result<Change> configure(const util::HostFs& host, Engine engine, const Runtime& rt, const std::string& config) {
  Change c;
  c.engine = engine;
  c.config = config;
  HPCBAKE_TRY_ASSIGN(c.path, util::follow_links(host, config));
  const fs::path backup = host.resolve(config + kBackupSuffix);
  std::error_code ec;
  if (fs::exists(backup, ec)) c.backup = backup;
  HPCBAKE_TRY_ASSIGN(const auto cur, util::read_current(c.path));
  HPCBAKE_TRY_ASSIGN(const auto e, edit(engine, cur.text, rt, c.path.string()));
  if (!e.changed) {
    c.what = fmt::format("{} already names the {} runtime ({}): nothing changed", config, rt.name, rt.binary);
    return c;
  }
  c.created = !cur.exists;
  c.what = e.what;
  HPCBAKE_TRY(util::check_writable(cur, fmt::format("the {} runtime ({})", rt.name, rt.binary)));
  HPCBAKE_TRY_ASSIGN(const auto written, util::write_edited(cur, backup, e.text, kCrashBeforeRename));
  c.backup = written.backup;
  c.backup_created = written.backup_created;
  c.changed = true;
  return c;
}

Result<RuntimeStatus> status(const util::HostFs& host, Engine engine, const Runtime& rt, const std::string& config) {
  RuntimeStatus s;
  s.engine = engine;
  s.config = config;
  HPCBAKE_TRY_ASSIGN(const fs::path path, util::follow_links(host, config));
  HPCBAKE_TRY_ASSIGN(const auto cur, util::read_current(path));
  s.exists = cur.exists;
  if (!cur.exists) {
    s.detail = fmt::format("{} does not exist: {} has no {} runtime", config, engine_name(engine), rt.name);
    return s;
  }
  HPCBAKE_TRY_ASSIGN(s.binary, read_runtime(engine, cur.text, rt, path.string()));
  s.configured = s.binary && *s.binary == rt.binary;
  if (!s.binary)
    s.detail = fmt::format("{} names no {} runtime", config, rt.name);
  else if (!s.configured)
    s.detail = fmt::format("{} runs {} for the {} runtime, not {}", config, *s.binary, rt.name, rt.binary);
  else
    s.detail = fmt::format("{}: runtime {} is {}", config, rt.name, rt.binary);
  return s;
}

json to_json(const Change& c) {
  return {{"engine", engine_name(c.engine)},
          {"config", c.config},
          {"path", c.path.string()},
          {"changed", c.changed},
          {"created", c.created},
          {"what", c.what},
          {"backup", c.backup ? json(c.backup->string()) : json(nullptr)},
          {"backup_created", c.backup_created}};
}

} // namespace hpcbake::container
