#include "plan/userspace.hpp"

#include "plan/plan.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace hpcbake::plan {

namespace {

// NVIDIA's "CUDA GPU Compute Capability" table (https://developer.nvidia.com/cuda-gpus), for the
// GPU models the size manifests name.
constexpr std::pair<std::string_view, std::string_view> kComputeCapability[] = {
    {"M60", "5.2"},    {"V100", "7.0"},  {"T4", "7.5"},     {"A100", "8.0"},
    {"A10", "8.6"},    {"H100", "9.0"},  {"H200", "9.0"},   {"B200", "10.0"},
    {"GB200", "10.0"}, {"B300", "10.3"}, {"GB300", "10.3"}, {"RTX PRO 6000", "12.0"}};

} // namespace

std::optional<std::string> compute_capability(std::string_view gpu_model) {
  for (const auto& [model, cc] : kComputeCapability)
    if (util::iequals(model, gpu_model)) return std::string(cc);
  return std::nullopt;
}

std::string modulefiles_dir(manifest::PackageManager pm) {
  return pm == manifest::PackageManager::apt ? "/usr/share/modules/modulefiles" : "/usr/share/Modules/modulefiles";
}

Result<std::string> substitute(std::string_view text, const Placeholders& p, std::string_view where) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const auto open = text.find('{', i);
    if (open == std::string_view::npos) {
      out.append(text.substr(i));
      break;
    }
    out.append(text.substr(i, open - i));
    const auto close = text.find('}', open);
    if (close == std::string_view::npos) {
      out.append(text.substr(open));
      break;
    }
    const std::string name(text.substr(open + 1, close - open - 1));
    if (name == "prefix") {
      out += p.prefix;
    } else if (name == "version") {
      out += p.version;
    } else if (name == "cuda_home") {
      out += "/usr/local/cuda";
    } else if (name.starts_with("prefix:")) {
      auto it = p.prefixes.find(name.substr(7));
      if (it == p.prefixes.end())
        return fail(ErrorKind::unsupported,
                    fmt::format("{}: {{{}}} names a component this plan does not install", where, name),
                    "add that component to the profile, or choose a profile that has it");
      out += it->second;
    } else if (name.starts_with("artifact:")) {
      const std::string art = name.substr(9);
      if (std::find(p.artifacts.begin(), p.artifacts.end(), art) == p.artifacts.end())
        return fail(ErrorKind::manifest, fmt::format("{}: {{{}}} names no artifact of this variant", where, name),
                    "name one of the variant's artifacts");
      if (text != "{" + name + "}")
        return fail(ErrorKind::manifest,
                    fmt::format("{}: {{{}}} must be a whole argument (install puts the cached file's path there)",
                                where, name));
      out += artifact_ref(art);
    } else if (name == "gencode") {
      const auto cc = compute_capability(p.gpu_model);
      if (!cc)
        return fail(ErrorKind::unsupported,
                    fmt::format("{}: {{gencode}} needs the GPU's compute capability, and none is known for '{}'", where,
                                p.gpu_model),
                    "the component builds for a GPU size only");
      const std::string sm = util::replace_all(*cc, ".", "");
      out += fmt::format("-gencode=arch=compute_{0},code=sm_{0}", sm);
    } else if (!name.empty() &&
               name.find_first_not_of("abcdefghijklmnopqrstuvwxyz_:-.0123456789") == std::string::npos) {
      return fail(ErrorKind::manifest, fmt::format("{}: unknown placeholder {{{}}}", where, name),
                  "placeholders: {prefix}, {prefix:<component>}, {version}, {cuda_home}, {gencode}, {artifact:<name>}");
    } else {
      out.append(text.substr(open, close - open + 1)); // not a placeholder: ${VAR}, a Tcl block
    }
    i = close + 1;
  }
  return out;
}

} // namespace hpcbake::plan
