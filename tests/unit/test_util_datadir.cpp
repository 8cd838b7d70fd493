// util::self_exe and util::data_dir: the executable finds its data beside itself (../share/hpcbake),
// whatever prefix it was built for (the release tarball unpacks anywhere).
#include "util/datadir.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using hpcbake::util::data_dir;
using hpcbake::util::self_exe;

TEST_CASE("util::self_exe names this test executable") {
  const auto exe = self_exe();
  REQUIRE(exe.has_value());
  CHECK(exe->is_absolute());
  CHECK(exe->filename() == "hpcbake_unit");
  CHECK(fs::equivalent(*exe, fs::canonical("/proc/self/exe")));
}

TEST_CASE("util::data_dir: the variable wins, then ../share/hpcbake beside the executable") {
  const auto exe = self_exe();
  REQUIRE(exe.has_value());
  ::setenv("HPCBAKE_TEST_DATADIR", "/nowhere/at/all", 1);
  CHECK(data_dir("HPCBAKE_TEST_DATADIR", "manifests", "sizes") == fs::path("/nowhere/at/all"));
  ::unsetenv("HPCBAKE_TEST_DATADIR");
  // A probe only the relocated copy has: beside the executable, under a name nothing else uses.
  const fs::path beside = exe->parent_path().parent_path() / "share" / "hpcbake" / "datadir-test";
  fs::create_directories(beside / "probe-dir");
  CHECK(data_dir("HPCBAKE_TEST_DATADIR", "datadir-test", "probe-dir") == beside);
  fs::remove_all(beside);
  CHECK(data_dir("HPCBAKE_TEST_DATADIR", "datadir-test", "probe-dir") != beside);
}
