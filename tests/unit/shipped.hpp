#pragma once
// The manifests this checkout ships (manifests/), loaded once per test run.
#include "manifest/manifests.hpp"

namespace test {
const hpcbake::manifest::Manifests& shipped_manifests();
} // namespace test
