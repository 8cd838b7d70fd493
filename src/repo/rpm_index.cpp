#include "repo/rpm_index.hpp"

#include "util/strings.hpp"

#include <expat.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

namespace hpcbake::repo {

namespace {

bool alnum(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0;
}
bool digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

int rpmvercmp(std::string_view a, std::string_view b) {
  if (a == b) return 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    while (i < a.size() && !alnum(a[i]) && a[i] != '~' && a[i] != '^')
      ++i;
    while (j < b.size() && !alnum(b[j]) && b[j] != '~' && b[j] != '^')
      ++j;
    const char x = i < a.size() ? a[i] : 0, y = j < b.size() ? b[j] : 0;
    if (x == '~' || y == '~') {
      if (x != '~') return 1;
      if (y != '~') return -1;
      ++i, ++j;
      continue;
    }
    if (x == '^' || y == '^') {
      if (!x) return -1;
      if (!y) return 1;
      if (x != '^') return 1;
      if (y != '^') return -1;
      ++i, ++j;
      continue;
    }
    if (!x || !y) break;
    const std::size_t si = i, sj = j;
    const bool num = digit(x);
    auto same_kind = [&](char c) { return num ? digit(c) : std::isalpha(static_cast<unsigned char>(c)) != 0; };
    while (i < a.size() && same_kind(a[i]))
      ++i;
    while (j < b.size() && same_kind(b[j]))
      ++j;
    if (j == sj) return num ? 1 : -1; // a number beats letters
    std::string_view p = a.substr(si, i - si), q = b.substr(sj, j - sj);
    if (num) {
      while (p.size() > 1 && p.front() == '0')
        p.remove_prefix(1);
      while (q.size() > 1 && q.front() == '0')
        q.remove_prefix(1);
      if (p.size() != q.size()) return p.size() < q.size() ? -1 : 1;
    }
    if (int c = p.compare(q); c != 0) return c < 0 ? -1 : 1;
  }
  const bool more_a = i < a.size(), more_b = j < b.size();
  if (!more_a && !more_b) return 0;
  return more_a ? 1 : -1;
}

const char* attr(const XML_Char** atts, const char* name) {
  for (int k = 0; atts[k]; k += 2)
    if (std::strcmp(atts[k], name) == 0) return atts[k + 1];
  return nullptr;
}

std::string a_or(const XML_Char** atts, const char* name) {
  const char* v = attr(atts, name);
  return v ? v : "";
}

bool safe_location(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.find("://") != std::string_view::npos) return false;
  for (char c : p)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '\\') return false;
  for (auto part : util::split(p, '/'))
    if (part.empty() || part == "." || part == "..") return false;
  return true;
}

bool is_hex64(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

bool is_hex(const std::string& s, std::size_t digits) {
  return s.size() == digits && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

} // namespace

std::string RpmEntry::text() const {
  if (flags.empty()) return name;
  static const std::map<std::string, std::string> ops = {
      {"EQ", "="}, {"LT", "<"}, {"LE", "<="}, {"GT", ">"}, {"GE", ">="}};
  const auto op = ops.count(flags) ? ops.at(flags) : flags;
  return fmt::format("{} {} {}{}{}", name, op, epoch.empty() || epoch == "0" ? "" : epoch + ":", ver,
                     rel.empty() ? "" : "-" + rel);
}

std::string RpmPackage::evr() const {
  return fmt::format("{}{}-{}", epoch.empty() || epoch == "0" ? "" : epoch + ":", ver, rel);
}

int compare_rpm_evr(const std::string& e1, const std::string& v1, const std::string& r1, const std::string& e2,
                    const std::string& v2, const std::string& r2) {
  const long x = e1.empty() ? 0 : std::strtol(e1.c_str(), nullptr, 10);
  const long y = e2.empty() ? 0 : std::strtol(e2.c_str(), nullptr, 10);
  if (x != y) return x < y ? -1 : 1;
  if (int c = rpmvercmp(v1, v2); c != 0) return c;
  if (r1.empty() || r2.empty()) return 0; // a requirement without a release matches any
  return rpmvercmp(r1, r2);
}

// ---- repomd.xml ------------------------------------------------------------------------------
namespace {
struct RepomdState {
  std::vector<RepomdData> out;
  std::string text;
  bool in_data = false;
};
} // namespace

Result<std::vector<RepomdData>> parse_repomd(std::string_view xml, const std::string& label) {
  RepomdState st;
  XML_Parser p = XML_ParserCreate(nullptr);
  XML_SetUserData(p, &st);
  XML_SetElementHandler(
      p,
      [](void* u, const XML_Char* name, const XML_Char** atts) {
        auto& s = *static_cast<RepomdState*>(u);
        s.text.clear();
        if (std::strcmp(name, "data") == 0) {
          s.in_data = true;
          s.out.push_back({a_or(atts, "type"), {}, {}, {}, {}, 0});
        } else if (s.in_data && std::strcmp(name, "location") == 0) {
          s.out.back().location = a_or(atts, "href");
        } else if (s.in_data && std::strcmp(name, "checksum") == 0) {
          s.out.back().checksum_type = a_or(atts, "type");
        }
      },
      [](void* u, const XML_Char* name) {
        auto& s = *static_cast<RepomdState*>(u);
        if (!s.in_data) return;
        if (std::strcmp(name, "data") == 0) s.in_data = false;
        if (std::strcmp(name, "checksum") == 0 && s.out.back().checksum_type == "sha256")
          s.out.back().sha256 = util::to_lower(util::trim(s.text));
        if (std::strcmp(name, "checksum") == 0 && s.out.back().checksum_type == "sha512")
          s.out.back().sha512 = util::to_lower(util::trim(s.text));
        if (std::strcmp(name, "size") == 0) s.out.back().size = std::strtoull(s.text.c_str(), nullptr, 10);
      });
  XML_SetCharacterDataHandler(p, [](void* u, const XML_Char* t, int n) {
    static_cast<RepomdState*>(u)->text.append(t, static_cast<std::size_t>(n));
  });
  const bool ok = XML_Parse(p, xml.data(), static_cast<int>(xml.size()), 1) == XML_STATUS_OK;
  const std::string why = ok ? "" : XML_ErrorString(XML_GetErrorCode(p));
  XML_ParserFree(p);
  if (!ok) return fail(ErrorKind::fetch, fmt::format("{}: not repomd XML: {}", label, why));
  for (const auto& d : st.out) {
    if (!safe_location(d.location))
      return fail(ErrorKind::fetch,
                  fmt::format("{}: {} location '{}' is not inside the repository", label, d.type, d.location));
    // The digest names the file in the cache (fetch::Cache::entry): anything but 64 hex digits
    // would name another path, so it is refused here, where it is read.
    if (d.checksum_type == "sha256" && !util::is_sha256_hex(d.sha256))
      return fail(
          ErrorKind::fetch,
          fmt::format("{}: {} ({}) has a SHA-256 checksum that is not 64 hex digits", label, d.type, d.location),
          "the repository's metadata is damaged or not rpm-md: check it with dnf on a machine that uses it");
    if (d.checksum_type == "sha512" && !is_hex(d.sha512, 128))
      return fail(
          ErrorKind::fetch,
          fmt::format("{}: {} ({}) has a SHA-512 checksum that is not 128 hex digits", label, d.type, d.location),
          "the repository's metadata is damaged or not rpm-md: check it with dnf on a machine that uses it");
  }
  return std::move(st.out);
}

// ---- primary.xml -----------------------------------------------------------------------------
// The longest text of an element read (<name>, <arch>, <checksum>, <file>) that is kept: PATH_MAX
// (4096 on Linux, <linux/limits.h>), the longest path a <file> can name; the others are far
// shorter. A longer one of those is an error; longer text elsewhere (<description>) is not read.
constexpr std::size_t kMaxText = 4096;

struct PrimaryParser::State {
  std::string arch, label;
  XML_Parser p = nullptr;
  std::vector<RpmPackage> out;
  RpmPackage cur;
  std::vector<RpmEntry>* list = nullptr; // provides/requires/conflicts being read
  bool in_package = false;
  std::string checksum_type; // of the <checksum> being read
  std::string text;
  bool overlong = false; // `text` was cut at kMaxText
  std::string error;
  std::uint64_t fed = 0;
};

PrimaryParser::PrimaryParser(std::string arch, std::string label) : s_(std::make_unique<State>()) {
  s_->arch = std::move(arch);
  s_->label = std::move(label);
  s_->p = XML_ParserCreate(nullptr);
  XML_SetUserData(s_->p, s_.get());
  XML_SetElementHandler(
      s_->p,
      [](void* u, const XML_Char* name, const XML_Char** atts) {
        auto& s = *static_cast<State*>(u);
        s.text.clear();
        s.overlong = false;
        const std::string_view n = name;
        if (n == "package") {
          s.in_package = true;
          s.cur = {};
        } else if (!s.in_package) {
          return;
        } else if (n == "version") {
          s.cur.epoch = a_or(atts, "epoch");
          s.cur.ver = a_or(atts, "ver");
          s.cur.rel = a_or(atts, "rel");
        } else if (n == "checksum") {
          s.checksum_type = a_or(atts, "type");
        } else if (n == "location") {
          s.cur.location = a_or(atts, "href");
        } else if (n == "size") {
          s.cur.size = std::strtoull(a_or(atts, "package").c_str(), nullptr, 10);
        } else if (n == "rpm:provides") {
          s.list = &s.cur.provides;
        } else if (n == "rpm:requires") {
          s.list = &s.cur.requirements;
        } else if (n == "rpm:conflicts") {
          s.list = &s.cur.conflicts;
        } else if (n == "rpm:entry" && s.list) {
          s.list->push_back(
              {a_or(atts, "name"), a_or(atts, "flags"), a_or(atts, "epoch"), a_or(atts, "ver"), a_or(atts, "rel")});
        }
      },
      [](void* u, const XML_Char* name) {
        auto& s = *static_cast<State*>(u);
        if (!s.in_package) return;
        const std::string_view n = name;
        const std::string t(util::trim(s.text));
        if (s.overlong && s.error.empty() && (n == "name" || n == "arch" || n == "checksum" || n == "file"))
          s.error = fmt::format("{}: a <{}> longer than {} bytes (package {})", s.label, n, kMaxText,
                                s.cur.name.substr(0, 200));
        if (n == "name") s.cur.name = t;
        if (n == "arch") s.cur.arch = t;
        if (n == "checksum" && s.checksum_type == "sha256") s.cur.sha256 = t;
        if (n == "checksum" && s.checksum_type == "sha512") s.cur.sha512 = util::to_lower(t);
        if (n == "file") s.cur.files.push_back(t);
        if (n == "rpm:provides" || n == "rpm:requires" || n == "rpm:conflicts") s.list = nullptr;
        if (n != "package") return;
        s.in_package = false;
        if (s.cur.arch != s.arch && s.cur.arch != "noarch") return;
        const std::string where = fmt::format("{}: {}-{}.{}", s.label, s.cur.name, s.cur.evr(), s.cur.arch);
        if (!safe_location(s.cur.location) && s.error.empty())
          s.error = fmt::format("{}: location '{}' is not inside the repository", where, s.cur.location);
        else if (!is_hex64(s.cur.sha256) && !(s.cur.sha256.empty() && is_hex(s.cur.sha512, 128)) && s.error.empty())
          s.error = fmt::format("{}: no SHA-256 or SHA-512 digest: it cannot be verified", where);
        std::transform(s.cur.sha256.begin(), s.cur.sha256.end(), s.cur.sha256.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        s.out.push_back(std::move(s.cur));
      });
  XML_SetCharacterDataHandler(s_->p, [](void* u, const XML_Char* t, int n) {
    auto& s = *static_cast<State*>(u);
    if (!s.in_package) return;
    // Cut at exactly kMaxText, however expat splits the text into calls (a download arrives in
    // pieces): what is read must not depend on where the pieces end.
    const std::size_t room = kMaxText - std::min(kMaxText, s.text.size());
    const auto len = static_cast<std::size_t>(n);
    if (len > room) s.overlong = true;
    s.text.append(t, std::min(len, room));
  });
}

PrimaryParser::~PrimaryParser() {
  if (s_ && s_->p) XML_ParserFree(s_->p);
}

Status PrimaryParser::feed(std::string_view chunk, bool last) {
  constexpr std::uint64_t kMaxPrimaryBytes = 2ull << 30; // EPEL's is about 100 MB
  s_->fed += chunk.size();
  if (s_->fed > kMaxPrimaryBytes)
    return fail(ErrorKind::fetch,
                fmt::format("{}: larger than {} MiB uncompressed", s_->label, kMaxPrimaryBytes >> 20));
  if (XML_Parse(s_->p, chunk.data(), static_cast<int>(chunk.size()), last ? 1 : 0) != XML_STATUS_OK)
    return fail(ErrorKind::fetch,
                fmt::format("{}: not primary XML: {} (line {})", s_->label, XML_ErrorString(XML_GetErrorCode(s_->p)),
                            XML_GetCurrentLineNumber(s_->p)));
  if (!s_->error.empty()) return fail(ErrorKind::fetch, s_->error);
  return {};
}

std::vector<RpmPackage> PrimaryParser::take() {
  return std::move(s_->out);
}

// ---- closure ---------------------------------------------------------------------------------
namespace {

bool provide_matches(const RpmEntry& prov, const std::string& prov_epoch_default, const RpmEntry& req) {
  if (prov.name != req.name) return false;
  if (req.flags.empty()) return true;
  if (prov.flags.empty()) return true; // an unversioned provide satisfies any version (rpm's rule)
  const int c = compare_rpm_evr(prov.epoch.empty() ? prov_epoch_default : prov.epoch, prov.ver, prov.rel, req.epoch,
                                req.ver, req.rel);
  if (req.flags == "EQ") return c == 0;
  if (req.flags == "LT") return c < 0;
  if (req.flags == "LE") return c <= 0;
  if (req.flags == "GT") return c > 0;
  if (req.flags == "GE") return c >= 0;
  return false;
}

bool provides(const RpmPackage& p, const RpmEntry& req) {
  if (req.name.starts_with("/")) return std::find(p.files.begin(), p.files.end(), req.name) != p.files.end();
  if (req.name == p.name && provide_matches({p.name, "EQ", p.epoch, p.ver, p.rel}, p.epoch, req)) return true;
  return std::any_of(p.provides.begin(), p.provides.end(),
                     [&](const RpmEntry& pr) { return provide_matches(pr, p.epoch, req); });
}

class RpmResolver {
public:
  explicit RpmResolver(const std::vector<RpmPackage>& index) : index_(index) {}

  // False when nothing here provides it.
  bool satisfy(const RpmEntry& req) {
    if (req.name.starts_with("(") || req.name.starts_with("rpmlib(")) return false; // rich deps, rpm itself
    for (const auto* p : chosen_)
      if (provides(*p, req)) return true;
    const RpmPackage* best = nullptr;
    for (const auto& p : index_)
      if (provides(p, req) &&
          (!best || (p.name == req.name && best->name != req.name) ||
           (p.name == best->name && compare_rpm_evr(p.epoch, p.ver, p.rel, best->epoch, best->ver, best->rel) > 0)))
        best = &p;
    if (!best) return false;
    chosen_.push_back(best);
    out_.selected.push_back(*best);
    for (const auto& r : best->requirements)
      if (!satisfy(r) && !r.name.starts_with("rpmlib(")) out_.other.push_back(r.text());
    return true;
  }

  RpmResolution take() { return std::move(out_); }

private:
  const std::vector<RpmPackage>& index_;
  std::vector<const RpmPackage*> chosen_;
  RpmResolution out_;
};

// "name", "name-ver" or "name-ver-rel" as a requirement: the longest name the index has.
RpmEntry request_entry(const std::vector<RpmPackage>& index, const std::string& req) {
  for (const auto& p : index) {
    if (req == p.name) return {p.name, "", "", "", ""};
    if (req.starts_with(p.name + "-")) {
      const std::string rest = req.substr(p.name.size() + 1);
      const auto dash = rest.rfind('-');
      // dnf takes NAME-VER[-REL] at the package's own epoch (NVIDIA's rpms carry Epoch 3).
      if (rest == p.ver) return {p.name, "EQ", p.epoch, p.ver, ""};
      if (dash != std::string::npos && rest.substr(0, dash) == p.ver)
        return {p.name, "EQ", p.epoch, p.ver, rest.substr(dash + 1)};
    }
  }
  return {req, "", "", "", ""};
}

} // namespace

Result<RpmResolution> resolve_rpm(const std::vector<RpmPackage>& index, const std::vector<std::string>& requests,
                                  bool soft) {
  RpmResolver r(index);
  std::vector<std::string> missing;
  for (const auto& req : requests) {
    const auto e = request_entry(index, req);
    if (!r.satisfy(e)) {
      if (!soft)
        return fail(ErrorKind::fetch, fmt::format("the repository has no package {}", req),
                    "check the name and version in the manifest against the repository (dnf list --showduplicates "
                    "NAME on a machine that has it)");
      missing.push_back(req);
    }
  }
  auto out = r.take();
  out.other.insert(out.other.end(), missing.begin(), missing.end());
  std::sort(out.other.begin(), out.other.end());
  out.other.erase(std::unique(out.other.begin(), out.other.end()), out.other.end());
  return out;
}

} // namespace hpcbake::repo
