// containerd's config.toml: the runtime's two tables added (or their values set) in the text
// itself, every other byte kept. The scanner reads TOML's statements (table headers and
// key/value pairs, values in any TOML form) as byte ranges; it does not build a document.
#include "container/runtime.hpp"

#include "util/json.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <tuple>

namespace hpcbake::container {

namespace {

using Path = std::vector<std::string>;

struct Header {
  Path key;
  bool array = false;
  std::size_t line_end = 0; // just past the header's line
};

struct Assign {
  Path table, key;
  std::size_t value_begin = 0, value_end = 0;
  std::string_view raw;
  Path full() const {
    Path p = table;
    p.insert(p.end(), key.begin(), key.end());
    return p;
  }
};

struct Doc {
  std::vector<Header> headers;
  std::vector<Assign> assigns;
};

// The offset of the first byte that is not part of well-formed UTF-8, if any.
std::optional<std::size_t> invalid_utf8(std::string_view t) {
  for (std::size_t i = 0; i < t.size();) {
    const auto c = static_cast<unsigned char>(t[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > t.size() || (n == 2 && c < 0xC2)) return i;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(t[i + k]) & 0xC0) != 0x80) return i;
    const auto c1 = static_cast<unsigned char>(t[i + 1 < t.size() ? i + 1 : i]);
    if ((n == 3 && c == 0xE0 && c1 < 0xA0) || (n == 3 && c == 0xED && c1 >= 0xA0) ||
        (n == 4 && c == 0xF0 && c1 < 0x90) || (n == 4 && (c > 0xF4 || (c == 0xF4 && c1 >= 0x90))))
      return i; // overlong, a surrogate, or past U+10FFFF
    i += n;
  }
  return std::nullopt;
}

class Scanner {
public:
  Scanner(std::string_view t, const std::string& where) : t_(t), where_(where) {}

  Result<Doc> scan() {
    if (const auto bad = invalid_utf8(t_)) {
      i_ = *bad;
      return std::unexpected(error("UTF-8 text (TOML files are UTF-8)").error());
    }
    Doc doc;
    Path table;
    while (true) {
      skip_blank_and_comments();
      if (i_ >= t_.size()) return doc;
      if (t_[i_] == '[') {
        Header h;
        h.array = t_.substr(i_, 2) == "[[";
        i_ += h.array ? 2 : 1;
        HPCBAKE_TRY_ASSIGN(h.key, key(']'));
        if (!expect(h.array ? "]]" : "]")) return std::unexpected(error("a table header's closing bracket").error());
        HPCBAKE_TRY(end_of_line());
        h.line_end = i_;
        table = h.key;
        doc.headers.push_back(std::move(h));
        continue;
      }
      Assign a;
      a.table = table;
      HPCBAKE_TRY_ASSIGN(a.key, key('='));
      if (!expect("=")) return std::unexpected(error("'=' after a key").error());
      skip_spaces();
      a.value_begin = i_;
      HPCBAKE_TRY(value());
      a.value_end = i_;
      a.raw = t_.substr(a.value_begin, a.value_end - a.value_begin);
      HPCBAKE_TRY(end_of_line());
      doc.assigns.push_back(std::move(a));
    }
  }

private:
  Status error(const std::string& what) const {
    const auto line =
        1 + std::count(t_.begin(), t_.begin() + static_cast<std::ptrdiff_t>(std::min(i_, t_.size())), '\n');
    return fail(ErrorKind::manifest, fmt::format("{}:{}: not TOML hpcbake can read: expected {}", where_, line, what),
                "containerd refuses a file it cannot parse too: fix the file (`containerd config dump` shows "
                "what it reads), or move it aside to start from none");
  }
  void skip_spaces() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t'))
      ++i_;
  }
  void skip_blank_and_comments() {
    while (i_ < t_.size()) {
      if (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\r' || t_[i_] == '\n') {
        ++i_;
      } else if (t_[i_] == '#') {
        while (i_ < t_.size() && t_[i_] != '\n')
          ++i_;
      } else {
        return;
      }
    }
  }
  bool expect(std::string_view s) {
    skip_spaces();
    if (t_.substr(i_, s.size()) != s) return false;
    i_ += s.size();
    return true;
  }
  Status end_of_line() {
    skip_spaces();
    if (i_ < t_.size() && t_[i_] == '#')
      while (i_ < t_.size() && t_[i_] != '\n')
        ++i_;
    if (i_ < t_.size() && t_[i_] == '\r') ++i_;
    if (i_ < t_.size() && t_[i_] != '\n') return error("the end of the line");
    if (i_ < t_.size()) ++i_;
    return {};
  }
  // A basic string's escape at i_ (the backslash), decoded into `out` as TOML defines them:
  // \b \t \n \f \r \" \\ and \uXXXX, \UXXXXXXXX as UTF-8. i_ is left on its last character.
  Status escape(std::string& out) {
    const char c = t_[++i_];
    static constexpr std::string_view kFrom = "btnfr\"\\", kTo = "\b\t\n\f\r\"\\";
    if (const auto k = kFrom.find(c); k != std::string_view::npos) {
      out += kTo[k];
      return {};
    }
    const std::size_t digits = c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits == 0 || i_ + digits >= t_.size()) return error("a TOML escape (\\b \\t \\n \\f \\r \\\" \\\\ \\uXXXX)");
    std::uint32_t cp = 0;
    for (std::size_t k = 0; k < digits; ++k) {
      const char h = t_[++i_];
      if (!std::isxdigit(static_cast<unsigned char>(h))) return error("hex digits in a \\u escape");
      cp = cp * 16 +
           static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return error("a Unicode scalar value in a \\u escape");
    auto byte = [&](std::uint32_t v) { out += static_cast<char>(static_cast<unsigned char>(v)); };
    if (cp < 0x80) {
      byte(cp);
    } else if (cp < 0x800) {
      byte(0xC0 | (cp >> 6));
      byte(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      byte(0xE0 | (cp >> 12));
      byte(0x80 | ((cp >> 6) & 0x3F));
      byte(0x80 | (cp & 0x3F));
    } else {
      byte(0xF0 | (cp >> 18));
      byte(0x80 | ((cp >> 12) & 0x3F));
      byte(0x80 | ((cp >> 6) & 0x3F));
      byte(0x80 | (cp & 0x3F));
    }
    return {};
  }
  // A quoted string starting at i_ (basic or literal, one line); the decoded text.
  Result<std::string> quoted() {
    const char q = t_[i_++];
    std::string out;
    while (i_ < t_.size() && t_[i_] != q && t_[i_] != '\n') {
      if (q == '"' && t_[i_] == '\\' && i_ + 1 < t_.size()) {
        HPCBAKE_TRY(escape(out));
      } else {
        out += t_[i_];
      }
      ++i_;
    }
    if (i_ >= t_.size() || t_[i_] != q) return std::unexpected(error("a closing quote").error());
    ++i_;
    return out;
  }
  Result<Path> key(char stop) {
    Path parts;
    while (true) {
      skip_spaces();
      if (i_ < t_.size() && (t_[i_] == '"' || t_[i_] == '\'')) {
        HPCBAKE_TRY_ASSIGN(auto part, quoted());
        parts.push_back(std::move(part));
      } else {
        const std::size_t b = i_;
        while (i_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[i_])) || t_[i_] == '_' || t_[i_] == '-'))
          ++i_;
        if (i_ == b) return std::unexpected(error("a key").error());
        parts.emplace_back(t_.substr(b, i_ - b));
      }
      skip_spaces();
      if (i_ < t_.size() && t_[i_] == '.') {
        ++i_;
        continue;
      }
      if (i_ < t_.size() && t_[i_] == stop) return parts;
      return std::unexpected(error(fmt::format("'.' or '{}' in a key", stop)).error());
    }
  }
  Status multiline(std::string_view delim) {
    i_ += 3;
    while (i_ < t_.size()) {
      if (delim == "\"\"\"" && t_[i_] == '\\') {
        i_ += 2;
        continue;
      }
      if (t_.substr(i_, 3) == delim) {
        i_ += 3;
        while (i_ < t_.size() && t_[i_] == delim[0]) // up to two quotes may end the content
          ++i_;
        return {};
      }
      ++i_;
    }
    return error(fmt::format("the closing {}", delim));
  }
  // One value of any TOML form, nested arrays and inline tables included.
  Status value() {
    if (i_ >= t_.size()) return error("a value");
    if (t_.substr(i_, 3) == "\"\"\"" || t_.substr(i_, 3) == "'''") return multiline(t_.substr(i_, 3));
    if (t_[i_] == '"' || t_[i_] == '\'') {
      HPCBAKE_TRY_ASSIGN(const auto ignored, quoted());
      return {};
    }
    if (t_[i_] == '[' || t_[i_] == '{') {
      // Arrays and inline tables nest by recursion: a hostile file must not exhaust the stack.
      if (depth_ >= kMaxDepth) return error(fmt::format("arrays or inline tables nested at most {} deep", kMaxDepth));
      ++depth_;
      const DepthGuard guard{depth_};
      const char open = t_[i_], close = open == '[' ? ']' : '}';
      ++i_;
      while (true) {
        skip_blank_and_comments();
        if (i_ >= t_.size()) return error(fmt::format("'{}'", close));
        if (t_[i_] == close) {
          ++i_;
          return {};
        }
        if (t_[i_] == ',') {
          ++i_;
          continue;
        }
        if (open == '{') {
          HPCBAKE_TRY_ASSIGN(const auto ignored, key('='));
          if (!expect("=")) return error("'=' in an inline table");
          skip_spaces();
        }
        HPCBAKE_TRY(value());
      }
    }
    const std::size_t b = i_;
    while (i_ < t_.size() && t_[i_] != ',' && t_[i_] != ']' && t_[i_] != '}' && t_[i_] != '#' && t_[i_] != '\n' &&
           t_[i_] != '\r' && !(t_[i_] == ' ' && !(i_ > b && std::isdigit(static_cast<unsigned char>(t_[i_ - 1])))))
      ++i_;
    while (i_ > b && (t_[i_ - 1] == ' ' || t_[i_ - 1] == '\t'))
      --i_;
    if (i_ == b) return error("a value");
    return {};
  }

  static constexpr int kMaxDepth = 64;
  struct DepthGuard {
    int& depth;
    ~DepthGuard() { --depth; }
  };

  std::string_view t_;
  const std::string& where_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

std::string unquote(std::string_view raw) {
  if (raw.size() >= 2 && (raw.front() == '"' || raw.front() == '\'') && raw.back() == raw.front())
    return std::string(raw.substr(1, raw.size() - 2));
  return std::string(raw);
}

bool starts_with(const Path& p, const Path& prefix) {
  return p.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), p.begin());
}

std::string render_key(const Path& p) {
  std::vector<std::string> parts;
  for (const auto& s : p) {
    const bool bare = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    parts.push_back(bare ? s : util::dump_json(nlohmann::json(s)));
  }
  return util::join(parts, ".");
}

struct Layout {
  int version = 1;
  Path cri, containerd, runtimes, runtime, options, runc_options;
};

Layout layout(const Doc& doc, const std::string& name) {
  Layout l;
  for (const auto& a : doc.assigns)
    if (a.table.empty() && a.key == Path{"version"}) l.version = std::atoi(std::string(a.raw).c_str());
  const Path cri = l.version >= 3   ? Path{"plugins", "io.containerd.cri.v1.runtime"}
                   : l.version == 2 ? Path{"plugins", "io.containerd.grpc.v1.cri"}
                                    : Path{"plugins", "cri"};
  l.cri = cri;
  l.containerd = cri;
  l.containerd.push_back("containerd");
  Path runtimes = l.containerd;
  runtimes.push_back("runtimes");
  l.runtimes = runtimes;
  l.runtime = runtimes;
  l.runtime.push_back(name);
  l.options = l.runtime;
  l.options.push_back("options");
  l.runc_options = runtimes;
  l.runc_options.insert(l.runc_options.end(), {"runc", "options"});
  return l;
}

const Assign* find_assign(const Doc& doc, const Path& table, const std::string& key) {
  const Assign* found = nullptr;
  for (const auto& a : doc.assigns)
    if (a.table == table && a.key == Path{key}) found = &a;
  return found;
}

// The runtime defined some other way than by its two tables: not edited.
Status refuse_other_forms(const Doc& doc, const Layout& l, const std::string& where) {
  for (const auto& a : doc.assigns) {
    const Path full = a.full();
    const bool inline_table = starts_with(l.runtime, full);
    const bool dotted = starts_with(full, l.runtime) && a.table != l.runtime && a.table != l.options;
    if (inline_table || dotted)
      return fail(ErrorKind::manifest,
                  fmt::format("{}: the runtime is defined as `{} = ...` under [{}]; hpcbake edits only the "
                              "[{}] table form",
                              where, render_key(a.key), render_key(a.table), render_key(l.runtime)),
                  "rewrite that runtime as the two tables nvidia-ctk writes, or set runtime_type and "
                  "options.BinaryName there yourself");
  }
  return {};
}

// The runtime containerd starts containers with unless told otherwise.
Path default_runtime(const Doc& doc, const Layout& l) {
  Path p = l.runtimes;
  const Assign* a = find_assign(doc, l.containerd, "default_runtime_name");
  p.push_back(a ? unquote(a->raw) : "runc");
  return p;
}

// Whether anything in the file sets something under `table`.
bool defines(const Doc& doc, const Path& table) {
  return std::any_of(doc.headers.begin(), doc.headers.end(),
                     [&](const Header& h) { return starts_with(h.key, table); }) ||
         std::any_of(doc.assigns.begin(), doc.assigns.end(), [&](const Assign& a) {
           const Path full = a.full();
           return starts_with(full, table) || starts_with(table, full);
         });
}

struct Want {
  Path table;
  std::string key, raw;
};

// A setting the Kubernetes option adds (default_runtime_name, enable_cdi) written some other way
// than as a key of its own table (dotted keys, an inline table): not edited.
Status refuse_other_settings(const Doc& doc, const std::vector<Want>& wants, const std::string& where) {
  for (const auto& w : wants) {
    Path want = w.table;
    want.push_back(w.key);
    for (const auto& a : doc.assigns) {
      const Path full = a.full();
      if ((a.table == w.table && a.key == Path{w.key}) || !(full == want || starts_with(want, full))) continue;
      return fail(ErrorKind::manifest,
                  fmt::format("{}: {} is set as `{} = ...` under [{}]; hpcbake edits only `{} = ...` in the [{}] "
                              "table",
                              where, render_key(want), render_key(a.key), render_key(a.table), w.key,
                              render_key(w.table)),
                  fmt::format("rewrite it in that table's form, or set {} there yourself", w.key));
    }
  }
  return {};
}

// Values of a TOML array of one-line strings, as containerd reads cdi_spec_dirs.
std::vector<std::string> strings_of(std::string_view raw) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '"' && raw[i] != '\'') continue;
    const auto end = raw.find(raw[i], i + 1);
    if (end == std::string_view::npos) break;
    out.emplace_back(raw.substr(i + 1, end - i - 1));
    i = end;
  }
  return out;
}

} // namespace

Result<std::optional<std::string>> containerd_runtime(std::string_view text, const std::string& name,
                                                      const std::string& where) {
  HPCBAKE_TRY_ASSIGN(const Doc doc, Scanner(text, where).scan());
  const Layout l = layout(doc, name);
  const Assign* type = find_assign(doc, l.runtime, "runtime_type");
  const Assign* bin = find_assign(doc, l.options, "BinaryName");
  if (!type || !bin) return std::optional<std::string>{};
  return std::optional<std::string>{unquote(bin->raw)};
}

Result<CriSettings> containerd_cri(std::string_view text, const std::string& where) {
  HPCBAKE_TRY_ASSIGN(const Doc doc, Scanner(text, where).scan());
  const Layout l = layout(doc, "runc");
  CriSettings s;
  s.cri = render_key(l.cri);
  auto at = [&](Path table, const std::string& key) -> const Assign* {
    table.push_back(key);
    const Assign* found = nullptr;
    for (const auto& a : doc.assigns)
      if (a.full() == table) found = &a;
    return found;
  };
  if (const Assign* a = at(l.containerd, "default_runtime_name")) {
    s.default_runtime = unquote(a->raw);
    s.default_runtime_set = true;
  }
  if (const Assign* a = at(l.cri, "enable_cdi")) s.enable_cdi = a->raw == "true";
  if (const Assign* a = at(l.cri, "cdi_spec_dirs")) s.cdi_spec_dirs = strings_of(a->raw);
  return s;
}

Result<TextEdit> edit_containerd(std::string_view text, const Runtime& rt, const std::string& where) {
  const std::string eol = text.find("\r\n") != std::string_view::npos ? "\r\n" : "\n";
  std::string base(text);
  if (base.find_first_not_of(" \t\r\n") == std::string::npos) base = "version = 2" + eol;
  HPCBAKE_TRY_ASSIGN(const Doc doc, Scanner(base, where).scan());
  const Layout l = layout(doc, rt.name);
  HPCBAKE_TRY(refuse_other_forms(doc, l, where));
  std::vector<Want> wants = {{l.runtime, "runtime_type", "\"io.containerd.runc.v2\""},
                             {l.options, "BinaryName", util::dump_json(nlohmann::json(rt.binary))}};
  if (const Assign* sc = find_assign(doc, l.runc_options, "SystemdCgroup"))
    wants.push_back({l.options, "SystemdCgroup", std::string(sc->raw)});
  // A runtimes table in the file replaces containerd's built-in map, runc included: without its
  // default runtime the CRI plugin fails to load ("no corresponding runtime configured"). The
  // built-in runc entry is written out when the file does not define it.
  const Path default_rt = default_runtime(doc, l);
  if (default_rt.back() != rt.name && !defines(doc, default_rt))
    wants.insert(wants.begin(), Want{default_rt, "runtime_type", "\"io.containerd.runc.v2\""});
  std::vector<Want> k8s;
  if (rt.set_as_default)
    k8s.push_back({l.containerd, "default_runtime_name", util::dump_json(nlohmann::json(rt.name))});
  if (rt.enable_cdi) k8s.push_back({l.cri, "enable_cdi", "true"});
  HPCBAKE_TRY(refuse_other_settings(doc, k8s, where));
  wants.insert(wants.end(), k8s.begin(), k8s.end());

  struct Splice {
    std::size_t begin, end;
    std::string with;
  };
  std::vector<Splice> splices;
  std::vector<std::string> what;
  std::map<Path, std::vector<const Want*>> new_tables;
  for (const auto& w : wants) {
    auto header = std::find_if(doc.headers.rbegin(), doc.headers.rend(),
                               [&](const Header& h) { return !h.array && h.key == w.table; });
    if (header == doc.headers.rend()) {
      new_tables[w.table].push_back(&w);
      continue;
    }
    if (const Assign* a = find_assign(doc, w.table, w.key)) {
      if (unquote(a->raw) == unquote(w.raw)) continue;
      splices.push_back({a->value_begin, a->value_end, w.raw});
      what.push_back(fmt::format("set {} (was {})", w.key, a->raw));
    } else {
      splices.push_back({header->line_end, header->line_end, "  " + w.key + " = " + w.raw + eol});
      what.push_back(fmt::format("added {}", w.key));
    }
  }
  std::string block;
  for (const Path& table : {l.cri, l.containerd, default_rt, l.runtime, l.options}) {
    const auto it = new_tables.find(table);
    if (it == new_tables.end()) continue;
    block += eol + "[" + render_key(table) + "]" + eol;
    for (const Want* w : it->second)
      block += "  " + w->key + " = " + w->raw + eol;
    what.push_back(fmt::format("added [{}]", render_key(table)));
  }
  TextEdit e;
  if (splices.empty() && block.empty()) {
    e.text = std::string(text);
    return e;
  }
  if (!block.empty()) splices.push_back({base.size(), base.size(), (base.ends_with('\n') ? "" : eol) + block});
  std::sort(splices.begin(), splices.end(), [](const Splice& a, const Splice& b) { return a.begin > b.begin; });
  e.text = base;
  for (const auto& s : splices)
    e.text.replace(s.begin, s.end - s.begin, s.with);
  // Read back: the runtime is there, and every statement of the original is still there, whole.
  HPCBAKE_TRY_ASSIGN(const Doc after, Scanner(e.text, where).scan());
  HPCBAKE_TRY_ASSIGN(const auto binary, containerd_runtime(e.text, rt.name, where));
  // Every statement of the original (its table, key and value text) is still there as often, but
  // the values set on purpose: arrays of tables repeat a key, so statements are counted.
  std::map<std::tuple<Path, Path, std::string_view>, int> count;
  for (const auto& a : after.assigns)
    ++count[{a.table, a.key, a.raw}];
  bool kept = after.headers.size() >= doc.headers.size();
  for (const auto& a : doc.assigns) {
    const bool replaced = std::any_of(wants.begin(), wants.end(),
                                      [&](const Want& w) { return w.table == a.table && Path{w.key} == a.key; });
    if (!replaced && --count[{a.table, a.key, a.raw}] < 0) kept = false;
  }
  HPCBAKE_TRY_ASSIGN(const CriSettings cri, containerd_cri(e.text, where));
  if (rt.set_as_default && cri.default_runtime != rt.name) kept = false;
  if (rt.enable_cdi && cri.enable_cdi != true) kept = false;
  if (!binary || *binary != rt.binary || !kept)
    return fail(ErrorKind::internal,
                fmt::format("{}: the edited text does not read back as intended; nothing changed", where),
                "this is a bug in hpcbake: please report it with the file");
  e.changed = true;
  e.what = util::join(what, ", ");
  return e;
}

} // namespace hpcbake::container
