#include "cli/entry.hpp"

#include "cli/app.hpp"
#include "cli/signals.hpp"

#include <sys/stat.h>

#include <iostream>
#include <string>
#include <vector>

namespace hpcbake::cli {

int entry(int argc, char** argv) {
  exit_on_stop_signals(); // main.cpp's .preinit_array did it already; a main without one gets it here
  // Nothing hpcbake creates, nor anything the programs it runs create, is writable by group or
  // others, whatever umask it was started with: its own trust checks would refuse such paths on
  // the next run (docs/security.md).
  ::umask(::umask(0) | 022);
  std::vector<std::string> args(argv, argv + argc);
  return run(args, std::cout, std::cerr);
}

} // namespace hpcbake::cli
