#pragma once
// The check list: what a size promises (Expectations, from the size manifest and the
// plan), and the checks of each concern, which append to a Recorder. Internal to verify/;
// verify.hpp is the public contract.
#include "util/paths.hpp"
#include "verify/verify.hpp"

#include "plan/plan.hpp"
#include "util/strings.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::verify {

struct Expectations {
  std::string size_file; // "sizes/nd96isr_h100_v5.yaml" (relative to the manifest dir)
  // GPU
  bool nvidia = false;
  int gpu_count = 0;
  std::string gpu_model;                // "H100" (size manifest gpu.model)
  std::vector<std::string> gpu_pci_ids; // "0x2330": the PCI device ids of that model (gpu.pci_ids)
  std::string driver_version;           // empty when the plan installs no NVIDIA driver
  std::string driver_source;            // "components/nvidia-cuda-driver.yaml for ubuntu-22.04"
  int nvswitch_count = 0;
  bool fabric_manager = false;
  std::vector<std::string> modules; // kernel modules the plan builds (nvidia, nvidia-uvm, ...)
  // Other out-of-tree modules the plan builds with DKMS (a size's dkms_modules): DKMS package name
  // and its modules, in plan order; checked for every target kernel like NVIDIA's.
  std::vector<std::pair<std::string, std::vector<std::string>>> dkms_modules;
  std::vector<std::string> kernels; // target kernels: running and next-boot
  std::optional<double> gpu_bw_gbs; // checks.gpu_bw_h2d_gbs
  // InfiniBand
  int ib_ports = 0; // 0: no InfiniBand
  int ib_rate_gbps = 0;
  bool ipoib = false;
  bool peermem = false;
  std::optional<double> ib_bw_gbps; // loopback threshold
  std::string ib_bw_source;
  // Containers: the engines whose configs name the runtime (the plan's container-runtime step).
  std::vector<std::pair<std::string, std::string>> container_engines; // engine -> config host path
  std::string container_runtime = "nvidia";
  std::string container_binary;
  bool dcgm = false; // the plan installs DCGM
  std::string waagent_config = paths::kWaagentConf;
  std::string waagent_service = "walinuxagent";
};

// From the size manifest and its plan.
Expectations expectations(const manifest::Manifests& m, const manifest::SizeManifest& size,
                          const manifest::DistroManifest& distro, const plan::Plan& plan, double ib_bw_fraction);

// Appends checks to the report, timing each and telling the observer.
class Recorder {
public:
  Recorder(const VerifyRequest& request, Report& report);
  void add(Check check);
  void status(const std::string& text) const;
  const VerifyRequest& request() const { return request_; }

private:
  const VerifyRequest& request_;
  Report& report_;
  std::chrono::steady_clock::time_point last_;
};

// A check built in one expression.
Check make_check(std::string id, int level, std::string title, std::string expected, std::string observed,
                 Verdict verdict, std::string hint = {}, std::string source = {});

// --- host files (level 0) ---
// Whether /proc/modules (or /sys/module) shows `name` loaded ('-' and '_' alike).
bool module_loaded(const util::HostFs& fs, const std::string& name);
// The agent's reading of OS.EnableRDMA: "y" (any case) switches it on, as conf.get_switch does.
bool rdma_switch_on(const std::optional<std::string>& value);
void host_checks(Recorder& rec, const Expectations& e);

// --- GPUs: NVML inventory (level 0), NVML health and CUDA (level 1) ---
void gpu_checks(Recorder& rec, const Expectations& e, int level);

// --- InfiniBand through libibverbs: ports (level 0), RDMA loopback (level 2) ---
void ib_checks(Recorder& rec, const Expectations& e, int level);

// --- containers: the runtime in each engine's config (level 0), CDI and a container (level 1) ---
void container_checks(Recorder& rec, const Expectations& e, int level);

// --- DCGM's short diagnostic (level 3) ---
void dcgm_checks(Recorder& rec, const Expectations& e);
// `dcgmi diag -j` output as checks, one per test (errors: not a diagnostic document).
Result<std::vector<Check>> dcgm_diag_checks(const nlohmann::json& doc);

// Thresholds for humans: "48", "0.75", "2.5" (at most two decimals, no trailing zeros).
std::string number(double v);

} // namespace hpcbake::verify
