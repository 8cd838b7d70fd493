// write_file_atomic and the cleanup of what killed writers left behind (found by bench/chaos:
// a SIGKILL between creating `path.tmp.<pid>` and the rename left that file for good).
#include "helpers.hpp"
#include "util/atomic_file.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;
namespace fs = std::filesystem;

TEST_CASE("atomic write: replaces the file and removes temp files of dead writers, not of live ones") {
  const auto dir = test::scratch("atomic-stale");
  const std::string dead = std::to_string(test::dead_pid());
  const std::string live = std::to_string(::getppid()); // our parent outlives this test
  test::write(dir / ("state.json.tmp." + dead), "{\"torn");
  test::write(dir / ("state.json.tmp." + live), "a live writer's");
  test::write(dir / "state.json.tmp.notapid", "x");
  test::write(dir / ("other.json.tmp." + dead), "another file's");
  REQUIRE(util::write_file_atomic(dir / "state.json", "{}\n").has_value());
  CHECK(test::slurp(dir / "state.json") == "{}\n");
  CHECK_FALSE(fs::exists(dir / ("state.json.tmp." + dead)));
  CHECK(fs::exists(dir / ("state.json.tmp." + live)));
  CHECK(fs::exists(dir / "state.json.tmp.notapid"));
  CHECK(fs::exists(dir / ("other.json.tmp." + dead)));
  CHECK_FALSE(fs::exists(dir / ("state.json.tmp." + std::to_string(::getpid()))));
}

TEST_CASE("remove_stale_pid_entries: PREFIX<pid> and PREFIX<pid>.suffix trees of dead processes only") {
  const auto dir = test::scratch("atomic-stale-trees");
  const std::string dead = std::to_string(test::dead_pid());
  test::write(dir / ("extract-peer-" + dead) / "Kbuild", "obj-m := a.o\n");
  test::write(dir / ("extract-peer-" + dead + ".partial-Ab12Cd") / "Kbuild", "obj-m := a.o\n");
  test::write(dir / ("extract-peer-" + std::to_string(::getpid())) / "Kbuild", "mine\n");
  test::write(dir / ("extract-peer-2-" + dead) / "Kbuild", "module peer-2, not peer\n");
  test::write(dir / ("extract-peer-" + dead + "x"), "not a pid\n");
  CHECK(util::remove_stale_pid_entries(dir, "extract-peer-") == 2);
  CHECK_FALSE(fs::exists(dir / ("extract-peer-" + dead)));
  CHECK_FALSE(fs::exists(dir / ("extract-peer-" + dead + ".partial-Ab12Cd")));
  CHECK(fs::exists(dir / ("extract-peer-" + std::to_string(::getpid()))));
  CHECK(fs::exists(dir / ("extract-peer-2-" + dead)));
  CHECK(fs::exists(dir / ("extract-peer-" + dead + "x")));
  CHECK(util::remove_stale_pid_entries(dir / "absent", "x") == 0);
}
