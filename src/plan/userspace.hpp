#pragma once
// The userspace components' placeholders ({prefix}, {prefix:<component>}, {version},
// {cuda_home}, {gencode}), resolved by the planner so that the plan holds the final argv and files.
#include "manifest/manifests.hpp"
#include "util/error.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::plan {

struct Placeholders {
  std::string prefix, version;
  std::map<std::string, std::string> prefixes; // planned components' prefixes
  std::string gpu_model;                       // the size's, for {gencode}
  std::vector<std::string> artifacts;          // the variant's artifact names, for {artifact:NAME}
};

// `text` with every placeholder replaced; an error naming `where` and the placeholder when one is
// unknown or cannot be resolved for this size ({gencode} without a known GPU model).
Result<std::string> substitute(std::string_view text, const Placeholders& p, std::string_view where);

// The CUDA compute capability of an NVIDIA GPU model as the size manifests name it ("H100" ->
// "9.0"), from NVIDIA's published table; nullopt for a model it does not list.
std::optional<std::string> compute_capability(std::string_view gpu_model);

// Where environment-modules reads modulefiles: Debian/Ubuntu /usr/share/modules/modulefiles, the
// RPM distributions /usr/share/Modules/modulefiles (the directories Azure's images link into).
std::string modulefiles_dir(manifest::PackageManager pm);

} // namespace hpcbake::plan
