#pragma once
// The manifests as a user looks things up in them: a VM size in every spelling Azure and its
// tools use, "did you mean" for a name that is not there, and the selection behind `hpcbake
// sizes`.
#include "manifest/manifests.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::manifest {

// One key for every spelling of a size: "Standard_ND96isr_H100_v5" (the API's and IMDS's
// vmSize), "ND96isr_H100_v5" (the portal's), "nd96isr_h100_v5" (the manifest's file name), in
// any case, all give "nd96isr_h100_v5".
std::string size_key(std::string_view name);

// The names among `names` closest to `wanted` (edit distance, case-insensitive; for sizes on
// size_key), closest first, at most `max`; only those a typo away: within a third of the
// longer name's length, at least 2 edits (a swapped pair) and never more than 5.
std::vector<std::string> closest(std::string_view wanted, const std::vector<std::string>& names, bool sizes,
                                 std::size_t max = 3);

// " (did you mean A, B?)" for closest(...) with `joiner` between names, or "" when none is close.
std::string did_you_mean(std::string_view wanted, const std::vector<std::string>& names, bool sizes,
                         std::size_t max = 3, std::string_view joiner = ", ");

struct SizeFilter {
  std::string text;        // substring of the size (any spelling) or its family, case-insensitive
  std::string gpu;         // GPU model, case-insensitive ("H100", "a10"); "none" for CPU-only sizes
  bool infiniband = false; // only sizes with InfiniBand
};

// The sizes that match, in the manifests' order by size name.
std::vector<const SizeManifest*> select_sizes(const Manifests& m, const SizeFilter& filter);

// Whether a profile can be planned for a size, as `hpcbake sizes` shows it.
struct ProfileSupport {
  std::string profile;
  bool supported = false;
  std::vector<std::string> distros; // the distros (serving the size's architecture) where it plans
  std::string reason;               // why not, when it is not supported
};

// Whether the component is for this size at all: the profile's GPU components (container
// toolkit, CUDA toolkit, DCGM) on NVIDIA GPU sizes, a userspace component by its applies_to.
bool component_applies(const ComponentManifest& c, const SizeManifest& size);

// Every profile, by id: supported when each component it requires applies to the size (a
// userspace component whose applies_to leaves the size out is skipped, as the plan skips it, but
// at least one must apply) and has a variant that is not refused for the size's GPU model and
// architecture on one distro that serves the architecture. Best-effort components do not count.
std::vector<ProfileSupport> profile_support(const Manifests& m, const SizeManifest& size);

} // namespace hpcbake::manifest
