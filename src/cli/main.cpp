#include "cli/app.hpp"

#include <sys/stat.h>

#include <iostream>

int main(int argc, char** argv) {
  // Nothing hpcbake creates, nor anything the programs it runs create, is writable by group or
  // others, whatever umask it was started with: its own trust checks would refuse such paths on
  // the next run (docs/security.md).
  ::umask(::umask(0) | 022);
  std::vector<std::string> args(argv, argv + argc);
  return hpcbake::cli::run(args, std::cout, std::cerr);
}
