// The pieces of a check that every check file and the reports use: a verdict's name, a check built
// in one expression, thresholds for humans. Apart from verify.cpp so that a parser of checks (the
// dcgm fuzz target, fuzz/fuzz_dcgm.cpp) links without the whole of verify/.
#include "verify/checks.hpp"

#include <fmt/format.h>

#include <cmath>

namespace hpcbake::verify {

const char* to_string(Verdict v) {
  switch (v) {
  case Verdict::pass:
    return "pass";
  case Verdict::fail:
    return "fail";
  case Verdict::skip:
    return "skip";
  case Verdict::deferred:
    return "deferred";
  }
  return "unknown";
}

std::string number(double v) {
  if (std::abs(v - std::round(v)) < 1e-9) return fmt::format("{}", static_cast<long long>(std::llround(v)));
  std::string s = fmt::format("{:.2f}", v);
  while (s.back() == '0')
    s.pop_back();
  return s;
}

Check make_check(std::string id, int level, std::string title, std::string expected, std::string observed,
                 Verdict verdict, std::string hint, std::string source) {
  Check c;
  c.id = std::move(id);
  c.level = level;
  c.title = std::move(title);
  c.expected = std::move(expected);
  c.observed = std::move(observed);
  c.verdict = verdict;
  c.hint = std::move(hint);
  c.source = std::move(source);
  return c;
}

} // namespace hpcbake::verify
