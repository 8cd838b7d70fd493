#pragma once
// The check list: what a size promises (Expectations: the plan's verify step), and the checks of each concern, which
// append to a Recorder. Internal to verify/; verify.hpp is the public contract.
#include "util/paths.hpp"
#include "verify/verify.hpp"

#include "plan/plan.hpp"
#include "util/strings.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::verify {

// What the size promises: the plan's verify step (plan::verify_expectations, computed when the
// plan was made).
using Expectations = plan::VerifyExpectations;

// The plan's expectations, with the loopback threshold a fraction of the port rate where the size
// names none (checks.ib_write_bw_gbps). Errors: the plan has no verify step.
Result<Expectations> expectations(const plan::Plan& plan, double ib_bw_fraction);

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

// The modules in a /proc/modules text whose taint letters hold `E`: loaded without a signature the
// kernel could check against a key it trusts.
struct TaintedModule {
  std::string name, taints; // "nvidia", "POE"
};
std::vector<TaintedModule> unverified_modules(std::string_view proc_modules);
// The agent's reading of OS.EnableRDMA: "y" (any case) switches it on, as conf.get_switch does.
bool rdma_switch_on(const std::optional<std::string>& value);
// Module files and signatures, the agent's RDMA switch; with `hardware`, nvidia-peermem loaded too.
void host_checks(Recorder& rec, const Expectations& e, bool hardware = true);
// `--hardware-checks deferred`: one Verdict::deferred check per hardware check `level` would run
// on `size` (checks_deferred.cpp).
void deferred_checks(Recorder& rec, const Expectations& e, int level, const std::string& size);
// CPUs, memory, NVMe and IPoIB against the size (level 0; checks_inventory.cpp).
void inventory_checks(Recorder& rec, const Expectations& e);

// --- GPUs: NVML inventory (level 0), NVML health and CUDA (level 1) ---
void gpu_checks(Recorder& rec, const Expectations& e, int level);
// The clock event reasons among `bits` that mean the hardware slows the GPU down ("HW slowdown,
// HW thermal slowdown"), or "none".
std::string throttle_names(unsigned long long bits);

// --- CUDA + NVML: clocks under a spin kernel (level 1), GPU peer-to-peer copies (level 2) ---
void cuda_load_checks(Recorder& rec, const Expectations& e, int level);

// --- InfiniBand through libibverbs: ports (level 0), RDMA loopback (level 2) ---
void ib_checks(Recorder& rec, const Expectations& e, int level);

// --- containers: the runtime in each engine's config (level 0), CDI and a container (level 1) ---
void container_checks(Recorder& rec, const Expectations& e, int level);
// `podman run --device nvidia.com/gpu=all IMAGE nvidia-smi -L` (level 1): checks_container_run.cpp.
void podman_run_check(Recorder& rec, const Expectations& e);
// The GPUs `nvidia-smi -L` lists (one "GPU <i>: <name> (UUID: ...)" line each): docker's and podman's runs.
int listed_gpus(std::string_view out);
// A Kubernetes node: containerd's default runtime and CDI (level 0), the CDI spec and devices (1).
void kubernetes_checks(Recorder& rec, const Expectations& e, int level);
// RDMA in containers (InfiniBand size): Docker's memlock (0), the HCAs' CDI spec (1): checks_container_rdma.cpp.
void container_rdma_checks(Recorder& rec, const Expectations& e, int level);

// --- the kernel log: Xids, IPoIB lost carrier; IB port error counters (level 0) ---
void kernel_log_checks(Recorder& rec, const Expectations& e);
// --- PCIe links, GPU/NIC topology, vGPU licence (level 0), nvidia-smi (level 1): checks_topology.cpp ---
void topology_checks(Recorder& rec, const Expectations& e, int level);

// --- DCGM's short diagnostic (level 3) ---
void dcgm_checks(Recorder& rec, const Expectations& e);
// `dcgmi diag -j` output as checks, one per test (errors: not a diagnostic document).
Result<std::vector<Check>> dcgm_diag_checks(const nlohmann::json& doc);

// --- load: NCCL all-reduce (nccl-tests) and GPUDirect RDMA ib_write_bw per HCA (level 3; checks_load.cpp) ---
void load_checks(Recorder& rec, const Expectations& e);

// Thresholds for humans: "48", "0.75", "2.5" (at most two decimals, no trailing zeros).
std::string number(double v);

} // namespace hpcbake::verify
