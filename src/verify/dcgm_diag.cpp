// DCGM's diagnostic document (`dcgmi diag -r 1 -j`) read as checks, one per test. Apart from
// checks_dcgm.cpp, which runs dcgmi, so that the fuzz target (fuzz/fuzz_dcgm.cpp) reaches this
// parser of a program's output without linking the command runner.
#include "verify/checks.hpp"

#include <fmt/format.h>

namespace hpcbake::verify {

namespace {
using json = nlohmann::json;
using util::to_lower;

// dcgmi's JSON is read without a throwing accessor: every member's type is checked, and a wrong
// one is an error naming its place in the document ("DCGM Diagnostic".test_categories[0].name),
// which verify reports as the failed dcgm.diag check.
const char* kDiagHint = "run `dcgmi diag -r 1 -j` by hand; is its DCGM version one hpcbake reads (3 or 4)?";

std::string a_type(const json& j) {
  const std::string t = j.type_name();
  if (j.is_null()) return t;
  return (t == "array" || t == "object" ? "an " : "a ") + t;
}

Error malformed(const std::string& where, const json& j, const char* expected) {
  return {ErrorKind::smoke_test,
          fmt::format("dcgmi diag printed unexpected JSON: {} is {}, not {}", where, a_type(j), expected), kDiagHint};
}

Result<const json*> object_at(const json& j, const std::string& where) {
  if (!j.is_object()) return std::unexpected(malformed(where, j, "an object"));
  return &j;
}

// A string member, `fallback` when absent.
Result<std::string> string_member(const json& obj, const std::string& where, const char* key, std::string fallback) {
  const auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  if (!it->is_string()) return std::unexpected(malformed(fmt::format("{}.{}", where, key), *it, "a string"));
  return it->get<std::string>();
}

// An array member, empty when absent.
Result<const json*> array_member(const json& obj, const std::string& where, const char* key) {
  static const json empty = json::array();
  const auto it = obj.find(key);
  if (it == obj.end()) return &empty;
  if (!it->is_array()) return std::unexpected(malformed(fmt::format("{}.{}", where, key), *it, "an array"));
  return &*it;
}

struct TestOutcome {
  std::string status; // test_summary.status, else the first result's
  std::vector<std::string> warnings;
};

Result<TestOutcome> test_outcome(const json& t, const std::string& where) {
  TestOutcome out;
  if (const auto it = t.find("test_summary"); it != t.end()) {
    HPCBAKE_TRY_ASSIGN(const json* summary, object_at(*it, where + ".test_summary"));
    HPCBAKE_TRY_ASSIGN(out.status, string_member(*summary, where + ".test_summary", "status", ""));
  }
  HPCBAKE_TRY_ASSIGN(const json* results, array_member(t, where, "results"));
  for (std::size_t i = 0; i < results->size(); ++i) {
    const std::string at = fmt::format("{}.results[{}]", where, i);
    HPCBAKE_TRY_ASSIGN(const json* r, object_at((*results)[i], at));
    if (out.status.empty()) {
      HPCBAKE_TRY_ASSIGN(out.status, string_member(*r, at, "status", ""));
    }
    HPCBAKE_TRY_ASSIGN(const json* warnings, array_member(*r, at, "warnings"));
    for (std::size_t k = 0; k < warnings->size(); ++k) {
      const std::string wat = fmt::format("{}.warnings[{}]", at, k);
      HPCBAKE_TRY_ASSIGN(const json* w, object_at((*warnings)[k], wat));
      HPCBAKE_TRY_ASSIGN(std::string text, string_member(*w, wat, "warning", ""));
      if (!text.empty()) out.warnings.push_back(std::move(text));
    }
  }
  return out;
}

Check test_check(const std::string& category, const std::string& name, const TestOutcome& t) {
  const std::string st = to_lower(t.status);
  const Verdict v = st == "pass" ? Verdict::pass : st == "skip" ? Verdict::skip : Verdict::fail;
  std::string observed = t.status.empty() ? "no status" : t.status;
  if (!t.warnings.empty()) observed += ": " + t.warnings.front();
  return make_check(fmt::format("dcgm.{}.{}", to_lower(category), to_lower(name)), 3,
                    fmt::format("DCGM {} / {}", category, name), "Pass", observed, v,
                    v == Verdict::fail ? "read `dcgmi diag -r 1` and NVIDIA's DCGM diagnostics guide for this "
                                         "test; a GPU that fails it needs a support case"
                                       : "",
                    "NVIDIA DCGM, dcgmi diag -r 1 (short)");
}

Status category_checks(const json& category_json, const std::string& where, std::vector<Check>& out) {
  HPCBAKE_TRY_ASSIGN(const json* cat, object_at(category_json, where));
  HPCBAKE_TRY_ASSIGN(const std::string category, string_member(*cat, where, "category", "?"));
  HPCBAKE_TRY_ASSIGN(const json* tests, array_member(*cat, where, "tests"));
  for (std::size_t i = 0; i < tests->size(); ++i) {
    const std::string at = fmt::format("{}.tests[{}]", where, i);
    HPCBAKE_TRY_ASSIGN(const json* t, object_at((*tests)[i], at));
    HPCBAKE_TRY_ASSIGN(const std::string name, string_member(*t, at, "name", "?"));
    HPCBAKE_TRY_ASSIGN(const TestOutcome outcome, test_outcome(*t, at));
    out.push_back(test_check(category, name, outcome));
  }
  return {};
}

} // namespace

// DCGM 4 names the root "DCGM Diagnostic", DCGM 3 "DCGM GPU Diagnostic" (NVIDIA/DCGM
// testing/python3/dcgm_diag_schema.json); under it test_categories[].tests[] with a name,
// results[] (status, warnings[].warning) and test_summary.status: "Pass", "Skip" or "Fail".
Result<std::vector<Check>> dcgm_diag_checks(const json& doc) {
  const json* root = nullptr;
  std::string where;
  for (const char* key : {"DCGM Diagnostic", "DCGM GPU Diagnostic"})
    if (const auto it = doc.find(key); it != doc.end()) { // find: end() on a non-object too
      root = &*it;
      where = fmt::format("\"{}\"", key);
    }
  const auto none = [] {
    return fail(ErrorKind::smoke_test, "dcgmi diag printed no \"DCGM Diagnostic\".test_categories",
                "run `dcgmi diag -r 1 -j` by hand; is nv-hostengine (nvidia-dcgm.service) running?");
  };
  if (!root) return none();
  HPCBAKE_TRY(object_at(*root, where));
  if (!root->contains("test_categories")) return none();
  HPCBAKE_TRY_ASSIGN(const json* categories, array_member(*root, where, "test_categories"));
  std::vector<Check> out;
  for (std::size_t i = 0; i < categories->size(); ++i)
    HPCBAKE_TRY(category_checks((*categories)[i], fmt::format("{}.test_categories[{}]", where, i), out));
  if (out.empty())
    return fail(ErrorKind::smoke_test, "dcgmi diag reported no tests", "run `dcgmi diag -r 1` by hand to see why");
  return out;
}

} // namespace hpcbake::verify
