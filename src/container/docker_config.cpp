// daemon.json: the runtime inserted or replaced in the text itself, every other byte kept.
#include "container/runtime.hpp"

#include "util/json.hpp"

#include <fmt/format.h>

namespace hpcbake::container {

using json = nlohmann::json;

namespace {

// A member of a JSON object, as byte offsets into the text.
struct Member {
  std::string key;         // decoded
  std::size_t key_begin{}; // the opening quote
  std::size_t value_begin{}, value_end{};
};

std::size_t skip_ws(std::string_view t, std::size_t i) {
  while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r'))
    ++i;
  return i;
}

std::size_t end_of_string(std::string_view t, std::size_t i) { // t[i] == '"'
  for (++i; i < t.size(); ++i) {
    if (t[i] == '\\')
      ++i;
    else if (t[i] == '"')
      return i + 1;
  }
  return t.size();
}

// The text has been parsed already: a value here is well formed.
std::size_t end_of_value(std::string_view t, std::size_t i) {
  if (t[i] == '"') return end_of_string(t, i);
  if (t[i] == '{' || t[i] == '[') {
    int depth = 0;
    for (; i < t.size(); ++i) {
      if (t[i] == '"') {
        i = end_of_string(t, i) - 1;
      } else if (t[i] == '{' || t[i] == '[') {
        ++depth;
      } else if ((t[i] == '}' || t[i] == ']') && --depth == 0) {
        return i + 1;
      }
    }
    return t.size();
  }
  while (i < t.size() && t[i] != ',' && t[i] != '}' && t[i] != ']' && t[i] != ' ' && t[i] != '\n' && t[i] != '\r' &&
         t[i] != '\t')
    ++i;
  return i;
}

// The members of the object whose '{' is at `open`, in order.
std::vector<Member> members(std::string_view t, std::size_t open) {
  std::vector<Member> out;
  std::size_t i = skip_ws(t, open + 1);
  while (i < t.size() && t[i] == '"') {
    Member m;
    m.key_begin = i;
    const std::size_t key_end = end_of_string(t, i);
    m.key = json::parse(t.substr(i, key_end - i)).get<std::string>();
    i = skip_ws(t, skip_ws(t, key_end) + 1); // past ':'
    m.value_begin = i;
    m.value_end = end_of_value(t, i);
    out.push_back(m);
    i = skip_ws(t, m.value_end);
    if (i < t.size() && t[i] == ',') i = skip_ws(t, i + 1);
  }
  return out;
}

const Member* last_named(const std::vector<Member>& ms, std::string_view key) {
  const Member* found = nullptr;
  for (const auto& m : ms)
    if (m.key == key) found = &m; // a repeated key: the last wins, as in Go's encoding/json
  return found;
}

// The indentation of the line `pos` is on.
std::string indent_at(std::string_view t, std::size_t pos) {
  const auto nl = t.rfind('\n', pos == 0 ? 0 : pos - 1);
  const std::size_t start = nl == std::string_view::npos ? 0 : nl + 1;
  std::size_t end = start;
  while (end < t.size() && (t[end] == ' ' || t[end] == '\t'))
    ++end;
  return std::string(t.substr(start, end - start));
}

// `v` as the file would write it: on one line when the object it goes in is, else one member a
// line, `step` deeper per level, starting at `base`.
std::string render(const json& v, bool multiline, const std::string& base, const std::string& step) {
  if (!multiline || !v.is_object() || v.empty()) return util::dump_json(v);
  std::string out = "{";
  bool first = true;
  for (const auto& [k, item] : v.items()) {
    out += first ? "\n" : ",\n";
    first = false;
    out += base + step + util::dump_json(json(k)) + ": " + render(item, true, base + step, step);
  }
  return out + "\n" + base + "}";
}

// Inserts "key": value as the first member of the object at `open`.
std::string insert_first(std::string_view t, std::size_t open, const std::string& key, const json& value) {
  const auto ms = members(t, open);
  const std::string_view between =
      t.substr(open + 1, (ms.empty() ? t.find('}', open) : ms.front().key_begin) - open - 1);
  const bool multiline = ms.empty() ? true : between.find('\n') != std::string_view::npos;
  const std::string outer = indent_at(t, open);
  std::string inner = ms.empty() ? outer + "  " : indent_at(t, ms.front().key_begin);
  std::string step = inner.size() > outer.size() ? inner.substr(outer.size()) : std::string("  ");
  std::string member = util::dump_json(json(key)) + (multiline ? ": " : ":") + render(value, multiline, inner, step);
  std::string out(t.substr(0, open + 1));
  if (ms.empty()) {
    const std::size_t close = t.find('}', open);
    out += "\n" + inner + member + "\n" + outer;
    out += t.substr(close);
    return out;
  }
  out += multiline ? "\n" + inner + member + "," : member + ",";
  out += t.substr(open + 1);
  return out;
}

json desired_entry(const Runtime& rt) {
  return {{"args", json::array()}, {"path", rt.binary}};
}

Result<json> parse_object(std::string_view text, const std::string& where) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) { // parse_error, and out_of_range for a number it cannot hold
    return fail(ErrorKind::manifest, fmt::format("{}: not valid JSON: {}", where, e.what()),
                "dockerd refuses to start with it too: fix the file, or move it aside to start from none");
  }
  if (!doc.is_object())
    return fail(ErrorKind::manifest, fmt::format("{}: the top level is not a JSON object", where),
                "dockerd expects an object ({ ... }): fix the file");
  return doc;
}

// Proof that the edit did only what it said: the runtime is there and nothing else moved.
// Proof that only <table>.<name> changed, and to `want`: every other member of the document and
// of the table reads back as before (a table the edit created holds nothing else).
Status check_member_edit(const json& before, const json& after, const char* table, const std::string& name,
                         const json& want, const std::string& where) {
  json b = before, a = after;
  const bool ok = a.contains(table) && a[table].is_object() && a[table].contains(name) && a[table][name] == want;
  if (b.contains(table)) b[table].erase(name);
  if (a.contains(table)) a[table].erase(name);
  if (!before.contains(table) && a.contains(table) && a[table].empty()) a.erase(table);
  if (!ok || a != b)
    return fail(ErrorKind::internal,
                fmt::format("{}: the edited text does not read back as intended; nothing changed", where),
                "this is a bug in hpcbake: please report it with the file");
  return {};
}

Status check_edit(const json& before, const json& after, const Runtime& rt, const std::string& where) {
  return check_member_edit(before, after, "runtimes", rt.name, desired_entry(rt), where);
}

} // namespace

Result<std::optional<std::string>> docker_runtime(std::string_view text, const std::string& name,
                                                  const std::string& where) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return std::optional<std::string>{};
  HPCBAKE_TRY_ASSIGN(const json doc, parse_object(text, where));
  const auto rts = doc.find("runtimes");
  if (rts == doc.end() || !rts->is_object() || !rts->contains(name)) return std::optional<std::string>{};
  const auto& entry = (*rts)[name];
  if (!entry.is_object() || !entry.contains("path") || !entry["path"].is_string()) return std::optional<std::string>{};
  return std::optional<std::string>{entry["path"].get<std::string>()};
}

Result<TextEdit> edit_docker(std::string_view text, const Runtime& rt, const std::string& where) {
  const json want = desired_entry(rt);
  TextEdit e;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    e.text = util::dump_json(json{{"runtimes", {{rt.name, want}}}}, 2) + "\n";
    e.changed = true;
    e.what = fmt::format("wrote runtimes.{} (the file was empty)", rt.name);
    return e;
  }
  HPCBAKE_TRY_ASSIGN(const json before, parse_object(text, where));
  const std::size_t open = text.find('{');
  const auto top = members(text, open);
  const Member* rts = last_named(top, "runtimes");
  if (rts && !before["runtimes"].is_object())
    return fail(ErrorKind::manifest, fmt::format("{}: \"runtimes\" is not an object", where),
                "dockerd expects \"runtimes\": {\"name\": {\"path\": ...}}: fix the file");
  // The runtimes object's members, kept alive while `cur` points into them.
  const auto inner = rts ? members(text, rts->value_begin) : std::vector<Member>{};
  const Member* cur = rts ? last_named(inner, rt.name) : nullptr;
  if (!rts) {
    e.text = insert_first(text, open, "runtimes", json{{rt.name, want}});
    e.what = fmt::format("added runtimes.{}", rt.name);
  } else if (!cur) {
    e.text = insert_first(text, rts->value_begin, rt.name, want);
    e.what = fmt::format("added runtimes.{}", rt.name);
  } else if (before["runtimes"][rt.name] == want) {
    e.text = std::string(text);
    return e;
  } else {
    const bool multiline =
        text.substr(cur->value_begin, cur->value_end - cur->value_begin).find('\n') != std::string_view::npos;
    const std::string base = indent_at(text, cur->key_begin);
    e.text = std::string(text.substr(0, cur->value_begin)) + render(want, multiline, base, "  ") +
             std::string(text.substr(cur->value_end));
    e.what = fmt::format("replaced runtimes.{} (was {})", rt.name, util::dump_json(before["runtimes"][rt.name]));
  }
  HPCBAKE_TRY_ASSIGN(const json after, parse_object(e.text, where));
  HPCBAKE_TRY(check_edit(before, after, rt, where));
  e.changed = true;
  return e;
}

namespace {

json ulimit_entry(const std::string& name, long long soft, long long hard) {
  return {{"Hard", hard}, {"Name", name}, {"Soft", soft}};
}

// Proof that only default-ulimits.<name> changed, and to the wanted entry.
Status check_ulimit_edit(const json& before, const json& after, const std::string& name, const json& want,
                         const std::string& where) {
  return check_member_edit(before, after, "default-ulimits", name, want, where);
}

} // namespace

Result<std::optional<json>> docker_default_ulimit(std::string_view text, const std::string& name,
                                                  const std::string& where) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return std::optional<json>{};
  HPCBAKE_TRY_ASSIGN(const json doc, parse_object(text, where));
  const auto u = doc.find("default-ulimits");
  if (u == doc.end() || !u->is_object() || !u->contains(name)) return std::optional<json>{};
  return std::optional<json>{(*u)[name]};
}

Result<TextEdit> edit_docker_ulimit(std::string_view text, const std::string& name, long long soft, long long hard,
                                    const std::string& where) {
  const json want = ulimit_entry(name, soft, hard);
  TextEdit e;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    e.text = util::dump_json(json{{"default-ulimits", {{name, want}}}}, 2) + "\n";
    e.changed = true;
    e.what = fmt::format("wrote default-ulimits.{} (the file was empty)", name);
    return e;
  }
  HPCBAKE_TRY_ASSIGN(const json before, parse_object(text, where));
  const std::size_t open = text.find('{');
  const auto top = members(text, open);
  const Member* lims = last_named(top, "default-ulimits");
  if (lims && !before["default-ulimits"].is_object())
    return fail(ErrorKind::manifest, fmt::format("{}: \"default-ulimits\" is not an object", where),
                "dockerd expects \"default-ulimits\": {\"name\": {\"Name\": ..., \"Hard\": ..., \"Soft\": ...}}: fix "
                "the file");
  const auto inner = lims ? members(text, lims->value_begin) : std::vector<Member>{};
  const Member* cur = lims ? last_named(inner, name) : nullptr;
  if (!lims) {
    e.text = insert_first(text, open, "default-ulimits", json{{name, want}});
    e.what = fmt::format("added default-ulimits.{}", name);
  } else if (!cur) {
    e.text = insert_first(text, lims->value_begin, name, want);
    e.what = fmt::format("added default-ulimits.{}", name);
  } else if (before["default-ulimits"][name] == want) {
    e.text = std::string(text);
    return e;
  } else {
    const bool multiline =
        text.substr(cur->value_begin, cur->value_end - cur->value_begin).find('\n') != std::string_view::npos;
    const std::string base = indent_at(text, cur->key_begin);
    e.text = std::string(text.substr(0, cur->value_begin)) + render(want, multiline, base, "  ") +
             std::string(text.substr(cur->value_end));
    e.what =
        fmt::format("replaced default-ulimits.{} (was {})", name, util::dump_json(before["default-ulimits"][name]));
  }
  HPCBAKE_TRY_ASSIGN(const json after, parse_object(e.text, where));
  HPCBAKE_TRY(check_ulimit_edit(before, after, name, want, where));
  e.changed = true;
  return e;
}

} // namespace hpcbake::container
