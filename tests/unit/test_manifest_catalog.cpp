// manifest::profile_support: which profiles a size supports, as `hpcbake sizes` shows them.
#include "manifest/catalog.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace hpcbake;
using manifest::AppliesTo;
using manifest::ComponentKind;

namespace {

manifest::ComponentManifest component(const std::string& id, ComponentKind kind, AppliesTo applies,
                                      std::vector<std::string> distros, bool refused = false) {
  manifest::ComponentManifest c;
  c.id = c.component = id;
  c.kind = kind;
  c.applies_to = applies;
  manifest::ComponentVariant v;
  v.distros = std::move(distros);
  v.version = "1";
  if (refused) v.refused = "no published checksum";
  c.variants.push_back(v);
  return c;
}

manifest::Manifests catalog() {
  manifest::Manifests m;
  for (const char* d : {"ubuntu-22.04", "debian-12"}) {
    manifest::DistroManifest dm;
    dm.id = d;
    m.distros.push_back(dm);
  }
  manifest::SizeManifest hb;
  hb.size = "Standard_HB";
  hb.infiniband = manifest::SizeInfiniband{};
  manifest::SizeManifest nd = hb;
  nd.size = "Standard_ND";
  nd.gpu = manifest::SizeGpu{};
  nd.gpu->vendor = "nvidia";
  nd.gpu->model = "H100";
  manifest::SizeManifest nc = nd;
  nc.size = "Standard_NC";
  nc.infiniband.reset();
  m.sizes = {hb, nd, nc};
  m.components.push_back(
      component("mpi", ComponentKind::userspace, AppliesTo::infiniband, {"ubuntu-22.04", "debian-12"}));
  m.components.push_back(component("ucx", ComponentKind::userspace, AppliesTo::infiniband, {"ubuntu-22.04"}));
  m.components.push_back(component("nccl", ComponentKind::userspace, AppliesTo::nvidia_gpu, {"ubuntu-22.04"}));
  m.components.push_back(component("toolkit", ComponentKind::cuda_toolkit, AppliesTo::any, {"ubuntu-22.04"}));
  m.components.push_back(component("broken", ComponentKind::userspace, AppliesTo::any, {"ubuntu-22.04"}, true));
  auto profile = [&](const std::string& id, std::vector<std::string> req, std::vector<std::string> best) {
    manifest::ProfileManifest p;
    p.id = id;
    p.components = std::move(req);
    p.best_effort = std::move(best);
    m.profiles.push_back(p);
  };
  profile("hpc", {"mpi"}, {"ucx"});
  profile("ai", {"toolkit", "nccl", "ucx"}, {});
  profile("minimal", {}, {});
  profile("bad", {"mpi", "broken"}, {});
  return m;
}

const manifest::ProfileSupport& of(const std::vector<manifest::ProfileSupport>& all, const std::string& id) {
  auto it = std::find_if(all.begin(), all.end(), [&](const auto& p) { return p.profile == id; });
  REQUIRE(it != all.end());
  return *it;
}

} // namespace

TEST_CASE("profile support: applies_to, pins per distro, best effort ignored") {
  const auto m = catalog();
  const auto hb = manifest::profile_support(m, m.sizes[0]);
  const auto nd = manifest::profile_support(m, m.sizes[1]);
  const auto nc = manifest::profile_support(m, m.sizes[2]);
  // sorted by profile id
  CHECK(hb.front().profile == "ai");
  // hpc: mpi is pinned on both distros; ucx (best effort, ubuntu only) does not narrow them.
  CHECK(of(hb, "hpc").supported);
  CHECK(of(hb, "hpc").distros == std::vector<std::string>{"ubuntu-22.04", "debian-12"});
  // ai on a CPU size: the toolkit needs an NVIDIA GPU.
  CHECK_FALSE(of(hb, "ai").supported);
  CHECK(of(hb, "ai").reason == "toolkit needs an NVIDIA GPU");
  // ai on an InfiniBand GPU size: toolkit, nccl and ucx all pinned on ubuntu only.
  CHECK(of(nd, "ai").supported);
  CHECK(of(nd, "ai").distros == std::vector<std::string>{"ubuntu-22.04"});
  // Without InfiniBand: ucx is skipped as the plan skips it; hpc has nothing for the size.
  CHECK(of(nc, "ai").supported);
  CHECK_FALSE(of(nc, "hpc").supported);
  CHECK(of(nc, "hpc").reason == "mpi is not for this size");
  // A required component refused everywhere takes the profile away, naming it.
  CHECK_FALSE(of(hb, "bad").supported);
  CHECK(of(hb, "bad").reason == "on no distro: broken is refused for ubuntu-22.04: no published checksum");
  CHECK(of(nc, "minimal").supported);
  CHECK(of(nc, "minimal").distros.size() == 2);
}
