#include "shipped.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

namespace test {

const hpcbake::manifest::Manifests& shipped_manifests() {
  static const auto m = hpcbake::manifest::load_manifests(source_dir() / "manifests");
  REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  return *m;
}

} // namespace test
