#pragma once
// A plan: size x distro resolved into an ordered list of steps, before anything is
// installed. Steps carry everything a later executor needs (artifacts with URL,
// SHA-256 and size; packages; kernels; config edits; services; smoke tests) so that
// `plan --json` is exactly what `install` will do.
#include "detect/host.hpp"
#include "manifest/manifests.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace hpcbake::plan {

enum class StepKind { packages, artifact, kernel_headers, config, initramfs, reboot, driver, dkms, service, waagent, verify };
const char* to_string(StepKind kind);

struct Step {
  std::string id;                  // stable: "artifact:nvidia-cuda-driver:NVIDIA-Linux-x86_64-580.126.20.run"
  StepKind kind = StepKind::packages;
  std::string title;               // one line for humans
  std::vector<std::string> after;  // ids of steps that must finish first
  nlohmann::json detail;           // kind-specific, documented in README "plan --json"
};

// An artifact as the manifests pin it (URLs with any query string intact, for the
// downloader only; the JSON shows them redacted).
struct PlannedArtifact {
  std::string component;
  std::string version;
  manifest::Artifact artifact;
};

struct Plan {
  std::string size;          // Standard_ND96isr_H100_v5
  std::string size_id;
  std::string family;
  std::string distro_id;
  std::string distro_name;
  std::vector<std::string> kernels; // targets; empty when resolved at install time
  std::string kernels_source;
  std::vector<Step> steps;
  std::vector<std::string> notes;   // facts a reader must see (unknown SHA-256, Secure Boot, ...)
  std::vector<PlannedArtifact> artifacts;
};

// Module signing: auto signs when Secure Boot is on; off never signs (refused when
// Secure Boot is on: the kernel would reject every module built).
enum class Signing { automatic, on, off };

struct PlanRequest {
  std::string size;    // VM size name (any case)
  std::string distro;  // distro manifest id
  std::optional<std::string> driver_kind; // --driver: cuda | grid; default from the size
  // Facts of the host being planned for, when it is this machine; used for kernels,
  // Secure Boot and nouveau. Null when planning for another machine.
  const detect::HostFacts* host = nullptr;
  Signing signing = Signing::automatic;
};

// Resolves the request. Errors: unknown size/distro and combinations the manifests
// rule out (kind unsupported, listing what is supported); broken couplings such as
// Fabric Manager != driver version (kind manifest).
Result<Plan> make_plan(const manifest::Manifests& manifests, const PlanRequest& request);

nlohmann::json to_json(const Plan& plan);
std::string render_text(const Plan& plan);

} // namespace hpcbake::plan
