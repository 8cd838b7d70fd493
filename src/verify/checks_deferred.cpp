// `--hardware-checks deferred`: a bake on a machine that is not the size the image is for (a
// general-purpose VM baking a GPU image, the QEMU bake). Every check that needs the size's GPUs,
// HCAs, CPUs, memory or disks is recorded, not run: Verdict::deferred, with what the first boot on
// that size will check (verify --boot, hpcbake-verify-boot.service). The checks of what the bake
// leaves on disk (module files and signatures for every target kernel, the agent's and the
// container engines' configuration) run as always (verify.cpp).
#include "verify/checks.hpp"

#include <fmt/format.h>

namespace hpcbake::verify {

namespace {

struct Deferral {
  Recorder& rec;
  const Expectations& e;
  int level;
  std::string why;

  void add(const std::string& id, int at, const std::string& title, const std::string& expected) const {
    if (at > level) return;
    rec.add(make_check(id, at, title, expected, why, Verdict::deferred, {},
                       "--hardware-checks deferred (the plan's verify step)"));
  }
};

void gpu(const Deferral& d) {
  const auto& e = d.e;
  if (!e.nvidia) return;
  d.add("gpu.nvml", 0, "NVIDIA driver answers (NVML)", "libnvidia-ml.so.1 loads, nvmlInit_v2 succeeds");
  d.add("gpu.count", 0, "GPU count", fmt::format("{}", e.gpu_count));
  if (!e.gpu_pci_ids.empty())
    d.add("gpu.pci_ids", 0, "GPU model (PCI device id)",
          fmt::format("{} ({})", e.gpu_model, util::join(e.gpu_pci_ids, ", ")));
  if (!e.driver_version.empty()) d.add("gpu.driver_version", 0, "NVIDIA driver version (NVML)", e.driver_version);
  if (e.nvswitch_count > 0) d.add("gpu.nvswitch_count", 0, "NVSwitches", fmt::format("{}", e.nvswitch_count));
  d.add("gpu.xid", 0, "Xid errors since boot (kernel log)", "no Xid that needs a reset, a reboot or support");
  d.add("gpu.pcie", 0, "each GPU's PCIe link width", "the size's layout, else the GPU's maximum");
  if (e.grid) d.add("gpu.grid_licence", 0, "each vGPU's licence", "licensed");
  d.add("gpu.health", 1, "each GPU's health (NVML: persistence, ECC, row remapping, throttling, NVLink; nvidia-smi)",
        "healthy");
  d.add("cuda.init", 1, "CUDA driver API initializes", fmt::format("cuInit succeeds; {} devices", e.gpu_count));
  d.add("cuda.vector_add", 1, "a CUDA kernel on every GPU, host-device bandwidth",
        e.gpu_bw_gbs ? fmt::format("correct; >= {} GB/s", number(*e.gpu_bw_gbs)) : std::string("correct"));
  d.add("gpu.clocks_under_load", 1, "clocks and PCIe generation under a short load", "no slowdown reason");
  if (e.gpu_count >= 2) d.add("cuda.p2p", 2, "GPU peer-to-peer copies", "every pair of GPUs");
  if (e.dcgm) d.add("dcgm.diag", 3, "DCGM diagnostic", "every test passes");
  if (e.gpu_count >= 2) d.add("nccl.all_reduce", 3, "NCCL all-reduce bus bandwidth", "the size's figure");
}

void infiniband(const Deferral& d) {
  const auto& e = d.e;
  if (e.ib_ports <= 0) return;
  d.add("ib.verbs", 0, "RDMA stack answers (libibverbs)", "libibverbs.so.1 loads, devices listed");
  d.add("ib.port_count", 0, "InfiniBand ports",
        e.ib_rate_gbps > 0 ? fmt::format("{} at {} Gb/s", e.ib_ports, e.ib_rate_gbps) : fmt::format("{}", e.ib_ports));
  d.add("ib.link_flaps", 0, "InfiniBand link flapping", "no port over its error thresholds");
  if (e.peermem) d.add("ib.nvidia_peermem", 0, "nvidia-peermem loaded (GPUDirect RDMA)", "loaded");
  if (e.ipoib) d.add("ib.ipoib.count", 0, "IPoIB interfaces up with addresses", fmt::format("{}", e.ib_ports));
  d.add("ib.rdma_write", 2, "RDMA write loopback per port", "the size's bandwidth, data intact");
  if (e.nvidia && e.ib_write_bw_gdr_gbps)
    d.add("ib.gdr_write_bw", 3, "GPUDirect RDMA write bandwidth per HCA",
          fmt::format(">= {} Gb/s", number(*e.ib_write_bw_gdr_gbps)));
}

void host(const Deferral& d) {
  const auto& e = d.e;
  if (e.cpu_threads) d.add("host.cpu", 0, "CPU sockets, cores and threads", fmt::format("{} threads", *e.cpu_threads));
  if (e.memory_mb) d.add("host.memory", 0, "memory (MemTotal)", fmt::format("{} MB", *e.memory_mb));
  if (e.nvme_count) d.add("host.nvme_count", 0, "NVMe disks", fmt::format("{}", *e.nvme_count));
  if (!e.pci_topology.empty()) d.add("topology.gpu_hca", 0, "GPU and NIC PCI topology", "the size's published layout");
  if (e.nvidia && !e.container_engines.empty())
    d.add("container.gpus", 1, "the CDI spec and a container see every GPU", fmt::format("{}", e.gpu_count));
}

} // namespace

void deferred_checks(Recorder& rec, const Expectations& e, int level, const std::string& size) {
  const Deferral d{rec, e, level,
                   fmt::format("deferred to the first boot on {} (verify --boot): this machine is not one", size)};
  gpu(d);
  infiniband(d);
  host(d);
}

} // namespace hpcbake::verify
