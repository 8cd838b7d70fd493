#include "cli/entry.hpp"

#include "cli/app.hpp"

#include <sys/stat.h>

#include <iostream>
#include <string>
#include <vector>

namespace hpcbake::cli {

int entry(int argc, char** argv) {
  // Nothing hpcbake creates, nor anything the programs it runs create, is writable by group or
  // others, whatever umask it was started with: its own trust checks would refuse such paths on
  // the next run (docs/security.md).
  ::umask(::umask(0) | 022);
  std::vector<std::string> args(argv, argv + argc);
  return run(args, std::cout, std::cerr);
}

} // namespace hpcbake::cli
