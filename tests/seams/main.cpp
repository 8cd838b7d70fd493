// hpcbake-test: the hpcbake CLI with the test hooks installed (seams.hpp). The CLI, chaos and
// Packer tests run it when they set a hook; never installed or shipped.
#include "cli/entry.hpp"
#include "seams.hpp"

int main(int argc, char** argv) {
  hpcbake::test::install_test_seams();
  return hpcbake::cli::entry(argc, argv);
}
