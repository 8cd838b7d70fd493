#pragma once
// Test helpers: fixture paths and scratch trees.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

namespace test {

// The source tree, compiled into tests/unit/source_dir.cpp alone (a path in every test file would
// make each clone's compile a cache miss).
std::filesystem::path source_dir();
inline std::filesystem::path fixtures() {
  return source_dir() / "tests" / "fixtures";
}
inline std::filesystem::path host_fixture(const std::string& name) {
  return fixtures() / "hosts" / name;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh directory under the run's scratch dir.
inline std::filesystem::path scratch(const std::string& name) {
  const char* base = std::getenv("HPCBAKE_TEST_TMP");
  auto dir = std::filesystem::path(base ? base : "/tmp") / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write(const std::filesystem::path& p, const std::string& content) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << content;
}

inline std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A sparse file of `size` bytes made at run time (ftruncate: no disk used): a host file far
// larger than any real one, to prove a reader refuses it instead of reading it whole.
inline void sparse(const std::filesystem::path& p, std::uintmax_t size) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).flush();
  std::filesystem::resize_file(p, size);
}
inline constexpr std::uintmax_t three_gib = std::uintmax_t{3} << 30;

// The pid of a process that has exited and been reaped (-1 if fork failed): what a writer
// killed mid-way leaves in the names of its temp files.
inline pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  if (child < 0) return -1;
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

} // namespace test
