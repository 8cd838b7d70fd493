// The PTX kernels verify embeds (src/verify/kernels.cpp): what the driver's JIT and the M60 need of
// them, checked without a toolkit (cuda/kernels assembles them with NVIDIA's ptxas where it is).
#include "verify/kernels.hpp"

#include <doctest/doctest.h>

#include <regex>
#include <set>
#include <string>

using hpcbake::verify::cuda::kernels;

namespace {

// The number of .param entries of `.entry name(...)`, or -1 when the PTX has no such entry.
int param_count(const std::string& ptx, const std::string& entry) {
  std::smatch m;
  if (!std::regex_search(ptx, m, std::regex("\\.visible \\.entry " + entry + "\\(([^)]*)\\)"))) return -1;
  const std::string params = m[1].str();
  int n = 0;
  for (auto pos = params.find(".param"); pos != std::string::npos; pos = params.find(".param", pos + 1))
    ++n;
  return n;
}

} // namespace

TEST_CASE("every embedded kernel is PTX ISA 4.0 for sm_50 and declares its entry") {
  const auto all = kernels();
  REQUIRE(all.size() == 2);
  std::set<std::string> names, entries;
  for (const auto& k : all) {
    CAPTURE(k.name);
    const std::string ptx = k.ptx;
    CHECK(ptx.find("\n.version 4.0\n") != std::string::npos);
    CHECK(ptx.find("\n.target sm_50\n") != std::string::npos);
    CHECK(ptx.find("\n.address_size 64\n") != std::string::npos);
    CHECK(param_count(ptx, k.entry) > 0);
    names.insert(k.name);
    entries.insert(k.entry);
  }
  CHECK(names == std::set<std::string>{"vadd", "spin"});
  CHECK(entries.size() == all.size());
}

TEST_CASE("the kernels take the parameters the launches pass") {
  // cuda.cpp: vector_add passes {a, b, c, n}; launch_spin passes {ns, out}.
  CHECK(param_count(hpcbake::verify::cuda::vadd_ptx, hpcbake::verify::cuda::vadd_entry) == 4);
  CHECK(param_count(hpcbake::verify::cuda::spin_ptx, hpcbake::verify::cuda::spin_entry) == 2);
  // The spin kernel times itself by the GPU's nanosecond timer, not a clock that scales with
  // the (possibly throttled) SM clock it is there to observe.
  CHECK(std::string(hpcbake::verify::cuda::spin_ptx).find("%globaltimer") != std::string::npos);
  CHECK(std::string(hpcbake::verify::cuda::spin_ptx).find("fma.rn.f32") != std::string::npos);
}
