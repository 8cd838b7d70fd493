#include "waagent/rdma.hpp"

#include "util/config_file.hpp"
#include "util/strings.hpp"
#include "waagent/config.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

namespace hpcbake::waagent {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// One line of the config: the text the agent parses and the line ending that follows it.
// A CRLF ending is kept apart so that edits never touch it.
struct Line {
  std::string_view body;
  std::string_view eol; // "\n", "\r\n", or "" for a last line without a newline
};

std::vector<Line> split_lines(std::string_view text) {
  std::vector<Line> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto nl = text.find('\n', pos);
    if (nl == std::string_view::npos) {
      lines.push_back({text.substr(pos), {}});
      break;
    }
    std::size_t end = nl;
    if (end > pos && text[end - 1] == '\r') --end;
    lines.push_back({text.substr(pos, end - pos), text.substr(end, nl + 1 - end)});
    pos = nl + 1;
  }
  return lines;
}

// Past the whitespace at `i`: every character Python's str.strip() removes, as the agent
// strips keys and values (config.hpp), not only blanks.
std::size_t skip_spaces(std::string_view s, std::size_t i) {
  while (const std::size_t n = space_at(s, i))
    i += n;
  return i;
}

// An assignment the agent reads: no '#' in column 0, a '=', and the stripped key before it.
bool is_active_assignment(std::string_view body, std::string_view key) {
  const auto a = parse_assignment(body);
  return a && a->key == key;
}

// A commented-out assignment worth uncommenting: '#' in column 0, whitespace, the key,
// whitespace, '=', whitespace, a one-word value (optionally quoted), whitespace, then nothing
// or a comment. Returns the offset of the key, i.e. where the uncommented line starts. Prose
// such as "# OS.EnableRDMA=y is for HPC images" is not an assignment and is left alone.
std::optional<std::size_t> commented_assignment(std::string_view body, std::string_view key) {
  if (!body.starts_with('#')) return std::nullopt;
  std::size_t i = skip_spaces(body, 1);
  const std::size_t key_at = i;
  if (body.substr(i, key.size()) != key) return std::nullopt;
  i = skip_spaces(body, i + key.size());
  if (i >= body.size() || body[i] != '=') return std::nullopt;
  i = skip_spaces(body, i + 1);
  const bool quoted = i < body.size() && body[i] == '"';
  if (quoted) ++i;
  while (i < body.size() && space_at(body, i) == 0 && body[i] != '#' && body[i] != '"')
    ++i;
  if (quoted) {
    if (i >= body.size() || body[i] != '"') return std::nullopt;
    ++i;
  }
  i = skip_spaces(body, i);
  if (i < body.size() && body[i] != '#') return std::nullopt;
  return key_at;
}

// `body` (an assignment) with its value replaced by `value`: the key, the whitespace around
// the value and any trailing comment stay. The value goes in bare, replacing any quotes,
// because the agent strips '"' before stripping whitespace ("\"y\"\r" reads as y).
std::string with_value(std::string_view body, std::string_view value) {
  const auto a = parse_assignment(body);
  if (!a) return std::string(body); // callers pass assignments only
  std::string out(body.substr(0, a->value_begin));
  out += value;
  out += body.substr(a->value_end);
  return out;
}

std::string join_lines(const std::vector<std::string>& bodies, const std::vector<std::string>& eols) {
  std::string out;
  for (std::size_t i = 0; i < bodies.size(); ++i)
    out += bodies[i] + eols[i];
  return out;
}

bool reads_on(const std::optional<std::string>& v) {
  return v && util::iequals(*v, "y");
}

std::string describe(const Setting& s) {
  return s.rule == Rule::equals ? fmt::format("{}={}", s.key, s.value) : fmt::format("{} off", s.key);
}

std::string settings_text(const std::vector<Setting>& settings) {
  std::vector<std::string> parts;
  for (const auto& s : settings)
    parts.push_back(describe(s));
  return util::join(parts, ", ");
}

} // namespace

bool satisfied(std::string_view conf_text, const Setting& s) {
  const auto v = effective_value(conf_text, s.key);
  if (s.rule == Rule::equals) return v && util::iequals(*v, s.value);
  return !reads_on(v);
}

const char* how_name(Edit::How how) {
  switch (how) {
  case Edit::How::in_place:
    return "in-place";
  case Edit::How::uncommented:
    return "uncommented";
  case Edit::How::appended:
    return "appended";
  }
  return "unknown";
}

EditResult plan_edit(std::string_view input, const std::vector<Setting>& settings) {
  EditResult r{std::string(input), {}};
  for (const auto& s : settings) {
    if (satisfied(r.text, s)) continue;
    const auto lines = split_lines(r.text);
    std::vector<std::string> bodies, eols;
    for (const auto& l : lines) {
      bodies.emplace_back(l.body);
      eols.emplace_back(l.eol);
    }
    Edit e{s.key, effective_value(r.text, s.key), s.value, 0, Edit::How::in_place};
    std::optional<std::size_t> active, commented;
    std::size_t commented_key_at = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (is_active_assignment(lines[i].body, s.key))
        active = i;
      else if (auto at = commented_assignment(lines[i].body, s.key)) {
        commented = i;
        commented_key_at = *at;
      }
    }
    if (active) {
      bodies[*active] = with_value(bodies[*active], s.value);
      e.line = *active + 1;
    } else if (commented) {
      bodies[*commented] = with_value(bodies[*commented].substr(commented_key_at), s.value);
      e.line = *commented + 1;
      e.how = Edit::How::uncommented;
    } else {
      // Appended with the file's own line ending; a file without a final newline keeps
      // having none, and an empty file gets one line.
      std::string eol = "\n";
      for (const auto& l : eols)
        if (!l.empty()) eol = l;
      std::string last_eol = eol;
      if (!bodies.empty() && eols.back().empty()) {
        eols.back() = eol; // end the unterminated last line...
        last_eol.clear();  // ...and leave the new one unterminated instead
      }
      bodies.push_back(fmt::format("{}={}", s.key, s.value));
      eols.push_back(last_eol);
      e.line = bodies.size();
      e.how = Edit::How::appended;
    }
    r.text = join_lines(bodies, eols);
    r.edits.push_back(std::move(e));
  }
  return r;
}

std::string edit_config(std::string_view text, const std::vector<Setting>& settings) {
  return plan_edit(text, settings).text;
}

const char* mode_name(RdmaMode mode) {
  return mode == RdmaMode::on ? "on" : "off";
}

std::vector<Setting> rdma_settings(RdmaMode mode) {
  if (mode == RdmaMode::on) return {{kEnableRdma, "y", Rule::equals}, {kUpdateRdmaDriver, "n", Rule::not_on}};
  return {
      {kEnableRdma, "n", Rule::not_on}, {kUpdateRdmaDriver, "n", Rule::not_on}, {kCheckRdmaDriver, "n", Rule::not_on}};
}

Desired desired_for(const manifest::SizeManifest& size) {
  if (!size.infiniband) return {RdmaMode::off, fmt::format("{} has no InfiniBand ({})", size.size, size.file)};
  if (!size.infiniband->ipoib)
    return {RdmaMode::off,
            fmt::format("{} declares ipoib: false ({}): the agent's IPoIB setup is not wanted", size.size, size.file)};
  return {RdmaMode::on, fmt::format("{} has InfiniBand ({} port{}) with IPoIB: the agent assigns the IPoIB addresses",
                                    size.size, size.infiniband->ports, size.infiniband->ports == 1 ? "" : "s")};
}

Desired desired_without_size(RdmaMode mode) {
  return {mode, mode == RdmaMode::on
                    ? "requested without --size: OS.EnableRDMA=y, as every InfiniBand size with IPoIB wants"
                    : "requested without --size: the agent's RDMA setup off"};
}

std::optional<std::string> installed_agent_unit(const util::HostFs& host, const manifest::DistroManifest* distro) {
  if (distro && !distro->waagent_service.empty()) return distro->waagent_service;
  for (const char* unit : {"walinuxagent", "waagent"})
    for (const char* dir :
         {"/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"})
      if (host.exists(fmt::format("{}/{}.service", dir, unit))) return unit;
  return std::nullopt;
}

Result<RdmaStatus> rdma_status(const util::HostFs& host, const std::optional<Desired>& wanted,
                               const RdmaOptions& opts) {
  RdmaStatus s;
  s.config = opts.config;
  HPCBAKE_TRY_ASSIGN(auto path, util::follow_links(host, opts.config));
  s.path = path;
  std::error_code ec;
  // Read inside the root (not through s.path): a directory or FIFO there is named, never a hang.
  HPCBAKE_TRY_ASSIGN(auto content, host.read_checked(opts.config, util::host_file::config));
  s.exists = content.has_value();
  std::string text = std::move(content).value_or("");
  HPCBAKE_TRY(check_agent_can_decode(s.path, text));
  const auto lines = split_lines(text);
  for (const char* key : {kEnableRdma, kUpdateRdmaDriver, kCheckRdmaDriver}) {
    KeyStatus k{key, effective_value(text, key), 0, 0};
    for (std::size_t i = 0; i < lines.size(); ++i)
      if (is_active_assignment(lines[i].body, key)) {
        k.line = i + 1;
        ++k.assignments;
      }
    s.keys.push_back(std::move(k));
  }
  // conf.py: enable_rdma() ORs the three switches (each defaulting to off);
  // enable_check_rdma_driver() defaults to on.
  s.rdma_enabled = reads_on(s.keys[0].value) || reads_on(s.keys[1].value) || reads_on(s.keys[2].value);
  s.driver_update = reads_on(s.keys[1].value);
  s.driver_check = !(s.keys[2].value && util::iequals(*s.keys[2].value, "n"));
  if (wanted) {
    s.wanted = *wanted;
    for (const auto& setting : rdma_settings(wanted->mode))
      if (!satisfied(text, setting)) {
        const auto v = effective_value(text, setting.key);
        s.differences.push_back(fmt::format("{} is {}; wants {}", setting.key, v ? *v : std::string("unset"),
                                            setting.rule == Rule::equals ? setting.value : "anything but y"));
      }
    if (!s.exists && wanted->mode == RdmaMode::on)
      s.differences.insert(s.differences.begin(), "the config does not exist");
    s.matches = s.differences.empty();
  }
  const fs::path backup = host.resolve(opts.config + kBackupSuffix);
  if (fs::exists(backup, ec)) s.backup = backup;
  return s;
}

namespace {

// The config as it is now. A missing config is either a no-op (the agent's defaults already
// give what is wanted: `c.note` says so and `done` is set), refused, or created from nothing
// (Missing::create).
struct Current {
  util::CurrentFile file;
  bool done = false;
};

Result<Current> read_current(RdmaChange& c, const fs::path& named, const std::vector<Setting>& settings,
                             const RdmaOptions& opts) {
  Current cur;
  HPCBAKE_TRY_ASSIGN(cur.file, util::read_current(c.path));
  if (cur.file.exists) return cur;
  // No config: the agent would use its defaults, which already leave RDMA off.
  if (plan_edit("", settings).edits.empty()) {
    c.note = fmt::format("{} does not exist: the agent's defaults leave RDMA off", named.string());
    cur.done = true;
    return cur;
  }
  if (opts.missing == Missing::fail)
    return fail(ErrorKind::unsupported,
                fmt::format("{} does not exist{}: the Azure Linux Agent (waagent) is not installed, or keeps its "
                            "config elsewhere",
                            named.string(), c.path != named ? fmt::format(" (a symlink to {})", c.path.string()) : ""),
                fmt::format("install the agent (Debian: apt-get install waagent; Ubuntu: walinuxagent; RHEL-family: "
                            "WALinuxAgent) and run again, or pass --create to write a config holding only {}",
                            settings_text(settings)));
  c.created = true;
  return cur;
}

std::string planned_text(const RdmaChange& c) {
  std::vector<std::string> planned;
  for (const auto& e : c.edits)
    planned.push_back(fmt::format("{}={}", e.key, e.after));
  return util::join(planned, " and ");
}

// The daemon reads the RDMA keys only at start: restart it when it runs.
Result<RdmaChange> restart_agent(RdmaChange c, exec::Runner& runner, const RdmaOptions& opts) {
  if (opts.restart == Restart::never) {
    c.note =
        fmt::format("{} not restarted{}", c.unit, opts.no_restart_reason.empty() ? "" : ": " + opts.no_restart_reason);
    return c;
  }
  exec::Command probe;
  probe.argv = {"systemctl", "is-active", "--quiet", c.unit};
  probe.timeout = std::chrono::seconds(30);
  auto active = runner.run(probe);
  if (!active) {
    c.note = fmt::format(
        "{} not restarted: systemctl could not be run ({}); the agent reads the new settings when it starts", c.unit,
        active.error().message);
    return c;
  }
  c.service_active = active->ok();
  if (!active->ok()) {
    c.note = fmt::format("{} is not running: it reads the new settings when it starts", c.unit);
    return c;
  }
  exec::Command restart;
  restart.argv = {"systemctl", "restart", c.unit};
  restart.timeout = std::chrono::seconds(120);
  auto done = runner.run(restart);
  const std::string what = done ? done->describe() : done.error().message;
  if (!done || !done->ok())
    return fail(
        ErrorKind::internal,
        fmt::format("{} is written, but `{}` failed: {}{}", c.path.string(), exec::shell_quote(restart.argv), what,
                    done && !done->output.empty() ? "\n" + done->output : ""),
        fmt::format("the daemon reads the RDMA keys only at start: restart it (systemctl restart {}) or reboot; "
                    "`journalctl -u {}` says why it failed",
                    c.unit, c.unit));
  c.restarted = true;
  c.note = fmt::format("{} was running: restarted, so the daemon reads the new settings", c.unit);
  return c;
}

} // namespace

Result<RdmaChange> apply_rdma(const util::HostFs& host, const Desired& desired, exec::Runner& runner,
                              const RdmaOptions& opts) {
  RdmaChange c;
  c.config = opts.config;
  c.unit = opts.unit.empty() ? installed_agent_unit(host, nullptr).value_or("waagent") : opts.unit;
  const fs::path named = host.display(opts.config);
  HPCBAKE_TRY_ASSIGN(c.path, util::follow_links(host, opts.config));
  const fs::path backup = host.resolve(opts.config + kBackupSuffix);
  std::error_code ec;
  if (fs::exists(backup, ec)) c.backup = backup;

  const auto settings = rdma_settings(desired.mode);
  HPCBAKE_TRY_ASSIGN(const Current cur, read_current(c, named, settings, opts));
  if (cur.done) return c;
  HPCBAKE_TRY(check_agent_can_decode(c.path, cur.file.text));
  auto edit = plan_edit(cur.file.text, settings);
  for (const auto& s : settings)
    if (!satisfied(edit.text, s))
      return fail(ErrorKind::internal,
                  fmt::format("{}: editing did not give {} as the agent reads it; nothing changed", c.path.string(),
                              describe(s)),
                  "this is a bug in hpcbake: please report it with the file");
  if (edit.edits.empty()) {
    c.note =
        fmt::format("{} already has {}: nothing changed, nothing restarted", c.path.string(), settings_text(settings));
    return c;
  }
  c.edits = edit.edits;
  HPCBAKE_TRY(util::check_writable(cur.file, planned_text(c)));
  HPCBAKE_TRY_ASSIGN(const auto written, util::write_edited(cur.file, backup, edit.text, kCrashBeforeRename));
  c.backup = written.backup;
  c.backup_created = written.backup_created;
  c.changed = true;
  return restart_agent(std::move(c), runner, opts);
}

json to_json(const RdmaStatus& s) {
  json keys = json::object();
  for (const auto& k : s.keys)
    keys[k.key] = {{"value", k.value ? json(*k.value) : json(nullptr)},
                   {"line", k.line ? json(k.line) : json(nullptr)},
                   {"assignments", k.assignments}};
  return {{"schema", 1},
          {"config", s.config},
          {"path", s.path.string()},
          {"exists", s.exists},
          {"keys", keys},
          {"agent",
           {{"enable_rdma", s.rdma_enabled},
            {"enable_rdma_update", s.driver_update},
            {"enable_check_rdma_driver", s.driver_check}}},
          {"wanted", s.wanted ? json(mode_name(s.wanted->mode)) : json(nullptr)},
          {"why", s.wanted ? json(s.wanted->why) : json(nullptr)},
          {"matches", s.matches ? json(*s.matches) : json(nullptr)},
          {"differences", s.differences},
          {"backup", s.backup ? json(s.backup->string()) : json(nullptr)}};
}

json to_json(const RdmaChange& c) {
  json edits = json::array();
  for (const auto& e : c.edits)
    edits.push_back({{"key", e.key},
                     {"before", e.before ? json(*e.before) : json(nullptr)},
                     {"after", e.after},
                     {"line", e.line},
                     {"how", how_name(e.how)}});
  return {{"schema", 1},
          {"config", c.config},
          {"path", c.path.string()},
          {"changed", c.changed},
          {"created", c.created},
          {"edits", edits},
          {"backup", c.backup ? json(c.backup->string()) : json(nullptr)},
          {"backup_created", c.backup_created},
          {"service",
           {{"unit", c.unit.empty() ? json(nullptr) : json(c.unit)},
            {"active", c.service_active ? json(*c.service_active) : json(nullptr)},
            {"restarted", c.restarted},
            {"note", c.note}}}};
}

} // namespace hpcbake::waagent
