// The one translation unit of the unit tests that names the source tree (tests/CMakeLists.txt).
#include "helpers.hpp"

namespace test {

std::filesystem::path source_dir() {
  return HPCBAKE_SOURCE_DIR;
}

} // namespace test
