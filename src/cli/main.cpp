#include "cli/app.hpp"

#include <iostream>

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return hpcbake::cli::run(args, std::cout, std::cerr);
}
