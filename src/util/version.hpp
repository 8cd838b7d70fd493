#pragma once
// Version ordering for kernel releases and driver versions, in the spirit of
// rpmvercmp / `sort -V`: runs of digits compare numerically, runs of letters
// lexically, separators only split. "6.8.0-1015-azure" > "6.5.0-1025-azure",
// "4.18.0-553.16.1.el8_10" > "4.18.0-553.el8_10".
#include <string_view>

namespace hpcbake::util {

int compare_versions(std::string_view a, std::string_view b);

} // namespace hpcbake::util
