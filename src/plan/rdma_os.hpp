#pragma once
// What RDMA needs from the OS, planned from data (manifests/settings/*.yaml, manifest/settings.hpp)
// when the plan's profile says `rdma_os: true`: every settings manifest with applies_to
// infiniband on a size with InfiniBand (limits for logins and services, sysctl, the mlx5_ib*
// device names), then the size's own (os_settings: its NCCL topology file and /etc/nccl.conf).
// Each file is a config step, each command a command step, each service a service step
// (enabled and started), so `plan --json` shows every file and its content.
#include "plan/plan.hpp"

#include <string>

namespace hpcbake::plan {

// Appends the steps to plan.steps, the first after the step `after` (empty: none; the InfiniBand stack, whose tools the
// naming service runs), and each settings manifest's notes to plan.notes. Nothing when the profile
// is absent or does not ask for them. Errors: the size names settings the manifests lack.
Status rdma_os_steps(const manifest::Manifests& m, const manifest::SizeManifest& size,
                     const manifest::ProfileManifest* profile, Plan& plan, const std::string& after);

} // namespace hpcbake::plan
