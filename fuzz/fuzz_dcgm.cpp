// DCGM's diagnostic document (verify::dcgm_diag_checks), read as `dcgm_checks` reads dcgmi's
// output: from the first '{', parsed by nlohmann-json (a parse error is the caller's failed check),
// then the document turned into checks. dcgmi's JSON used to be read with throwing accessors, so a
// member of the wrong type ended verify with "internal error". Properties: no exception escapes
// the reader for any document; a success has at least one check, each a "dcgm." id at level 3 with
// an observed value, and a failing one says what to do; a refusal has a message and a hint; the
// same document reads the same twice.
#include "fuzz_util.hpp"
#include "verify/checks.hpp"

#include <nlohmann/json.hpp>

using namespace hpcbake_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = as_text(data, size);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.substr(std::min(text.find('{'), text.size())));
  } catch (const nlohmann::json::exception&) {
    return 0; // not JSON: dcgm_checks reports that itself, before this reader
  }
  auto checks = hpcbake::verify::dcgm_diag_checks(doc);
  auto again = hpcbake::verify::dcgm_diag_checks(doc);
  check(checks.has_value() == again.has_value(), "the same document read two ways");
  if (!checks) {
    check(!checks.error().message.empty() && !checks.error().hint.empty(), "a refusal without a message or hint");
    check(checks.error().message == again.error().message, "the same document refused two ways");
    return 0;
  }
  check(!checks->empty(), "a document read as no checks at all");
  check(checks->size() == again->size(), "the same document read as different checks");
  for (const auto& c : *checks) {
    check(c.id.starts_with("dcgm.") && c.level == 3, "a check that is not a DCGM level-3 check: " + c.id);
    check(!c.observed.empty(), "a check without an observed value: " + c.id);
    if (c.verdict == hpcbake::verify::Verdict::fail) check(!c.hint.empty(), "a failure without a hint: " + c.id);
  }
  return 0;
}
