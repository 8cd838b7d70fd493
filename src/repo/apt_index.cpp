#include "repo/apt_index.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>
#include <regex>

namespace hpcbake::repo {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// dpkg's verrevcmp: '~' sorts before everything, even the end; letters before other symbols.
int order(char c) {
  if (std::isdigit(static_cast<unsigned char>(c))) return 0;
  if (std::isalpha(static_cast<unsigned char>(c))) return c;
  if (c == '~') return -1;
  if (c) return c + 256;
  return 0;
}

int verrevcmp(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    int first_diff = 0;
    while ((i < a.size() && !std::isdigit(static_cast<unsigned char>(a[i]))) ||
           (j < b.size() && !std::isdigit(static_cast<unsigned char>(b[j])))) {
      const int ac = i < a.size() ? order(a[i]) : 0;
      const int bc = j < b.size() ? order(b[j]) : 0;
      if (ac != bc) return ac - bc;
      ++i;
      ++j;
    }
    while (i < a.size() && a[i] == '0')
      ++i;
    while (j < b.size() && b[j] == '0')
      ++j;
    while (i < a.size() && j < b.size() && std::isdigit(static_cast<unsigned char>(a[i])) &&
           std::isdigit(static_cast<unsigned char>(b[j]))) {
      if (!first_diff) first_diff = a[i] - b[j];
      ++i;
      ++j;
    }
    if (i < a.size() && std::isdigit(static_cast<unsigned char>(a[i]))) return 1;
    if (j < b.size() && std::isdigit(static_cast<unsigned char>(b[j]))) return -1;
    if (first_diff) return first_diff;
  }
  return 0;
}

struct DebVersion {
  long epoch = 0;
  std::string_view upstream, revision;
};

DebVersion split_version(std::string_view v) {
  DebVersion d;
  if (auto colon = v.find(':'); colon != std::string_view::npos &&
                                std::all_of(v.begin(), v.begin() + static_cast<long>(colon),
                                            [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    std::from_chars(v.data(), v.data() + colon, d.epoch); // an overlong epoch stays 0 (dpkg refuses it)
    v.remove_prefix(colon + 1);
  }
  if (auto dash = v.rfind('-'); dash != std::string_view::npos) {
    d.upstream = v.substr(0, dash);
    d.revision = v.substr(dash + 1);
  } else {
    d.upstream = v;
  }
  return d;
}

// A path from the index that goes into a mirror directory: relative, no "..", no odd bytes.
bool safe_relative_path(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.size() > 1024) return false;
  for (char c : p)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '\\') return false;
  for (const auto part : util::split(p, '/'))
    if (part.empty() || part == "." || part == "..") return false;
  return true;
}

std::optional<std::uint64_t> to_u64(std::string_view s) {
  if (s.empty() || s.size() > 19 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoull(std::string(s));
}

bool is_hex64(std::string_view s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

bool glob_or_regex(const std::string& pattern, const std::string& value) {
  if (pattern.size() > 2 && pattern.front() == '/' && pattern.back() == '/') {
    try {
      return std::regex_search(value, std::regex(pattern.substr(1, pattern.size() - 2)));
    } catch (const std::regex_error&) {
      return false;
    }
  }
  return ::fnmatch(pattern.c_str(), value.c_str(), 0) == 0;
}

} // namespace

const std::string* Stanza::get(std::string_view name) const {
  const std::string want = lower(name);
  for (const auto& [k, v] : fields)
    if (lower(k) == want) return &v;
  return nullptr;
}

std::vector<Stanza> parse_deb822(std::string_view text) {
  std::vector<Stanza> out;
  Stanza cur;
  for (auto line : util::split(text, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (std::all_of(line.begin(), line.end(), is_space)) {
      if (!cur.fields.empty()) out.push_back(std::move(cur));
      cur = {};
      continue;
    }
    if (line.front() == '#') continue;
    if (is_space(line.front())) { // a continuation line
      if (!cur.fields.empty()) {
        auto& v = cur.fields.back().second;
        auto t = util::trim(line);
        v += '\n';
        if (t != ".") v += t;
      }
      continue;
    }
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    cur.fields.emplace_back(std::string(util::trim(line.substr(0, colon))),
                            std::string(util::trim(line.substr(colon + 1))));
  }
  if (!cur.fields.empty()) out.push_back(std::move(cur));
  return out;
}

int compare_debian_versions(std::string_view a, std::string_view b) {
  const auto x = split_version(a), y = split_version(b);
  if (x.epoch != y.epoch) return x.epoch < y.epoch ? -1 : 1;
  if (int c = verrevcmp(x.upstream, y.upstream); c != 0) return c < 0 ? -1 : 1;
  const int c = verrevcmp(x.revision, y.revision);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

Result<std::vector<IndexFile>> release_files(std::string_view release, const std::string& label) {
  auto stanzas = parse_deb822(release);
  const std::string* sums = stanzas.empty() ? nullptr : stanzas.front().get("SHA256");
  if (!sums)
    return fail(ErrorKind::fetch, fmt::format("{}: no SHA256 list of index files", label),
                "apt needs SHA256 sums in Release: the repository is not one hpcbake can carry");
  std::vector<IndexFile> out;
  for (auto line : util::split(*sums, '\n')) {
    std::vector<std::string_view> parts;
    for (auto p : util::split(util::trim(line), ' '))
      if (!p.empty()) parts.push_back(p);
    if (parts.empty()) continue;
    auto size = parts.size() == 3 ? to_u64(parts[1]) : std::nullopt;
    if (parts.size() != 3 || !is_hex64(parts[0]) || !size)
      return fail(ErrorKind::fetch, fmt::format("{}: a malformed SHA256 line: '{}'", label, util::trim(line)));
    out.push_back({std::string(parts[2]), lower(parts[0]), *size});
  }
  return out;
}

std::string Relation::text() const {
  return op.empty() ? name : fmt::format("{} ({} {})", name, op, version);
}

Result<std::vector<std::vector<Relation>>> parse_relations(std::string_view field, const std::string& label) {
  std::vector<std::vector<Relation>> out;
  for (auto group : util::split(field, ',')) {
    if (util::trim(group).empty()) continue;
    std::vector<Relation> alts;
    for (auto alt : util::split(group, '|')) {
      std::string s(util::trim(alt));
      int depth = 0; // architecture ("[amd64]") and build-profile ("<!nocheck>") restrictions, outside "( )"
      for (std::size_t i = 0; i < s.size(); ++i) {
        depth += s[i] == '(' ? 1 : (s[i] == ')' ? -1 : 0);
        if (depth == 0 && (s[i] == '[' || s[i] == '<')) {
          s = std::string(util::trim(s.substr(0, i)));
          break;
        }
      }
      Relation r;
      const auto paren = s.find('(');
      r.name = std::string(util::trim(s.substr(0, paren)));
      if (auto colon = r.name.find(':'); colon != std::string::npos) r.name.resize(colon); // :any, :amd64
      if (paren != std::string::npos) {
        const auto close = s.find(')', paren);
        if (close == std::string::npos)
          return fail(ErrorKind::fetch, fmt::format("{}: unbalanced '(' in '{}'", label, s));
        std::string inside(util::trim(s.substr(paren + 1, close - paren - 1)));
        std::size_t n = 0;
        while (n < inside.size() && (inside[n] == '<' || inside[n] == '>' || inside[n] == '='))
          ++n;
        r.op = inside.substr(0, n);
        if (r.op == "<") r.op = "<="; // obsolete forms, as dpkg reads them
        if (r.op == ">") r.op = ">=";
        r.version = std::string(util::trim(std::string_view(inside).substr(n)));
        static const std::vector<std::string> ops = {"<<", "<=", "=", ">=", ">>"};
        if (std::find(ops.begin(), ops.end(), r.op) == ops.end() || r.version.empty())
          return fail(ErrorKind::fetch, fmt::format("{}: cannot read the version relation '({})'", label, inside));
      }
      if (r.name.empty()) return fail(ErrorKind::fetch, fmt::format("{}: an empty package name in '{}'", label, field));
      alts.push_back(std::move(r));
    }
    out.push_back(std::move(alts));
  }
  return out;
}

bool satisfies(const std::string& version, const Relation& r) {
  if (r.op.empty()) return true;
  const int c = compare_debian_versions(version, r.version);
  if (r.op == "<<") return c < 0;
  if (r.op == "<=") return c <= 0;
  if (r.op == "=") return c == 0;
  if (r.op == ">=") return c >= 0;
  return c > 0; // ">>"
}

Result<std::vector<Package>> parse_packages(std::string_view text, const std::string& arch, const std::string& label) {
  std::vector<Package> out;
  for (const auto& st : parse_deb822(text)) {
    const auto* name = st.get("Package");
    const auto* version = st.get("Version");
    const auto* a = st.get("Architecture");
    if (!name || !version || !a) continue;
    if (*a != arch && *a != "all") continue;
    Package p{*name, *version, *a, {}, {}, 0, {}, {}, {}};
    const std::string where = fmt::format("{}: {} {}", label, p.name, p.version);
    const auto* file = st.get("Filename");
    const auto* sha = st.get("SHA256");
    const auto* size = st.get("Size");
    std::string f = file ? *file : std::string();
    while (f.starts_with("./"))
      f.erase(0, 2);
    if (!safe_relative_path(f))
      return fail(ErrorKind::fetch, fmt::format("{}: Filename '{}' is not a relative path inside the repository", where,
                                                file ? *file : std::string()));
    if (!sha || !is_hex64(*sha) || !size || !to_u64(*size))
      return fail(ErrorKind::fetch, fmt::format("{}: no SHA256 and Size: it cannot be verified", where));
    p.filename = f;
    p.sha256 = lower(*sha);
    p.size = *to_u64(*size);
    for (const char* field : {"Pre-Depends", "Depends"})
      if (const auto* v = st.get(field)) {
        HPCBAKE_TRY_ASSIGN(auto rel, parse_relations(*v, where));
        p.depends.insert(p.depends.end(), rel.begin(), rel.end());
      }
    for (const char* field : {"Conflicts", "Breaks"})
      if (const auto* v = st.get(field)) {
        HPCBAKE_TRY_ASSIGN(auto rel, parse_relations(*v, where));
        for (auto& g : rel)
          p.conflicts.insert(p.conflicts.end(), g.begin(), g.end());
      }
    if (const auto* v = st.get("Provides")) {
      HPCBAKE_TRY_ASSIGN(auto rel, parse_relations(*v, where));
      for (auto& g : rel)
        p.provides.insert(p.provides.end(), g.begin(), g.end());
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Pin> parse_preferences(std::string_view text) {
  std::vector<Pin> out;
  for (const auto& st : parse_deb822(text)) {
    const auto* pkgs = st.get("Package");
    const auto* pin = st.get("Pin");
    const auto* prio = st.get("Pin-Priority");
    if (!pkgs || !pin || !prio) continue;
    const std::string_view p = util::trim(*pin);
    if (!p.starts_with("version ")) continue; // release / origin pins rank one repository alike
    Pin x;
    for (auto n : util::split(*pkgs, ' '))
      if (!util::trim(n).empty()) x.packages.emplace_back(util::trim(n));
    x.version = std::string(util::trim(p.substr(8)));
    try {
      x.priority = std::stoi(*prio);
    } catch (...) {
      continue;
    }
    out.push_back(std::move(x));
  }
  return out;
}

bool apt_reads_preferences_file(std::string_view name) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
      }))
    return false;
  return name.find('.') == std::string_view::npos || (name.ends_with(".pref") && name.size() > 5);
}

namespace {

class Resolver {
public:
  Resolver(const std::vector<Package>& index, std::vector<Pin> pins,
           const std::function<Result<std::vector<Pin>>(const Package&)>& inspect)
      : pins_(std::move(pins)), inspect_(inspect) {
    for (const auto& p : index) {
      by_name_[p.name].push_back(&p);
      for (const auto& pr : p.provides)
        providers_[pr.name].push_back({&p, pr});
    }
  }

  Status request(const std::string& req) {
    Relation r;
    if (auto eq = req.find('='); eq != std::string::npos) {
      r.name = req.substr(0, eq);
      r.op = "=";
      r.version = req.substr(eq + 1);
    } else {
      r.name = req;
    }
    auto found = satisfy({r}, "the plan", {});
    if (!found && !by_name_.count(r.name)) return std::unexpected(found.error()); // a dependency's problem
    if (!found || !*found) {
      const auto it = by_name_.find(r.name);
      std::vector<std::string> have;
      if (it != by_name_.end())
        for (const auto* p : it->second)
          have.push_back(p->version);
      if (!found && found.error().message.find("the plan needs") == std::string::npos)
        return std::unexpected(found.error()); // a dependency's own problem
      return fail(ErrorKind::fetch,
                  have.empty() ? fmt::format("the repository has no package {}", r.name)
                               : fmt::format("the repository has no {} that can be installed (it has {})", r.text(),
                                             util::join(have, ", ")),
                  have.empty() ? "check the package name in the manifest against the repository (apt-cache policy NAME "
                                 "on a machine that has it)"
                               : "the pinned version is no longer published: pin one the repository has "
                                 "(manifests/components)");
    }
    return {};
  }

  Resolution take() { return std::move(out_); }

private:
  int priority(const Package& p) const {
    for (const auto& pin : pins_)
      for (const auto& pat : pin.packages) {
        const bool name_ok = glob_or_regex(pat, p.name);
        if (name_ok && glob_or_regex(pin.version, p.version)) return pin.priority;
      }
    return 500;
  }

  bool conflicts_with_chosen(const Package& p) const {
    for (const auto& [name, q] : chosen_) {
      for (const auto& c : q->conflicts)
        if (c.name == p.name && satisfies(p.version, c) && q->name != p.name) return true;
      for (const auto& c : p.conflicts)
        if (c.name == q->name && satisfies(q->version, c) && q->name != p.name) return true;
    }
    return false;
  }

  static bool provides(const Relation& pr, const Relation& r) {
    if (pr.name != r.name) return false;
    return r.op.empty() || (pr.op == "=" && satisfies(pr.version, r)); // versioned Provides (dpkg's rule)
  }

  // The version apt would choose for `r` (and every relation in `also` on the same name) among
  // this repository's packages, or nullptr.
  const Package* candidate(const Relation& r, const std::vector<Relation>& also) const {
    auto fits = [&](const std::string& version) {
      return satisfies(version, r) && std::all_of(also.begin(), also.end(), [&](const Relation& a) {
               return a.name != r.name || satisfies(version, a);
             });
    };
    std::vector<const Package*> cands;
    if (auto it = by_name_.find(r.name); it != by_name_.end())
      for (const auto* p : it->second)
        if (fits(p->version)) cands.push_back(p);
    if (cands.empty()) // a virtual package: its providers
      if (auto it = providers_.find(r.name); it != providers_.end())
        for (const auto& [p, pr] : it->second)
          if (provides(pr, r)) cands.push_back(p);
    const Package* best = nullptr;
    int best_prio = 0;
    for (const auto* p : cands) {
      const int prio = priority(*p);
      if (prio < 0 || conflicts_with_chosen(*p)) continue;
      // apt installs one version of a package: a provider chosen at another version is no candidate.
      if (const auto c = chosen_.find(p->name); c != chosen_.end() && c->second != p) continue;
      if (!best || prio > best_prio || (prio == best_prio && compare_debian_versions(p->version, best->version) > 0)) {
        best = p;
        best_prio = prio;
      }
    }
    return best;
  }

  bool chosen_satisfies(const Relation& r) const {
    if (auto it = chosen_.find(r.name); it != chosen_.end()) return satisfies(it->second->version, r);
    for (const auto& [name, p] : chosen_)
      for (const auto& pr : p->provides)
        if (provides(pr, r)) return true;
    return false;
  }

  bool known(const std::string& name) const { return by_name_.count(name) || providers_.count(name); }

  // One dependency group (`also`: the depender's other single relations, so "foo (>= 1), foo (<< 2)"
  // chooses one foo for both): already met, met by a package of this repository (chosen now, with
  // its own dependencies), or, when no alternative names a package here, left to the distribution
  // (false). A group this repository names but cannot meet is an error naming it.
  Result<bool> satisfy(const std::vector<Relation>& alts, const std::string& by, const std::vector<Relation>& also) {
    for (const auto& r : alts)
      if (chosen_satisfies(r)) return true;
    for (const auto& r : alts) {
      if (chosen_.count(r.name)) continue; // chosen at another version: apt could not install both
      const Package* p = candidate(r, also);
      if (!p) continue;
      HPCBAKE_TRY(choose(*p));
      return true;
    }
    if (std::none_of(alts.begin(), alts.end(), [&](const Relation& r) { return known(r.name); })) return false;
    std::vector<std::string> t;
    for (const auto& x : alts)
      t.push_back(chosen_.count(x.name) ? fmt::format("{} ({} is chosen)", x.text(), chosen_.at(x.name)->version)
                                        : x.text());
    return fail(ErrorKind::fetch,
                fmt::format("{} needs {}: the repository has the package, but no version that fits the versions "
                            "already chosen, the pins and the conflicts",
                            by, util::join(t, " | ")),
                "the repository's packages do not agree with the pinned versions: check the manifest's pins");
  }

  Status choose(const Package& p) {
    chosen_[p.name] = &p;
    out_.selected.push_back(p);
    if (inspect_) {
      HPCBAKE_TRY_ASSIGN(auto more, inspect_(p));
      pins_.insert(pins_.end(), more.begin(), more.end());
    }
    std::vector<Relation> singles;
    for (const auto& group : p.depends)
      if (group.size() == 1) singles.push_back(group.front());
    for (const auto& group : p.depends) {
      HPCBAKE_TRY_ASSIGN(bool ok, satisfy(group, p.name + " " + p.version, singles));
      if (!ok) {
        std::vector<std::string> t;
        for (const auto& x : group)
          t.push_back(x.text());
        out_.other.push_back(util::join(t, " | "));
      }
    }
    return {};
  }

  std::map<std::string, std::vector<const Package*>> by_name_;
  std::map<std::string, std::vector<std::pair<const Package*, Relation>>> providers_;
  std::map<std::string, const Package*> chosen_;
  std::vector<Pin> pins_;
  const std::function<Result<std::vector<Pin>>(const Package&)>& inspect_;
  Resolution out_;
};

} // namespace

Result<Resolution> resolve(const std::vector<Package>& index, const std::vector<std::string>& requests,
                           std::vector<Pin> pins,
                           const std::function<Result<std::vector<Pin>>(const Package&)>& inspect) {
  Resolver r(index, std::move(pins), inspect);
  for (const auto& req : requests)
    HPCBAKE_TRY(r.request(req));
  auto out = r.take();
  std::sort(out.other.begin(), out.other.end());
  out.other.erase(std::unique(out.other.begin(), out.other.end()), out.other.end());
  return out;
}

} // namespace hpcbake::repo
