// A Kubernetes node ready for NVIDIA's device plugin (the profile's `kubernetes` option):
// containerd's CRI plugin starts containers with the nvidia runtime by default and has CDI
// enabled (level 0, the config file), the CDI spec names every GPU of the size by index and the
// device nodes the plugin hands to containers are there (level 1, the booted VM).
// What the plugin needs: NVIDIA/k8s-device-plugin README.md "Prerequisites" and "Configure
// containerd" (nvidia-ctk runtime configure --runtime=containerd --set-as-default); the
// settings: NVIDIA/nvidia-container-toolkit@5e0421c pkg/config/engine/containerd/config.go.
#include "verify/checks.hpp"

#include "container/runtime.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>

namespace hpcbake::verify {

namespace {

constexpr const char* kSource = "the plan's container-runtime step (the profile's kubernetes option)";
constexpr const char* kConfigure = "hpcbake install --resume, or: nvidia-ctk runtime configure --runtime=containerd "
                                   "--set-as-default --cdi.enabled && systemctl restart containerd";

std::string containerd_config(const Expectations& e) {
  for (const auto& [engine, config] : e.container_engines)
    if (engine == "containerd") return config;
  return container::default_config(container::Engine::containerd);
}

// The runtime and CDI in containerd's CRI config; the spec directories it reads (or nullopt).
std::optional<std::vector<std::string>> config_checks(Recorder& rec, const Expectations& e) {
  const auto& fs = *rec.request().fs;
  const std::string config = containerd_config(e);
  const std::string want_rt = fmt::format("default_runtime_name = \"{}\"", e.container_runtime);
  auto both_fail = [&](const std::string& observed, const std::string& hint) {
    rec.add(make_check("container.k8s.default_runtime", 0, "containerd's default runtime", want_rt, observed,
                       Verdict::fail, hint, kSource));
    rec.add(make_check("container.k8s.cdi_enabled", 0, "CDI in containerd's CRI plugin", "enable_cdi = true", observed,
                       Verdict::fail, hint, kSource));
  };
  const auto text = fs.read(config, util::host_file::config);
  if (!text) {
    both_fail(fmt::format("{} does not exist", config), kConfigure);
    return std::nullopt;
  }
  auto cri = container::containerd_cri(*text, config);
  if (!cri) {
    both_fail(cri.error().message, cri.error().hint);
    return std::nullopt;
  }
  const bool rt_ok = cri->default_runtime == e.container_runtime;
  rec.add(make_check("container.k8s.default_runtime", 0, "containerd's default runtime", want_rt,
                     fmt::format("{} ({}, [{}.containerd])", cri->default_runtime,
                                 cri->default_runtime_set ? config : "containerd's built-in default", cri->cri),
                     rt_ok ? Verdict::pass : Verdict::fail,
                     rt_ok ? ""
                           : fmt::format("pods without a RuntimeClass run {} and see no GPU: {} (or give pods "
                                         "runtimeClassName: nvidia, packaging/kubernetes/runtimeclass-nvidia.yaml)",
                                         cri->default_runtime, kConfigure),
                     kSource));
  const bool cdi_ok = cri->enable_cdi == true;
  rec.add(make_check("container.k8s.cdi_enabled", 0, "CDI in containerd's CRI plugin", "enable_cdi = true",
                     fmt::format("enable_cdi = {} ({}, [{}])",
                                 cri->enable_cdi ? (*cri->enable_cdi ? "true" : "false") : "unset (false)", config,
                                 cri->cri),
                     cdi_ok ? Verdict::pass : Verdict::fail, cdi_ok ? "" : kConfigure, kSource));
  return cri->cdi_spec_dirs.empty() ? std::vector<std::string>{"/etc/cdi", "/var/run/cdi"} : cri->cdi_spec_dirs;
}

// Every GPU of the size named by index (nvidia.com/gpu=0 .. N-1) in a spec containerd reads.
void spec_check(Recorder& rec, const Expectations& e, const std::vector<std::string>& dirs) {
  const auto& fs = *rec.request().fs;
  const std::string id = "container.k8s.cdi_gpus", title = "GPUs the CDI spec names";
  const std::string want = fmt::format("nvidia.com/gpu=0..{}", e.gpu_count - 1);
  std::set<int> named;
  std::vector<std::string> read;
  for (const auto& dir : dirs)
    for (const auto& name : fs.list(dir)) {
      if (!name.ends_with(".yaml") && !name.ends_with(".json")) continue;
      const std::string path = dir + "/" + name;
      const auto text = fs.read(path, util::host_file::config);
      if (!text) continue;
      try {
        const YAML::Node doc = YAML::Load(*text); // JSON is YAML
        if (!doc["kind"] || doc["kind"].as<std::string>() != "nvidia.com/gpu") continue;
        read.push_back(path);
        for (const auto& d : doc["devices"]) {
          const std::string n = d["name"] ? d["name"].as<std::string>() : "";
          if (!n.empty() && std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
              n.size() < 6)
            named.insert(std::stoi(n));
        }
      } catch (const YAML::Exception& ex) {
        rec.add(make_check(id, 1, title, want, fmt::format("{} is not YAML: {}", path, ex.what()), Verdict::fail,
                           "regenerate it: systemctl restart nvidia-cdi-refresh.service", e.size_file + " gpu.count"));
        return;
      }
    }
  std::vector<std::string> missing;
  for (int i = 0; i < e.gpu_count; ++i)
    if (!named.count(i)) missing.push_back(std::to_string(i));
  const bool ok = !read.empty() && missing.empty();
  const std::string observed = read.empty()
                                   ? fmt::format("no nvidia.com/gpu spec in {}", util::join(dirs, " or "))
                                   : fmt::format("{} GPUs named ({}){}", named.size(), util::join(read, ", "),
                                                 missing.empty() ? "" : "; missing " + util::join(missing, ", "));
  rec.add(make_check(id, 1, title, want, observed, ok ? Verdict::pass : Verdict::fail,
                     ok ? ""
                        : "the device plugin's CDI strategy hands out nvidia.com/gpu=<index>: systemctl restart "
                          "nvidia-cdi-refresh.service (writes /var/run/cdi/nvidia.yaml), and see its journal",
                     e.size_file + " gpu.count"));
}

// The device nodes a GPU container gets: one per GPU, the control and UVM devices.
void device_check(Recorder& rec, const Expectations& e) {
  const auto& fs = *rec.request().fs;
  std::vector<std::string> want, missing;
  for (int i = 0; i < e.gpu_count; ++i)
    want.push_back(fmt::format("/dev/nvidia{}", i));
  want.insert(want.end(), {"/dev/nvidiactl", "/dev/nvidia-uvm"});
  for (const auto& dev : want)
    if (!fs.exists(dev)) missing.push_back(dev);
  const bool ok = missing.empty();
  rec.add(make_check("container.k8s.devices", 1, "GPU device nodes",
                     fmt::format("/dev/nvidia0..{}, /dev/nvidiactl, /dev/nvidia-uvm", e.gpu_count - 1),
                     ok ? fmt::format("{} present", want.size()) : "missing " + util::join(missing, ", "),
                     ok ? Verdict::pass : Verdict::fail,
                     ok ? ""
                        : "the driver is not loaded or the nodes were not made: nvidia-smi (creates the GPU "
                          "nodes), nvidia-modprobe -u -c=0 (creates /dev/nvidia-uvm); see dmesg",
                     e.size_file + " gpu.count"));
}

} // namespace

void kubernetes_checks(Recorder& rec, const Expectations& e, int level) {
  const auto dirs = config_checks(rec, e);
  if (level < 1 || !e.nvidia || e.gpu_count < 1) return;
  spec_check(rec, e, dirs.value_or(std::vector<std::string>{"/etc/cdi", "/var/run/cdi"}));
  device_check(rec, e);
}

} // namespace hpcbake::verify
