// Level 3, load (minutes): NCCL all-reduce across the node's GPUs with NVIDIA's nccl-tests, and
// GPUDirect RDMA write bandwidth per HCA with perftest's ib_write_bw in GPU memory, as Azure's
// node health checks run them (Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a
// customTests/azure_nccl_allreduce.nhc and customTests/azure_ib_write_bw_gdr.nhc). Every program
// runs through the request's Runner; the paths are the plan's, resolved under --root.
#include "verify/checks.hpp"
#include "verify/load.hpp"
#include "verify/topology.hpp"

#include "verify/ibverbs.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <unistd.h>

namespace hpcbake::verify {

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Bounds: NCCL's init and a single 16 GiB all-reduce take well under a minute on an ND v5; the
// GDR run of one HCA (CUDA init, 5000 writes of 8 MiB) seconds.
constexpr auto kAllReduceTimeout = 300s;
constexpr auto kWriteBwTimeout = 60s;
constexpr auto kServerReady = 15s;
// azure_ib_write_bw_gdr.nhc: MESSAGE_SIZE=8388608, port_numbers=(18510 ... 18517).
constexpr std::uint64_t kGdrMessage = 8388608;
constexpr int kGdrFirstPort = 18510;
constexpr const char* kAzureNccl = "Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a "
                                   "customTests/azure_nccl_allreduce.nhc";
constexpr const char* kAzureGdr = "Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a "
                                  "customTests/azure_ib_write_bw_gdr.nhc";
constexpr const char* kIbWriteBw = "/usr/bin/ib_write_bw"; // perftest's path in every distro's package

std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> out;
  std::istringstream in{std::string(line)};
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

std::optional<double> to_double(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() ? std::optional(v) : std::nullopt;
}

std::optional<long long> to_int(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 18) return std::nullopt;
  return std::stoll(s);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Whether `name` is an executable file in this machine's PATH (numactl runs on the host).
bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (const auto dir : util::split(path ? path : "/usr/bin:/bin", ':'))
    if (!dir.empty() && ::access((fs::path(std::string(dir)) / name).c_str(), X_OK) == 0) return true;
  return false;
}

// The tree's copy of a plan path: itself at /, under the root otherwise.
std::string tree_path(const util::HostFs& fs, const std::string& path) {
  return fs.resolve(path).string();
}

// --- NCCL all-reduce -------------------------------------------------------------------------

// mpirun as Azure's check runs it: one rank per GPU, its environment, HPC-X's libraries.
exec::Command all_reduce_command(const util::HostFs& fs, const Expectations& e) {
  const std::string program = tree_path(fs, e.all_reduce_perf);
  const std::string topo = e.nccl_topo_file.empty() ? "" : tree_path(fs, e.nccl_topo_file);
  const std::string n = std::to_string(e.gpu_count);
  const std::vector<std::string> env = {
      "NCCL_IB_PCI_RELAXED_ORDERING=1", "UCX_IB_PCI_RELAXED_ORDERING=on", "UCX_TLS=tcp",
      "UCX_NET_DEVICES=eth0",           "CUDA_DEVICE_ORDER=PCI_BUS_ID",   "NCCL_SOCKET_IFNAME=eth0",
      "NCCL_TOPO_FILE=" + topo};
  const std::vector<std::string> args = {"-b", e.nccl_allreduce_message, "-f", "2", "-g", "1",
                                         "-e", e.nccl_allreduce_message, "-c", "1"};
  exec::Command cmd;
  cmd.timeout = kAllReduceTimeout;
  if (e.mpirun.empty()) {
    // No MPI launcher in the plan: one process drives every GPU (-g N), NCCL's single-process mode.
    cmd.argv = {program, "-b", e.nccl_allreduce_message, "-f", "2", "-g", n, "-e", e.nccl_allreduce_message, "-c", "1"};
    cmd.env = env;
    return cmd;
  }
  const fs::path mpirun = tree_path(fs, e.mpirun);
  const fs::path ompi = mpirun.parent_path().parent_path(); // <hpcx>/ompi
  const char* inherited = std::getenv("LD_LIBRARY_PATH");
  const std::string libs = (ompi / "lib").string() + (inherited && *inherited ? ":" + std::string(inherited) : "");
  cmd.env = {"LD_LIBRARY_PATH=" + libs, "OPAL_PREFIX=" + ompi.string()};
  cmd.argv = {mpirun.string(),
              "-np",
              n,
              "--map-by",
              "ppr:" + n + ":node",
              "-bind-to",
              "numa",
              "-mca",
              "coll_hcoll_enable",
              "0",
              "--allow-run-as-root",
              "-x",
              "LD_LIBRARY_PATH=" + libs};
  for (const auto& v : env) {
    cmd.argv.push_back("-x");
    cmd.argv.push_back(v);
  }
  cmd.argv.push_back(program);
  cmd.argv.insert(cmd.argv.end(), args.begin(), args.end());
  return cmd;
}

void nccl_check(Recorder& rec, const Expectations& e) {
  const auto& req = rec.request();
  const std::string id = "nccl.all_reduce", title = "NCCL all-reduce bus bandwidth (nccl-tests all_reduce_perf)";
  const std::string expected = e.nccl_allreduce_gbs
                                   ? fmt::format(">= {} GB/s at {}, no wrong values", number(*e.nccl_allreduce_gbs),
                                                 e.nccl_allreduce_message.empty() ? "?" : e.nccl_allreduce_message)
                                   : "no expectation published";
  const std::string source = e.size_file + " checks.nccl_allreduce_gbs, checks.nccl_allreduce_message";
  auto skip = [&](const std::string& why) { rec.add(make_check(id, 3, title, expected, why, Verdict::skip)); };
  if (e.gpu_count < 2) return skip(fmt::format("needs at least two GPUs (the size has {})", e.gpu_count));
  if (!e.nccl_allreduce_gbs || e.nccl_allreduce_message.empty())
    return skip(fmt::format("no expectation published ({} has no checks.nccl_allreduce_gbs and "
                            "checks.nccl_allreduce_message)",
                            e.size_file));
  if (!nccl_size_bytes(e.nccl_allreduce_message))
    return skip(
        fmt::format("checks.nccl_allreduce_message \"{}\" is not an nccl-tests size", e.nccl_allreduce_message));
  if (e.all_reduce_perf.empty()) return skip("the plan builds no nccl-tests (profile ai)");
  if (!req.runner) return skip("no command runner");
  const auto& fs = *req.fs;
  if (!fs.exists(e.all_reduce_perf))
    return skip(fmt::format("{} is not there: the plan's nccl-tests build has not run",
                            fs.display(e.all_reduce_perf).string()));
  if (!e.nccl_topo_file.empty() && !fs.exists(e.nccl_topo_file)) {
    rec.add(make_check(id, 3, title, expected,
                       fmt::format("the topology file {} is missing", fs.display(e.nccl_topo_file).string()),
                       Verdict::fail, "the plan's OS settings write it: run `hpcbake install` again", source));
    return;
  }
  const auto cmd = all_reduce_command(fs, e);
  rec.status(fmt::format("running all_reduce_perf on {} GPUs at {} (at most {} s)", e.gpu_count,
                         e.nccl_allreduce_message, kAllReduceTimeout.count()));
  auto r = req.runner->run(cmd);
  if (!r) {
    rec.add(make_check(id, 3, title, expected, r.error().message, Verdict::fail,
                       r.error().hint.empty() ? "check the plan's nccl-tests and HPC-X steps" : r.error().hint,
                       source));
    return;
  }
  const auto out = parse_all_reduce(r->output);
  const double want = *e.nccl_allreduce_gbs;
  std::string observed, hint;
  if (!out.failed_lines.empty() || out.out_of_bounds.value_or(0) > 0 || out.wrong > 0) {
    observed =
        fmt::format("{} out-of-bounds values, {} wrong elements ({}; {})", out.out_of_bounds.value_or(0), out.wrong,
                    out.failed_lines.empty() ? "#wrong column" : out.failed_lines.front(), r->describe());
    hint = "a GPU computes or moves wrong data: `dcgmi diag -r 3`, then report the node (Azure: FaultCode NHC2010)";
  } else if (!r->ok()) {
    observed = fmt::format("{} {}: {}", fs::path(cmd.argv.front()).filename().string(), r->describe(),
                           util::last_lines(r->output, 3));
    hint = r->timed_out ? fmt::format("all_reduce_perf did not finish in {} s: a GPU or NVLink hangs; `nvidia-smi "
                                      "topo -m`, `dcgmi diag -r 2`",
                                      kAllReduceTimeout.count())
                        : "run the command by hand and read NCCL's error (NCCL_DEBUG=INFO); `nvidia-smi topo -m`";
  } else if (!out.avg_busbw) {
    observed = fmt::format("no \"# Avg bus bandwidth\" line ({} rows): {}", out.rows, util::last_lines(r->output, 2));
    hint = "all_reduce_perf printed no result: run it by hand";
  } else if (*out.avg_busbw < want) {
    observed = fmt::format("{} GB/s average bus bandwidth", number(*out.avg_busbw));
    hint = "NVLink or NVSwitch is slower than the size promises: `nvidia-smi nvlink -s`, Fabric Manager's state; "
           "report the node if it persists (Azure: FaultCode NHC2010)";
  }
  const bool ok = observed.empty();
  if (ok)
    observed = fmt::format("{} GB/s average bus bandwidth, 0 wrong ({})", number(*out.avg_busbw),
                           e.mpirun.empty() ? fmt::format("one process, {} GPUs", e.gpu_count)
                                            : fmt::format("mpirun, {} ranks", e.gpu_count));
  Check c = make_check(id, 3, title, expected, observed, ok ? Verdict::pass : Verdict::fail, hint,
                       fmt::format("{} (Azure's conf: check_nccl_allreduce; run as {})", source, kAzureNccl));
  c.value = out.avg_busbw;
  c.threshold = want;
  rec.add(std::move(c));
}

// --- GPUDirect RDMA write bandwidth ----------------------------------------------------------

// Whether a packages step of the plan installs perftest (the distro's rdma_packages).
bool plan_installs_perftest(const plan::Plan& plan) {
  return std::any_of(plan.steps.begin(), plan.steps.end(), [](const plan::Step& s) {
    const auto* p = s.as<plan::PackagesStep>();
    return p && std::find(p->packages.begin(), p->packages.end(), "perftest") != p->packages.end();
  });
}

struct GpuChoice {
  std::string flag; // --use_cuda_bus_id=0001:00:00.0 or --use_cuda=0
  std::string how;  // for the observed text
};

// The GPU next to `dev`: by the size's PCI layout (the HCA's bus id from sysfs), else one on the
// HCA's NUMA node, else the HCA's index as Azure's check does.
GpuChoice choose_gpu(const util::HostFs& fs, const Expectations& e, const std::string& dev, int index, int numa,
                     std::map<int, int>& used_per_numa) {
  const std::string link = "/sys/class/infiniband/" + dev + "/device";
  const auto pairs = nearest_gpus(e.pci_topology);
  std::error_code ec;
  // The link's own target names the PCI function ("../../../0101:00:00.0"), on the host as under a
  // --root fixture (resolving it would follow the link out of the root, or not at all on "/").
  const auto target = std::filesystem::read_symlink(fs.resolve_entry(link), ec);
  if (!ec) {
    const std::string bus = lower(target.filename().string());
    for (const auto& p : pairs)
      if (p.nic == bus)
        return {"--use_cuda_bus_id=" + p.gpu, fmt::format("GPU {} beside HCA {} in the size's PCI layout", p.gpu, bus)};
  }
  if (numa >= 0) {
    std::vector<std::string> gpus;
    for (const auto& t : e.pci_topology)
      if (t.numa == numa && t.pci_class.starts_with("0x0302")) gpus.push_back(lower(t.bus_id));
    if (!gpus.empty()) {
      const auto& g = gpus[static_cast<std::size_t>(used_per_numa[numa]++) % gpus.size()];
      return {"--use_cuda_bus_id=" + g, fmt::format("GPU {} on the HCA's NUMA node {}", g, numa)};
    }
  }
  return {fmt::format("--use_cuda={}", index),
          fmt::format("GPU {} (no PCI layout places this HCA: its index, as Azure's check)", index)};
}

struct ServerRun {
  std::mutex m;
  std::condition_variable cv;
  bool ready = false, done = false;
  std::string seen; // the server's output so far (its banner may arrive in pieces)
  Result<exec::Completed> result = exec::exited(-1);
};

// One HCA: the server in GPU memory in the background, then the client to localhost.
void gdr_one(Recorder& rec, const Expectations& e, const std::string& dev, int index, std::map<int, int>& used) {
  const auto& req = rec.request();
  const auto& fs = *req.fs;
  const std::string id = "ib." + dev + ".gdr_write_bw";
  const std::string title = dev + ": GPUDirect RDMA write bandwidth (ib_write_bw, GPU memory)";
  const double want = *e.ib_write_bw_gdr_gbps;
  const std::string expected = fmt::format(">= {} Gb/s at 8 MiB", number(want));
  const std::string source =
      fmt::format("{} checks.ib_write_bw_gdr_gbps (Azure's conf: check_ib_bw_gdr; run as {})", e.size_file, kAzureGdr);
  int numa = -1;
  if (auto v = fs.read_attr("/sys/class/infiniband/" + dev + "/device/numa_node"))
    if (auto n = to_int(*v)) numa = static_cast<int>(*n);
  const auto gpu = choose_gpu(fs, e, dev, index, numa, used);
  const std::string port = std::to_string(kGdrFirstPort + index);
  std::vector<std::string> base = {
      tree_path(fs, kIbWriteBw), "-p",     port, "-s", std::to_string(kGdrMessage), "-x", "0", "-F", "--report_gbits",
      "--perform_warm_up",       gpu.flag, "-d", dev};
  const bool numactl = numa >= 0 && on_path("numactl");
  if (numactl) base.insert(base.begin(), {"numactl", "-N", std::to_string(numa), "-m", std::to_string(numa)});
  exec::Command server, client;
  server.argv = base;
  server.timeout = client.timeout = kWriteBwTimeout;
  client.argv = base;
  client.argv.push_back("localhost");
  ServerRun sr;
  server.on_output = [&sr](std::string_view chunk) {
    std::lock_guard lock(sr.m);
    if (sr.ready) return;
    sr.seen.append(chunk);
    if (sr.seen.find("Waiting for client to connect") == std::string::npos) return;
    sr.ready = true;
    sr.cv.notify_all();
  };
  rec.status(fmt::format("ib_write_bw in GPU memory on {} ({})", dev, gpu.how));
  std::thread t([&] {
    auto r = req.runner->run(server);
    std::lock_guard lock(sr.m);
    sr.result = std::move(r);
    sr.done = true;
    sr.cv.notify_all();
  });
  {
    std::unique_lock lock(sr.m);
    // On the system clock: a steady-clock wait calls pthread_cond_clockwait, which glibc has only
    // since 2.30, above the release binary's floor (2.28, EL 8; tests/release).
    sr.cv.wait_until(lock, std::chrono::system_clock::now() + kServerReady, [&] { return sr.ready || sr.done; });
  }
  auto r = req.runner->run(client);
  t.join();
  std::string observed, hint;
  std::optional<double> gbps;
  const auto& s = sr.result;
  if (!r || !r->ok()) {
    const std::string text = r ? r->output : r.error().message;
    if (text.find("unrecognized option") != std::string::npos && text.find("use_cuda") != std::string::npos) {
      rec.add(make_check(id, 3, title, expected,
                         "this ib_write_bw has no CUDA support (--use_cuda* unrecognized): GPUDirect RDMA cannot be "
                         "measured with it",
                         Verdict::skip));
      return;
    }
    observed = fmt::format("client {}; server {}", r ? r->describe() + ": " + util::last_lines(r->output, 2) : text,
                           s ? s->describe() + ": " + util::last_lines(s->output, 2) : s.error().message);
    hint = "is nvidia-peermem (or DMA-BUF) loaded and the port ACTIVE? `lsmod | grep peermem`, `ibstat " + dev + "`";
  } else if (gbps = parse_write_bw(r->output, kGdrMessage); !gbps) {
    observed = "no result row for 8388608 bytes: " + util::last_lines(r->output, 2);
    hint = "run the server and client by hand and read their output";
  } else if (*gbps < want) {
    observed = fmt::format("{} Gb/s ({})", number(*gbps), gpu.how);
    hint = fmt::format("GPU-to-HCA traffic is slow: `nvidia-smi topo -m`, the PCIe link of {} and its GPU "
                       "(`lspci -vv`), ACS and relaxed ordering; report the node (Azure: FaultCode NHC2003)",
                       dev);
  }
  const bool ok = observed.empty();
  if (ok) observed = fmt::format("{} Gb/s ({}{})", number(*gbps), gpu.how, numactl ? ", numactl" : "");
  Check c = make_check(id, 3, title, expected, observed, ok ? Verdict::pass : Verdict::fail, hint, source);
  c.value = gbps;
  c.threshold = want;
  rec.add(std::move(c));
}

void gdr_checks(Recorder& rec, const Expectations& e) {
  const auto& req = rec.request();
  const std::string title = "GPUDirect RDMA write bandwidth (ib_write_bw, GPU memory)";
  auto skip = [&](const std::string& expected, const std::string& why) {
    rec.add(make_check("ib.gdr_write_bw", 3, title, expected, why, Verdict::skip));
  };
  if (!e.ib_write_bw_gdr_gbps)
    return skip("no expectation published",
                fmt::format("no expectation published ({} has no checks.ib_write_bw_gdr_gbps)", e.size_file));
  const std::string expected = fmt::format(">= {} Gb/s per HCA", number(*e.ib_write_bw_gdr_gbps));
  if (!req.runner) return skip(expected, "no command runner");
  // The binary decides, not the plan's package list: DOCA-OFED's userland (which replaces the
  // distro's rdma-core stack) may carry perftest without the plan naming it.
  if (!req.fs->exists(kIbWriteBw))
    return skip(expected, fmt::format("{} is not there: {}", req.fs->display(kIbWriteBw).string(),
                                      plan_installs_perftest(*req.plan)
                                          ? "the plan's perftest package is not installed"
                                          : "perftest is not installed (the plan does not name it: install perftest, "
                                            "or DOCA-OFED's, built with CUDA)"));
  auto verbs = ibverbs::Verbs::load();
  auto ports = verbs ? verbs->ports() : Result<std::vector<ibverbs::PortInfo>>(std::unexpected(verbs.error()));
  if (!ports) return skip(expected, "no HCA listed: " + ports.error().message);
  std::vector<std::string> devices;
  for (const auto& p : *ports) {
    const bool named = std::find(req.ib_devices.begin(), req.ib_devices.end(), p.device) != req.ib_devices.end();
    if ((req.ib_devices.empty() ? p.infiniband() : named) &&
        std::find(devices.begin(), devices.end(), p.device) == devices.end())
      devices.push_back(p.device);
  }
  if (devices.empty()) return skip(expected, "no InfiniBand HCA listed by libibverbs");
  std::map<int, int> used;
  for (std::size_t i = 0; i < devices.size(); ++i)
    gdr_one(rec, e, devices[i], static_cast<int>(i), used);
}

} // namespace

AllReduceOutput parse_all_reduce(std::string_view output) {
  AllReduceOutput out;
  for (const std::string_view line : util::split(output, '\n')) {
    if (line.find("FAILED") != std::string_view::npos) out.failed_lines.emplace_back(util::trim(line));
    if (line.starts_with("#")) {
      const auto colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const auto key = util::trim(line.substr(1, colon - 1));
      const auto value = words(line.substr(colon + 1));
      if (key == "Out of bounds values" && !value.empty()) out.out_of_bounds = to_int(value[0]);
      if (key == "Avg bus bandwidth" && !value.empty()) out.avg_busbw = to_double(value[0]);
      continue;
    }
    // size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
    const auto w = words(line);
    if (w.size() < 13 || !to_int(w[0]) || !to_int(w[1])) continue;
    ++out.rows;
    for (std::size_t col : {7u, 11u})
      if (auto bw = to_double(w[col]); bw && (!out.max_busbw || *bw > *out.max_busbw)) out.max_busbw = bw;
    for (std::size_t col : {8u, 12u})
      if (auto n = to_double(w[col])) out.wrong += static_cast<long long>(*n);
  }
  return out;
}

std::optional<double> parse_write_bw(std::string_view output, std::uint64_t bytes) {
  bool gbits = false;
  for (const std::string_view line : util::split(output, '\n')) {
    if (line.find("#bytes") != std::string_view::npos) {
      gbits = line.find("BW average[Gb/sec]") != std::string_view::npos;
      continue;
    }
    const auto w = words(line);
    if (!gbits || w.size() < 5 || to_int(w[0]) != static_cast<long long>(bytes) || !to_int(w[1])) continue;
    if (auto avg = to_double(w[3])) return avg;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> nccl_size_bytes(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::uint64_t mult = 1;
  switch (text.back()) {
  case 'K':
  case 'k':
    mult = 1ull << 10;
    break;
  case 'M':
  case 'm':
    mult = 1ull << 20;
    break;
  case 'G':
  case 'g':
    mult = 1ull << 30;
    break;
  case 'T':
  case 't':
    mult = 1ull << 40;
    break;
  default:
    break;
  }
  const auto digits = mult == 1 ? text : text.substr(0, text.size() - 1);
  const auto n = to_int(std::string(digits));
  if (!n || *n == 0) return std::nullopt;
  return static_cast<std::uint64_t>(*n) * mult;
}

std::vector<PciPair> nearest_gpus(const std::vector<plan::PciTopologyEntry>& topology) {
  // One pairing rule for every check: the NIC under the same PCIe switch (topology.hpp).
  std::vector<PciPair> out;
  for (const auto& p : topology::gpu_hca_pairs(topology))
    if (!p.hca_bus_id.empty()) out.push_back({lower(p.hca_bus_id), lower(p.gpu_bus_id), p.numa});
  return out;
}

void load_checks(Recorder& rec, const Expectations& e) {
  nccl_check(rec, e);
  if (e.ib_ports > 0) gdr_checks(rec, e);
}

} // namespace hpcbake::verify
