#include "cli/entry.hpp"
#include "cli/signals.hpp"

// SIGINT, SIGTERM and SIGHUP exit 130 from before the first constructor on (cli/signals.hpp): the
// dynamic loader runs the executable's .preinit_array before any initializer of its own or of a
// library it links.
[[gnu::section(".preinit_array"),
  gnu::used]] static void (*const early_signals)(int, char**, char**) = hpcbake::cli::exit_on_stop_signals;

// The shipped binary: no test hook is installed (util/test_hooks.hpp, cli/test_runner.hpp).
int main(int argc, char** argv) {
  return hpcbake::cli::entry(argc, argv);
}
