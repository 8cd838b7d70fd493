#include "manifest/catalog.hpp"

#include "util/strings.hpp"

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

bool contains(std::string_view haystack, std::string_view needle) {
  return lower(haystack).find(lower(needle)) != std::string::npos;
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

} // namespace hpcbake::manifest
