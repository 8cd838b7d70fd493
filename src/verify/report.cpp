// The three report formats: a human table, JSON (schema 1), and JUnit XML for pipelines (one
// testsuite per level, 0 to 3).
#include "verify/verify.hpp"

#include "util/json.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace hpcbake::verify {

namespace {

const char* level_name(int level) {
  switch (level) {
  case 0:
    return "inventory";
  case 1:
    return "function";
  case 2:
    return "fabric";
  case 3:
    return "load";
  default:
    return "unknown";
  }
}

std::string summary_line(const Report& r) {
  const int deferred = r.count(Verdict::deferred);
  return fmt::format("verify {} ({}), level {}: {} passed, {} failed, {} skipped{} in {:.1f} s", r.size, r.distro,
                     r.level, r.count(Verdict::pass), r.count(Verdict::fail), r.count(Verdict::skip),
                     deferred ? fmt::format(", {} deferred to the first boot on {}", deferred, r.size) : "", r.seconds);
}

} // namespace

std::string to_json_text(const Report& r) {
  using nlohmann::json;
  auto opt_str = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  auto opt_num = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json checks = json::array();
  for (const auto& c : r.checks)
    checks.push_back({{"id", c.id},
                      {"level", c.level},
                      {"title", c.title},
                      {"expected", c.expected},
                      {"observed", c.observed},
                      {"verdict", to_string(c.verdict)},
                      {"hint", opt_str(c.hint)},
                      {"source", opt_str(c.source)},
                      {"value", opt_num(c.value)},
                      {"threshold", opt_num(c.threshold)},
                      {"seconds", c.seconds}});
  json doc = {{"schema", 1},
              {"size", r.size},
              {"size_id", r.size_id},
              {"distro", r.distro},
              {"level", r.level},
              {"kernels", r.kernels},
              {"passed", r.passed()},
              {"hardware", r.hardware_deferred ? "deferred" : "checked"},
              {"summary",
               {{"total", r.checks.size()},
                {"pass", r.count(Verdict::pass)},
                {"fail", r.count(Verdict::fail)},
                {"skip", r.count(Verdict::skip)},
                {"deferred", r.count(Verdict::deferred)}}},
              {"seconds", r.seconds},
              {"checks", checks}};
  return util::dump_json(doc, 2) + "\n";
}

std::string render_table(const Report& r) {
  std::size_t w_id = 5, w_exp = 8, w_obs = 8;
  for (const auto& c : r.checks) {
    w_id = std::max(w_id, c.id.size());
    w_exp = std::max(w_exp, c.expected.size());
    w_obs = std::max(w_obs, c.observed.size());
  }
  std::string out;
  int level = -1;
  for (const auto& c : r.checks) {
    if (c.level != level) {
      level = c.level;
      out += fmt::format("{}level {} ({})\n", out.empty() ? "" : "\n", level, level_name(level));
      out +=
          fmt::format("  {:<{}}  {:<{}}  {:<{}}  {}\n", "CHECK", w_id, "EXPECTED", w_exp, "OBSERVED", w_obs, "VERDICT");
    }
    std::string verdict = to_string(c.verdict);
    std::transform(verdict.begin(), verdict.end(), verdict.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
    out += fmt::format("  {:<{}}  {:<{}}  {:<{}}  {}\n", c.id, w_id, c.expected, w_exp, c.observed, w_obs, verdict);
  }
  bool header = false;
  for (const auto& c : r.checks) {
    if (c.verdict != Verdict::fail) continue;
    if (!header) out += "\nfailed checks, and what to do next:\n";
    header = true;
    out += fmt::format("  {}: {}\n    expected {}; observed {}\n", c.id, c.title, c.expected, c.observed);
    if (!c.hint.empty()) out += fmt::format("    next: {}\n", c.hint);
  }
  out += "\n" + summary_line(r) + "\n";
  return out;
}

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    switch (ch) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&apos;";
      break;
    default:
      // XML 1.0 allows no control character but tab, newline and carriage return, not even escaped.
      if (u < 0x20 && ch != '\t' && ch != '\n' && ch != '\r')
        out += "\xEF\xBF\xBD";
      else
        out += ch;
    }
  }
  return out;
}

std::string to_junit(const Report& r) {
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"hpcbake verify\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" errors=\"0\" "
                     "time=\"{:.3f}\">\n",
                     r.checks.size(), r.count(Verdict::fail), r.count(Verdict::skip) + r.count(Verdict::deferred),
                     r.seconds);
  for (int level = 0; level <= 3; ++level) {
    std::vector<const Check*> cs;
    for (const auto& c : r.checks)
      if (c.level == level) cs.push_back(&c);
    if (cs.empty()) continue;
    int failures = 0, skipped = 0;
    double secs = 0;
    for (const auto* c : cs) {
      failures += c->verdict == Verdict::fail;
      skipped += c->verdict == Verdict::skip || c->verdict == Verdict::deferred;
      secs += c->seconds;
    }
    const std::string classname = fmt::format("hpcbake.verify.level{}", level);
    out += fmt::format("  <testsuite name=\"{} ({})\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" errors=\"0\" "
                       "time=\"{:.3f}\">\n",
                       classname, level_name(level), cs.size(), failures, skipped, secs);
    out += "    <properties>\n";
    out += fmt::format("      <property name=\"size\" value=\"{}\"/>\n", xml_escape(r.size));
    out += fmt::format("      <property name=\"distro\" value=\"{}\"/>\n", xml_escape(r.distro));
    out += "    </properties>\n";
    for (const auto* c : cs) {
      out += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">\n", classname, xml_escape(c->id),
                         c->seconds);
      const std::string detail =
          fmt::format("{}\nexpected: {}\nobserved: {}{}{}", c->title, c->expected, c->observed,
                      c->source.empty() ? "" : "\nsource: " + c->source, c->hint.empty() ? "" : "\nnext: " + c->hint);
      if (c->verdict == Verdict::fail)
        out += fmt::format("      <failure message=\"{}\" type=\"verify\">{}</failure>\n",
                           xml_escape(fmt::format("{}: expected {}, observed {}", c->title, c->expected, c->observed)),
                           xml_escape(detail));
      else if (c->verdict == Verdict::skip || c->verdict == Verdict::deferred)
        out += fmt::format("      <skipped message=\"{}\"/>\n",
                           xml_escape((c->verdict == Verdict::deferred ? "deferred: " : "") + c->observed));
      out += fmt::format("      <system-out>{}</system-out>\n", xml_escape(detail));
      out += "    </testcase>\n";
    }
    out += "  </testsuite>\n";
  }
  out += "</testsuites>\n";
  return out;
}

} // namespace hpcbake::verify
