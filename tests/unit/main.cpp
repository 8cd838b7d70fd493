#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>

// Each run gets its own scratch directory (HPCBAKE_TEST_TMP), removed on success
// and kept on failure so the files a failing test wrote can be inspected.
int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("hpcbake-unit-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  ::setenv("HPCBAKE_TEST_TMP", tmp.c_str(), 1);
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (rc == 0) fs::remove_all(tmp);
  else if (!context.shouldExit()) std::fprintf(stderr, "test files kept in %s\n", tmp.c_str());
  return rc;
}
