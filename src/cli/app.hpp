#pragma once
// The hpcbake command line: parses argv, calls one library function per verb,
// renders the result, and maps errors to the documented exit codes.
#include <ostream>
#include <string>
#include <vector>

namespace hpcbake::cli {

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

} // namespace hpcbake::cli
