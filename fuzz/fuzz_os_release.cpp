// os-release(5) text (detect::parse_os_release).
#include "detect/os_release.hpp"
#include "fuzz_util.hpp"

using namespace hpcbake_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = as_text(data, size);
  auto os = hpcbake::detect::parse_os_release(text, "/etc/os-release");
  if (!os) return 0;
  check(!os->id().empty(), "parsed without an ID");
  for (const auto& [key, value] : os->fields) {
    check(!key.empty(), "an empty key");
    // A value never holds more bytes than the text it came from.
    check(value.size() <= text.size(), "a value longer than the file");
  }
  return 0;
}
