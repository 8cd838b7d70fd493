#include "util/version.hpp"

#include <cctype>

namespace hpcbake::util {

namespace {
bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}
bool is_alpha(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0;
}
} // namespace

int compare_versions(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  while (true) {
    while (i < a.size() && !is_digit(a[i]) && !is_alpha(a[i]))
      ++i;
    while (j < b.size() && !is_digit(b[j]) && !is_alpha(b[j]))
      ++j;
    if (i >= a.size() || j >= b.size()) break;
    const bool numeric = is_digit(a[i]);
    if (numeric != is_digit(b[j])) return numeric ? 1 : -1; // a number sorts after letters (rpm rule)
    std::size_t si = i, sj = j;
    if (numeric) {
      while (i < a.size() && is_digit(a[i]))
        ++i;
      while (j < b.size() && is_digit(b[j]))
        ++j;
      auto x = a.substr(si, i - si), y = b.substr(sj, j - sj);
      while (x.size() > 1 && x.front() == '0')
        x.remove_prefix(1);
      while (y.size() > 1 && y.front() == '0')
        y.remove_prefix(1);
      if (x.size() != y.size()) return x.size() < y.size() ? -1 : 1;
      if (int c = x.compare(y); c != 0) return c < 0 ? -1 : 1;
    } else {
      while (i < a.size() && is_alpha(a[i]))
        ++i;
      while (j < b.size() && is_alpha(b[j]))
        ++j;
      if (int c = a.substr(si, i - si).compare(b.substr(sj, j - sj)); c != 0) return c < 0 ? -1 : 1;
    }
  }
  const bool a_left = i < a.size(), b_left = j < b.size();
  if (a_left == b_left) return 0;
  return a_left ? 1 : -1;
}

} // namespace hpcbake::util
