#include "plan/resolve.hpp"

#include "util/sha256.hpp"
#include "util/utf8.hpp"

#include <fmt/format.h>

namespace hpcbake::plan {

detect::ImdsOptions imds_options(const ResolveRequest& rq) {
  detect::ImdsOptions imds = rq.imds;
  if (!rq.size.empty()) imds.enabled = false; // the size is given: no need to ask the network
  return imds;
}

Result<Resolved> resolve(const manifest::Manifests& manifests, const ResolveRequest& rq, util::HttpClient& http) {
  Resolved out;
  out.facts = detect::detect_host(rq.host, http, imds_options(rq), &manifests);
  HPCBAKE_TRY_ASSIGN(out.plan, plan_for(manifests, rq, out.facts));
  return out;
}

Result<Plan> plan_for(const manifest::Manifests& manifests, const ResolveRequest& rq, const detect::HostFacts& facts) {
  PlanRequest req;
  req.size = rq.size;
  if (req.size.empty()) {
    if (!facts.imds.on_azure)
      return fail(ErrorKind::usage, fmt::format("no --size given, and the VM size is unknown: {}", facts.imds.status),
                  "pass --size VM_SIZE, e.g. --size Standard_ND96isr_H100_v5");
    req.size = facts.imds.vm_size;
  }
  req.distro = rq.distro;
  if (req.distro.empty()) {
    if (facts.distro_id.empty())
      return fail(ErrorKind::unsupported,
                  facts.os ? fmt::format("this host's distro (ID={} VERSION_ID={}, {}) has no manifest",
                                         util::excerpt(facts.os->id()), util::excerpt(facts.os->version_id()),
                                         facts.os->source)
                           : facts.os_error,
                  "pass --distro ID-VERSION to plan for another distro; run 'hpcbake manifest lint' to list them");
    req.distro = facts.distro_id;
  }
  req.profile = rq.profile;
  req.driver_kind = rq.driver;
  req.signing = rq.signing;
  req.hold_kernel = rq.hold_kernel;
  req.driver_source = rq.driver_source;
  req.driver_version = rq.driver_version;
  req.defer_hardware = rq.defer_hardware;
  req.kernels = rq.kernels;
  req.mirrors = rq.mirrors;
  req.git_bundles = rq.git_bundles;
  req.host = &facts;
  PrebuiltInput prebuilt;
  if (!rq.prebuilt.empty()) {
    HPCBAKE_TRY_ASSIGN(prebuilt.manifest, driver::read_prebuilt_manifest(rq.prebuilt));
    HPCBAKE_TRY_ASSIGN(prebuilt.sha256, util::sha256_file(rq.prebuilt));
    prebuilt.file = rq.prebuilt.string();
    req.prebuilt = &prebuilt;
  }
  return make_plan(manifests, req);
}

} // namespace hpcbake::plan
