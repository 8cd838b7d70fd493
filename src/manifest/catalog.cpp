#include "manifest/catalog.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace hpcbake::manifest {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Case-insensitive, and a number at either end of `needle` matches a whole number only: "a10" is
// in "NV36ads_A10_v5" but not in "NC24ads_A100_v4", "96" not in "HB196".
bool contains(std::string_view haystack, std::string_view needle) {
  const std::string h = lower(haystack), n = lower(needle);
  if (n.empty()) return true;
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  for (auto at = h.find(n); at != std::string::npos; at = h.find(n, at + 1)) {
    const bool cut_before = digit(n.front()) && at > 0 && digit(h[at - 1]);
    const bool cut_after = digit(n.back()) && at + n.size() < h.size() && digit(h[at + n.size()]);
    if (!cut_before && !cut_after) return true;
  }
  return false;
}

} // namespace

std::string size_key(std::string_view name) {
  std::string k = lower(name);
  if (k.starts_with("standard_")) k.erase(0, 9);
  return k;
}

std::vector<std::string> closest(std::string_view wanted, const std::vector<std::string>& names, bool sizes,
                                 std::size_t max) {
  const std::string w = sizes ? size_key(wanted) : lower(wanted);
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const auto& n : names) {
    const std::string k = sizes ? size_key(n) : lower(n);
    const std::size_t d = util::edit_distance(w, k);
    // Two edits at least (a swapped pair of letters, "plna"), a third of the name at most, 5 at most.
    const std::size_t limit = std::clamp<std::size_t>(std::max(w.size(), k.size()) / 3, 2, 5);
    if (d <= limit) scored.emplace_back(d, n);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (std::size_t i = 0; i < scored.size() && i < max; ++i)
    out.push_back(scored[i].second);
  return out;
}

std::string did_you_mean(std::string_view wanted, const std::vector<std::string>& names, bool sizes, std::size_t max,
                         std::string_view joiner) {
  const auto close = closest(wanted, names, sizes, max);
  return close.empty() ? std::string() : " (did you mean " + util::join(close, std::string(joiner)) + "?)";
}

std::vector<const SizeManifest*> select_sizes(const Manifests& m, const SizeFilter& f) {
  std::vector<const SizeManifest*> out;
  for (const auto& s : m.sizes) {
    if (!f.text.empty() && !contains(s.size, f.text) && !contains(size_key(s.size), size_key(f.text)) &&
        !contains(s.family, f.text))
      continue;
    if (!f.gpu.empty()) {
      if (util::iequals(f.gpu, "none") ? s.gpu.has_value() : (!s.gpu || !util::iequals(s.gpu->model, f.gpu))) continue;
    }
    if (f.infiniband && !s.infiniband) continue;
    out.push_back(&s);
  }
  std::sort(out.begin(), out.end(), [](const auto* a, const auto* b) { return size_key(a->size) < size_key(b->size); });
  return out;
}

bool component_applies(const ComponentManifest& c, const SizeManifest& size) {
  const bool nvidia = size.gpu && size.gpu->vendor == "nvidia";
  if (c.kind == ComponentKind::userspace) {
    switch (c.applies_to) {
    case AppliesTo::infiniband:
      return size.infiniband.has_value();
    case AppliesTo::nvidia_gpu:
      return nvidia;
    case AppliesTo::any:
      return true;
    }
  }
  if (c.kind == ComponentKind::dcgm) return nvidia && size.driver && size.driver->kind == DriverKind::cuda;
  return nvidia;
}

namespace {

bool serves(const DistroManifest& d, Arch arch) {
  return std::find(d.arches.begin(), d.arches.end(), arch) != d.arches.end();
}

// The distros (serving the size's architecture) where every component has a variant that is not
// refused; when there is none, `why` says what a distro lacked: the first refusal (with its
// published reason), else the first component not pinned.
std::vector<std::string> distros_pinning_all(const Manifests& m, const SizeManifest& size,
                                             const std::vector<const ComponentManifest*>& comps, std::string& why) {
  std::vector<std::string> out;
  std::string refused, unpinned;
  const std::string model = size.gpu ? size.gpu->model : std::string();
  for (const auto& d : m.distros) {
    if (!serves(d, size.arch)) continue;
    bool all = true;
    for (const auto* c : comps) {
      const auto* v = c->variant_for(d.id, model, size.arch);
      if (v && !v->refused) continue;
      all = false;
      if (v && refused.empty()) refused = fmt::format("{} is refused for {}: {}", c->component, d.id, *v->refused);
      if (!v && unpinned.empty()) unpinned = fmt::format("{} is not pinned for {}", c->component, d.id);
      break;
    }
    if (all) out.push_back(d.id);
  }
  why = refused.empty() ? unpinned : refused;
  return out;
}

ProfileSupport support_of(const Manifests& m, const SizeManifest& size, const ProfileManifest& p) {
  ProfileSupport r{p.id, false, {}, {}};
  std::vector<const ComponentManifest*> needed;
  std::vector<std::string> skipped;
  for (const auto& id : p.components) {
    const auto* c = m.find_component(id);
    if (!c) {
      r.reason = fmt::format("unknown component '{}'", id);
      return r;
    }
    if (component_applies(*c, size))
      needed.push_back(c);
    else if (c->kind == ComponentKind::userspace)
      skipped.push_back(c->component);
    else {
      r.reason = fmt::format("{} needs an NVIDIA GPU", c->component);
      return r;
    }
  }
  if (needed.empty() && !skipped.empty()) {
    r.reason = fmt::format("{} {} not for this size", util::join(skipped, ", "), skipped.size() == 1 ? "is" : "are");
    return r;
  }
  std::string why;
  r.distros = distros_pinning_all(m, size, needed, why);
  r.supported = !r.distros.empty();
  if (!r.supported)
    r.reason =
        why.empty() ? fmt::format("no distro serves {}", to_string(size.arch)) : fmt::format("on no distro: {}", why);
  return r;
}

} // namespace

std::vector<ProfileSupport> profile_support(const Manifests& m, const SizeManifest& size) {
  std::vector<ProfileSupport> out;
  for (const auto& p : m.profiles)
    out.push_back(support_of(m, size, p));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.profile < b.profile; });
  return out;
}

} // namespace hpcbake::manifest
