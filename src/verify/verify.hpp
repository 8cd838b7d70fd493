#pragma once
// `verify`: smoke tests of what a VM size promises, at three levels.
//   0 inventory (instant): GPU count, driver version, kernel modules for every target
//     kernel, IB ports (state, physical state, rate), nvidia-peermem, OS.EnableRDMA.
//   1 function (seconds): per GPU through NVML (ECC, row remapping, throttling,
//     persistence, NVLink and Fabric Manager state) and the CUDA driver API (a JIT-compiled
//     vector add checked element by element, pinned H2D/D2H bandwidth).
//   2 fabric (tens of seconds): an RDMA write loopback between two queue pairs per port.
//   3 diagnostic (minutes): DCGM's short diagnostic, where the plan installs DCGM.
// The container checks (the runtime in each engine's config at 0; the CDI spec and a container
// that sees every GPU at 1) run when the profile configures container engines.
// Expectations are the plan's verify step, computed once by the planner from the size manifest
// and the plan (driver version, kernels): the stored plan of the install (plan.json), or a plan
// made for this machine where none was installed (plan_for_verify). Every check records where its
// threshold came from. NVML, CUDA and libibverbs are dlopen'ed:
// a missing library is a failed check with the reason. The library never prints;
// progress goes through the callbacks. `install` and `seal` call `run`.
#include "detect/host.hpp"
#include "exec/runner.hpp"
#include "manifest/manifests.hpp"
#include "plan/plan.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"
#include "verify/dynlib.hpp"

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::verify {

// deferred: a check of the target's hardware not run on this machine (`--hardware-checks
// deferred`, a bake on another size): the first boot on the target runs it (verify --boot).
enum class Verdict { pass, fail, skip, deferred };
const char* to_string(Verdict v);

struct Check {
  std::string id; // stable: "gpu.count", "gpu.3.ecc_errors", "ib.mlx5_ib0:1.rate"
  int level = 0;
  std::string title;    // "GPU count"
  std::string expected; // "8"
  std::string observed; // "7 (NVML)"
  Verdict verdict = Verdict::pass;
  std::string hint;                // what to do next; set on every failure
  std::string source;              // where the expectation comes from: "sizes/nd96isr_h100_v5.yaml gpu.count"
  std::optional<double> value;     // the measured number, when there is one
  std::optional<double> threshold; // the number it was compared with
  double seconds = 0;
};

struct Report {
  std::string size; // Standard_ND96isr_H100_v5
  std::string size_id;
  std::string distro;
  int level = 1;
  std::vector<std::string> kernels; // the target kernels modules were checked for
  std::vector<Check> checks;
  double seconds = 0;
  bool hardware_deferred = false; // the request's defer_hardware: the hardware checks are `deferred`

  int count(Verdict v) const;
  bool passed() const { return count(Verdict::fail) == 0; }
};

struct VerifyRequest {
  const plan::Plan* plan = nullptr; // required: what the machine was installed with (its verify step)
  int level = 1;                    // 0 to 3; every level includes the ones below
  std::string container_image;      // level 1: an image with nvidia-smi, present locally, run with --gpus all
  // Runs dcgmi and docker (levels 1 and 3); none: those checks are skipped, saying so.
  exec::Runner* runner = nullptr;
  // Only the checks that do not need the plan's size's hardware (module files and signatures for
  // every target kernel, the agent's and the container engines' files); each hardware check is
  // recorded as Verdict::deferred, for the first boot on that size (`--hardware-checks deferred`).
  bool defer_hardware = false;
  // Facts of this host (kernels, distro); required: verify always runs on the machine it checks.
  const detect::HostFacts* host = nullptr;
  // Every host file (sysfs, /proc/modules, /etc/waagent.conf, /lib/modules) is read through this.
  const util::HostFs* fs = nullptr;

  std::chrono::seconds fabric_wait{60}; // how long Fabric Manager may take to finish training
  std::size_t vadd_elements = 1 << 20;
  std::size_t gpu_bw_bytes = 64ull << 20;
  int gpu_bw_reps = 4;
  // The spin kernel of gpu.N.clocks_under_load (level 1), on every GPU at once.
  std::chrono::milliseconds load_time{1500};
  // cuda.p2p.I-J (level 2): nvbandwidth's device_to_device_memcpy_read_ce as Azure runs it.
  // 512 MiB buffers (nvbandwidth's default), 16 copies a sample (its loopCount), the median of 10
  // samples (Azure's `nvbandwidth -i 10`).
  std::size_t p2p_bytes = 512ull << 20;
  int p2p_loops = 16;
  int p2p_samples = 10;
  // Level 2.
  std::vector<std::string> ib_devices; // only these (any link layer, e.g. rxe0); empty: InfiniBand ports
  int ib_gid_index = -1;
  double ib_bw_fraction = 0.75; // of the size's port rate, when the manifest has no ib_write_bw_gbps
  int ib_iterations = 2000;
  double ib_seconds = 10; // the timed loopback of each port stops after this long
  std::size_t ib_message_bytes = 1 << 20;

  // `verify --boot`: rewrite the InfiniBand HCAs' CDI spec from this boot's sysfs before checking
  // it (an image with container_rdma: the HCAs exist only on the booted size).
  bool refresh_rdma_cdi = false;

  std::function<void(const Check&)> on_check;        // after each check
  std::function<void(const std::string&)> on_status; // "waiting for Fabric Manager (12 s)"
};

// A plan for verify on a machine no install recorded: size x distro x profile through the planner
// (driver version, Fabric Manager, peermem, kernels), signing aside (verify checks what is there).
// Errors: unknown size, unsupported distro (an empty `distro` is the host's), unknown profile.
Result<plan::Plan> plan_for_verify(const manifest::Manifests& manifests, const std::string& size,
                                   const std::string& distro, const std::string& profile,
                                   const detect::HostFacts& host);

// Runs every check up to `level` against the plan's verify step. Errors only when nothing can be
// checked (a plan without a verify step, a bad request); failing checks are in the Report.
Result<Report> run(const VerifyRequest& request);

// The report as `verify --json` prints it (schema documented in docs/manual.md, "hpcbake verify").
std::string to_json_text(const Report& report);
// The human table: check, expected, observed, verdict; hints under failures.
std::string render_table(const Report& report);
// JUnit XML: one <testsuite> per level, one <testcase> per check.
std::string to_junit(const Report& report);
// `verify --libraries`: NVML, the CUDA driver API and libibverbs, each loaded as the checks
// load it, with the file the loader chose and every entry point verify declares, found or not.
// Nothing is initialized, so this answers on a machine without a GPU or a loaded driver.
std::vector<LibraryProbe> probe_libraries();
std::string render_libraries(const std::vector<LibraryProbe>& probes);
std::string libraries_to_json_text(const std::vector<LibraryProbe>& probes);

// XML 1.0 text/attribute escaping; characters XML cannot carry become U+FFFD.
std::string xml_escape(std::string_view text);

} // namespace hpcbake::verify
