// InfiniBand port attributes as sysfs shows them (detect::parse_coded_value for `state` and
// `phys_state`, detect::parse_rate_gbps for `rate`).
#include "detect/infiniband.hpp"
#include "fuzz_util.hpp"

using namespace hpcbake_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = as_text(data, size);
  int code = 0;
  std::string name;
  if (hpcbake::detect::parse_coded_value(text, code, name)) check(name.size() <= text.size(), "name longer than input");
  (void)hpcbake::detect::parse_rate_gbps(text);
  return 0;
}
