// hpcbake-test: the hpcbake CLI with the test hooks installed (seams.hpp). The CLI, chaos and
// Packer tests run it when they set a hook; never installed or shipped.
#include "cli/entry.hpp"
#include "cli/signals.hpp"
#include "seams.hpp"

// As the shipped binary (src/cli/main.cpp): SIGINT, SIGTERM and SIGHUP exit 130 from the start.
[[gnu::section(".preinit_array"),
  gnu::used]] static void (*const early_signals)(int, char**, char**) = hpcbake::cli::exit_on_stop_signals;

int main(int argc, char** argv) {
  hpcbake::test::install_test_seams();
  return hpcbake::cli::entry(argc, argv);
}
