// Writes every PTX kernel hpcbake verify embeds (src/verify/kernels.cpp) to DIR/<name>.ptx and
// prints "<name> <entry>" per kernel, for cuda/kernels (tests/cuda/kernels.py) to assemble with
// NVIDIA's ptxas.
#include "verify/kernels.hpp"

#include <cstdio>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  for (const auto& k : hpcbake::verify::cuda::kernels()) {
    const std::string path = std::string(argv[1]) + "/" + k.name + ".ptx";
    std::ofstream out(path, std::ios::binary);
    out << k.ptx;
    if (!out.flush()) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
    std::printf("%s %s\n", k.name, k.entry);
  }
  return 0;
}
