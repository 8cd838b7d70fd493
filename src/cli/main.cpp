#include "cli/entry.hpp"

// The shipped binary: no test hook is installed (util/test_hooks.hpp, cli/test_runner.hpp).
int main(int argc, char** argv) {
  return hpcbake::cli::entry(argc, argv);
}
