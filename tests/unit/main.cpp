#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#ifndef HPCBAKE_UNIT_NO_SEAMS
#include "seams.hpp"
#endif

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

namespace {

// Counts the test cases that ran: a filter that matches none (ctest splits a discovered name
// at ';', so a test named with one never runs) fails instead of passing with nothing tested.
std::atomic<int> g_cases{0};

struct CountingListener : doctest::IReporter {
  explicit CountingListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++g_cases; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

} // namespace

REGISTER_LISTENER("hpcbake-count", 1, CountingListener);

// Each run gets its own scratch directory (HPCBAKE_TEST_TMP), removed on success
// and kept on failure so the files a failing test wrote can be inspected. The test hooks are
// installed as in hpcbake-test (tests/seams/seams.hpp): the crash tests set
// HPCBAKE_TEST_CRASH_POINT in-process. hpcbake_unit_threads (the ThreadSanitizer build) links
// neither the seams nor the CLI they reach (HPCBAKE_UNIT_NO_SEAMS): none of its tests sets a hook.
int main(int argc, char** argv) {
  namespace fs = std::filesystem;
#ifndef HPCBAKE_UNIT_NO_SEAMS
  hpcbake::test::install_test_seams();
#endif
  const fs::path tmp = fs::temp_directory_path() / ("hpcbake-unit-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  ::setenv("HPCBAKE_TEST_TMP", tmp.c_str(), 1);
  doctest::Context context(argc, argv);
  int rc = context.run();
  bool filtered = false;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--test-case=", 12) == 0 || std::strncmp(argv[i], "-tc=", 4) == 0) filtered = true;
  if (rc == 0 && filtered && g_cases == 0 && !context.shouldExit()) {
    std::fprintf(stderr, "hpcbake_unit: no test case matched the filter: nothing was tested (a ';' in a test "
                         "name splits it under ctest; name tests without one)\n");
    rc = 1;
  }
  if (rc == 0)
    fs::remove_all(tmp);
  else if (!context.shouldExit())
    std::fprintf(stderr, "test files kept in %s\n", tmp.c_str());
  return rc;
}
