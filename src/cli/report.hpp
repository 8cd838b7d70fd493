#pragma once
// How every verb reports an Error: the message, the hint, and the documented exit code.
#include "util/error.hpp"

#include <ostream>

namespace hpcbake::cli {

inline int report(const Error& e, std::ostream& err) {
  err << "hpcbake: error: " << e.message << "\n";
  if (!e.hint.empty()) err << "  hint: " << e.hint << "\n";
  return static_cast<int>(exit_code_for(e.kind));
}

} // namespace hpcbake::cli
