// The metadata service's JSON (detect::parse_imds), then what `hpcbake detect --json` does
// with the facts (detect/render.cpp): the security profile is copied into the document,
// which is dumped.
#include "detect/imds.hpp"
#include "fuzz_util.hpp"

using namespace hpcbake_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto parsed = hpcbake::detect::parse_imds(as_text(data, size), "http://169.254.169.254/metadata/instance");
  if (!parsed) {
    check(!parsed.error().message.empty(), "an error without a message");
    return 0;
  }
  check(parsed->on_azure && !parsed->vm_size.empty(), "parsed without a vmSize");
  const nlohmann::json doc = {
      {"vm_size", parsed->vm_size},
      {"location", parsed->location},
      {"vm_id", parsed->vm_id},
      {"zone", parsed->zone},
      {"security_profile", parsed->security_profile ? *parsed->security_profile : nlohmann::json(nullptr)}};
  check(!doc.dump(2).empty(), "empty rendering");
  return 0;
}
