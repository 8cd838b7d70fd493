#pragma once
// What main does, for the two binaries that share it: the shipped hpcbake (cli/main.cpp) and
// the test suite's hpcbake-test (tests/seams/main.cpp), which installs its test hooks first.
namespace hpcbake::cli {

int entry(int argc, char** argv);

} // namespace hpcbake::cli
