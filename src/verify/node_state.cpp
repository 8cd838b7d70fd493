#include "verify/node_state.hpp"

#include "util/atomic_file.hpp"
#include "util/json.hpp"

#include <fmt/format.h>

#include <map>
#include <system_error>
#include <utility>

namespace hpcbake::verify {

using nlohmann::json;

namespace {

std::optional<Verdict> verdict_of(const std::string& s) {
  for (const Verdict v : {Verdict::pass, Verdict::fail, Verdict::skip, Verdict::deferred})
    if (s == to_string(v)) return v;
  return std::nullopt;
}

void apply_context(NodeState& s, const NodeStateContext& ctx) {
  s.boot_id = ctx.boot_id;
  s.checked_at = ctx.now;
  s.hpcbake_version = ctx.hpcbake_version;
  s.plan_path = ctx.plan_path;
  s.plan_sha256 = ctx.plan_sha256;
}

// A label value of the text format: \ " and line feed escaped (exposition_formats, "Text format
// details").
std::string label_value(std::string_view v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// A sample value: the shortest text that reads back as the same double ("1", "0.25").
std::string sample(double v) {
  return fmt::format("{}", v);
}

void family(std::string& out, const char* name, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
}

Status ensure_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return fail(ErrorKind::internal, fmt::format("{}: cannot create the directory: {}", dir.string(), ec.message()),
                "check that it is writable (verify --boot runs as root)");
  return {};
}

} // namespace

std::vector<const NodeCheck*> NodeState::failed() const {
  std::vector<const NodeCheck*> out;
  for (const auto& c : checks)
    if (c.verdict == Verdict::fail) out.push_back(&c);
  return out;
}

NodeState make_node_state(const Report& report, const NodeStateContext& ctx) {
  NodeState s;
  apply_context(s, ctx);
  s.healthy = report.passed();
  s.level = report.level;
  s.duration_seconds = report.seconds;
  s.size = report.size;
  s.size_id = report.size_id;
  s.pass = report.count(Verdict::pass);
  s.fail = report.count(Verdict::fail);
  s.skip = report.count(Verdict::skip);
  for (const auto& c : report.checks) {
    NodeCheck n{c.id, c.level, c.verdict, {}, {}, {}, {}};
    if (c.verdict == Verdict::fail) {
      n.title = c.title;
      n.expected = c.expected;
      n.observed = c.observed;
      n.hint = c.hint;
    }
    s.checks.push_back(std::move(n));
  }
  return s;
}

NodeState error_node_state(std::string error, int level, double seconds, const NodeStateContext& ctx) {
  NodeState s;
  apply_context(s, ctx);
  s.healthy = false;
  s.error = std::move(error);
  s.level = level;
  s.duration_seconds = seconds;
  return s;
}

void carry_forward(NodeState& now, const NodeState& before) {
  if (now.boot_id.empty() || before.boot_id != now.boot_id || before.level <= now.level) return;
  for (const auto& c : before.checks)
    if (c.level > now.level) now.checks.push_back(c);
  now.level = before.level;
  // The boot run stopped with an error (no checks to carry): its error stands until the next boot.
  if (now.error.empty() && !before.error.empty())
    now.error = fmt::format("level {} at boot: {}", before.level, before.error);
  now.pass = now.fail = now.skip = 0;
  for (const auto& c : now.checks)
    ++(c.verdict == Verdict::pass ? now.pass : c.verdict == Verdict::fail ? now.fail : now.skip);
  now.healthy = now.error.empty() && now.fail == 0;
}

json to_json(const NodeState& s) {
  json failed = json::array(), checks = json::array();
  for (const auto& c : s.checks) {
    checks.push_back({{"id", c.id}, {"level", c.level}, {"verdict", to_string(c.verdict)}});
    if (c.verdict == Verdict::fail)
      failed.push_back({{"id", c.id},
                        {"level", c.level},
                        {"title", c.title},
                        {"expected", c.expected},
                        {"observed", c.observed},
                        {"hint", c.hint}});
  }
  return {{"schema", kNodeStateSchema},
          {"verdict", s.healthy ? "healthy" : "unhealthy"},
          {"error", s.error.empty() ? json(nullptr) : json(s.error)},
          {"level", s.level},
          {"boot_id", s.boot_id},
          {"checked_at", s.checked_at},
          {"duration_seconds", s.duration_seconds},
          {"hpcbake_version", s.hpcbake_version},
          {"plan", s.plan_sha256.empty() ? json(nullptr) : json{{"path", s.plan_path}, {"sha256", s.plan_sha256}}},
          {"size", s.size},
          {"size_id", s.size_id},
          {"counts", {{"pass", s.pass}, {"fail", s.fail}, {"skip", s.skip}}},
          {"failed_checks", std::move(failed)},
          {"checks", std::move(checks)}};
}

Result<NodeState> node_state_from_json(const json& doc) {
  if (!doc.is_object()) return fail(ErrorKind::usage, "the node state is not a JSON object");
  if (util::int_member(doc, "schema", 0) != kNodeStateSchema)
    return fail(ErrorKind::usage, fmt::format("unknown node state schema (this hpcbake reads {})", kNodeStateSchema));
  try {
    NodeState s;
    const std::string verdict = doc.at("verdict").get<std::string>();
    if (verdict != "healthy" && verdict != "unhealthy")
      return fail(ErrorKind::usage, fmt::format("unknown verdict \"{}\"", verdict));
    s.healthy = verdict == "healthy";
    if (const auto e = doc.find("error"); e != doc.end() && e->is_string()) s.error = e->get<std::string>();
    s.level = doc.value("level", 1);
    s.boot_id = doc.value("boot_id", "");
    s.checked_at = doc.value("checked_at", std::int64_t{0});
    s.duration_seconds = doc.value("duration_seconds", 0.0);
    s.hpcbake_version = doc.value("hpcbake_version", "");
    if (const auto p = doc.find("plan"); p != doc.end() && p->is_object()) {
      s.plan_path = p->value("path", "");
      s.plan_sha256 = p->value("sha256", "");
    }
    s.size = doc.value("size", "");
    s.size_id = doc.value("size_id", "");
    if (const auto c = doc.find("counts"); c != doc.end() && c->is_object()) {
      s.pass = c->value("pass", 0);
      s.fail = c->value("fail", 0);
      s.skip = c->value("skip", 0);
    }
    std::map<std::string, json> failed;
    for (const auto& f : doc.value("failed_checks", json::array()))
      failed[f.at("id").get<std::string>()] = f;
    for (const auto& c : doc.value("checks", json::array())) {
      NodeCheck n;
      n.id = c.at("id").get<std::string>();
      n.level = c.value("level", 0);
      const auto v = verdict_of(c.value("verdict", ""));
      if (!v) return fail(ErrorKind::usage, fmt::format("check {}: unknown verdict", n.id));
      n.verdict = *v;
      if (const auto f = failed.find(n.id); f != failed.end()) {
        n.title = f->second.value("title", "");
        n.expected = f->second.value("expected", "");
        n.observed = f->second.value("observed", "");
        n.hint = f->second.value("hint", "");
      }
      s.checks.push_back(std::move(n));
    }
    return s;
  } catch (const json::exception& e) {
    return fail(ErrorKind::usage, fmt::format("malformed node state: {}", e.what()));
  }
}

std::string to_prometheus(const NodeState& s) {
  std::string out;
  const std::string size = label_value(s.size);
  family(out, "hpcbake_node_healthy", "1 when the last hpcbake verify --boot passed every check, else 0.");
  out += fmt::format("hpcbake_node_healthy{{size=\"{}\",level=\"{}\"}} {}\n", size, s.level, s.healthy ? 1 : 0);
  family(out, "hpcbake_verify_error", "1 when hpcbake verify could not run its checks at all (see node-state.json).");
  out += fmt::format("hpcbake_verify_error {}\n", s.error.empty() ? 0 : 1);
  family(out, "hpcbake_verify_timestamp_seconds", "When the last hpcbake verify --boot finished, seconds since epoch.");
  out += fmt::format("hpcbake_verify_timestamp_seconds {}\n", s.checked_at);
  family(out, "hpcbake_verify_duration_seconds", "How long the last hpcbake verify --boot ran its checks.");
  out += fmt::format("hpcbake_verify_duration_seconds {}\n", sample(s.duration_seconds));
  family(out, "hpcbake_verify_checks", "Checks of the last hpcbake verify --boot, by verdict.");
  const std::pair<const char*, int> counts[] = {{"pass", s.pass}, {"fail", s.fail}, {"skip", s.skip}};
  for (const auto& [verdict, n] : counts)
    out += fmt::format("hpcbake_verify_checks{{verdict=\"{}\"}} {}\n", verdict, n);
  family(out, "hpcbake_check_passed", "1 when the check passed, 0 when it failed (skipped checks are not listed).");
  for (const auto& c : s.checks)
    if (c.verdict == Verdict::pass || c.verdict == Verdict::fail)
      out += fmt::format("hpcbake_check_passed{{id=\"{}\",level=\"{}\"}} {}\n", label_value(c.id), c.level,
                         c.verdict == Verdict::pass ? 1 : 0);
  return out;
}

Status write_node_state(const util::HostFs& fs, const NodeState& state) {
  const auto path = fs.resolve(kNodeStatePath);
  HPCBAKE_TRY(ensure_dir(path.parent_path()));
  return util::write_file_atomic(path, util::dump_json(to_json(state), 2) + "\n", 0644);
}

Status write_textfile(const util::HostFs& fs, const std::string& textfile_dir, const NodeState& state) {
  const auto dir = fs.resolve(textfile_dir);
  HPCBAKE_TRY(ensure_dir(dir));
  // 0644: node exporter runs as its own user (prometheus on Debian) and must read it.
  return util::write_file_atomic(dir / kTextfileName, to_prometheus(state), 0644);
}

Result<std::optional<NodeState>> read_node_state(const util::HostFs& fs) {
  if (!fs.exists(kNodeStatePath)) return std::optional<NodeState>{};
  const auto where = fs.resolve(kNodeStatePath).string();
  const auto text = fs.read(kNodeStatePath, util::host_file::config);
  if (!text) return fail(ErrorKind::internal, where + ": cannot read the node state", "check its permissions");
  const json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  auto s = node_state_from_json(doc.is_discarded() ? json() : doc);
  if (!s)
    return fail(ErrorKind::usage, fmt::format("{}: {}", where, s.error().message),
                "run 'hpcbake verify --boot' again: it rewrites the node state");
  return std::optional<NodeState>(std::move(*s));
}

std::string describe_failure(const NodeCheck& c) {
  return fmt::format("{} (level {}): {}: expected {}, observed {}", c.id, c.level, c.title, c.expected, c.observed);
}

} // namespace hpcbake::verify
