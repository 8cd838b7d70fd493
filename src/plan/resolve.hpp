#pragma once
// The one plan-request resolver: --size/--distro/--driver/--sign, or what this host says
// (Azure metadata for the size, os-release for the distro), into a plan. Used by plan, fetch,
// install and bundle alike, so the plan shown is the plan installed.
#include "detect/host.hpp"
#include "driver/signing.hpp"
#include "manifest/manifests.hpp"
#include "plan/plan.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"
#include "util/http.hpp"

#include <filesystem>
#include <optional>
#include <string>

namespace hpcbake::plan {

struct ResolveRequest {
  util::HostFs host{"/"};
  detect::ImdsOptions imds;                   // asked only when no size is given
  std::string size;                           // empty: the host's (Azure metadata)
  std::string distro;                         // empty: the host's (os-release via the distro manifests)
  std::string profile = "default";            // PlanRequest::profile
  std::optional<manifest::DriverKind> driver; // --driver
  driver::SigningRequest signing;
  bool hold_kernel = false;                               // PlanRequest::hold_kernel
  std::map<std::string, std::vector<MirrorFile>> mirrors; // PlanRequest::mirrors
  std::map<std::string, MirrorFile> git_bundles;          // PlanRequest::git_bundles
  std::filesystem::path prebuilt;                         // --prebuilt FILE (read and hashed here), or empty
  DriverSource driver_source = DriverSource::automatic;   // --driver-source
  std::string driver_version;                             // --driver-version
  bool defer_hardware = false;                            // PlanRequest::defer_hardware
  std::vector<std::string> kernels;                       // PlanRequest::kernels (--kernel)
};

struct Resolved {
  Plan plan;
  detect::HostFacts facts;
};

// Errors: usage (no size given and none known; a --prebuilt file that cannot be read or is not
// one), unsupported (the host's distro has no manifest), and whatever make_plan refuses.
Result<Resolved> resolve(const manifest::Manifests& manifests, const ResolveRequest& request, util::HttpClient& http);

// The same on facts already detected (detect_host with these manifests): the plan only.
Result<Plan> plan_for(const manifest::Manifests& manifests, const ResolveRequest& request,
                      const detect::HostFacts& facts);

// The metadata service options resolve uses: not asked when the size is given.
detect::ImdsOptions imds_options(const ResolveRequest& request);

} // namespace hpcbake::plan
