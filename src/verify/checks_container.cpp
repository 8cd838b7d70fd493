// The container level: the NVIDIA runtime in each engine's configuration (level 0), the CDI
// specification naming every GPU the size promises, and a container that sees them (level 1).
#include "verify/checks.hpp"

#include "container/runtime.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <chrono>

namespace hpcbake::verify {

namespace {

// Where nvidia-ctk writes the spec (nvidia-cdi-refresh: /var/run/cdi), then the static location.
constexpr const char* kCdiSpecs[] = {"/var/run/cdi/nvidia.yaml", "/etc/cdi/nvidia.yaml"};

bool all_digits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// The GPUs a CDI spec names by index ("nvidia.com/gpu=0" ...), not counting "all" and UUID names.
void cdi_check(Recorder& rec, const Expectations& e) {
  const auto& fs = *rec.request().fs;
  for (const char* path : kCdiSpecs) {
    const auto text = fs.read(path, util::host_file::config);
    if (!text) continue;
    int gpus = 0;
    std::string kind;
    try {
      const YAML::Node doc = YAML::Load(*text);
      kind = doc["kind"] ? doc["kind"].as<std::string>() : "";
      for (const auto& d : doc["devices"])
        if (d["name"] && all_digits(d["name"].as<std::string>())) ++gpus;
    } catch (const YAML::Exception& ex) {
      rec.add(make_check("container.cdi", 1, "CDI specification", fmt::format("{} GPUs", e.gpu_count),
                         fmt::format("{} is not YAML: {}", path, ex.what()), Verdict::fail,
                         "regenerate it: systemctl restart nvidia-cdi-refresh.service", e.size_file + " gpu.count"));
      return;
    }
    const bool ok = kind == "nvidia.com/gpu" && gpus == e.gpu_count;
    rec.add(make_check("container.cdi", 1, "CDI specification", fmt::format("{} GPUs (nvidia.com/gpu)", e.gpu_count),
                       fmt::format("{} GPUs, kind {} ({})", gpus, kind.empty() ? "none" : kind, path),
                       ok ? Verdict::pass : Verdict::fail,
                       ok ? ""
                          : "the spec names other GPUs than this VM's (made on another VM?): systemctl restart "
                            "nvidia-cdi-refresh.service",
                       e.size_file + " gpu.count"));
    return;
  }
  rec.add(make_check("container.cdi", 1, "CDI specification", fmt::format("{} GPUs (nvidia.com/gpu)", e.gpu_count),
                     "no spec in /var/run/cdi or /etc/cdi", Verdict::fail,
                     "nvidia-cdi-refresh.service writes it at boot once the driver is loaded: systemctl start "
                     "nvidia-cdi-refresh.service, and see its journal",
                     e.size_file + " gpu.count"));
}

// `docker run --gpus all IMAGE nvidia-smi -L`: the GPUs a container sees, where an engine and the
// image are here. Never pulls: the image must be present locally.
void docker_run_check(Recorder& rec, const Expectations& e) {
  const auto& req = rec.request();
  const std::string id = "container.docker.gpus";
  const std::string title = "GPUs a container sees (docker --gpus all)";
  const std::string want = std::to_string(e.gpu_count);
  auto skip = [&](const std::string& why) { rec.add(make_check(id, 1, title, want, why, Verdict::skip)); };
  if (req.container_image.empty())
    return skip("no --container-image given (an image with nvidia-smi, present locally)");
  if (!req.runner) return skip("no command runner");
  if (!req.fs->is_real_root()) return skip("--root is not /: the engine that runs is this machine's");
  exec::Command inspect;
  inspect.argv = {"docker", "image", "inspect", "--format", "{{.Id}}", req.container_image};
  inspect.timeout = std::chrono::seconds(30);
  auto have = req.runner->run(inspect);
  if (!have) return skip(fmt::format("docker cannot be run: {}", have.error().message));
  if (!have->ok()) return skip(fmt::format("{} is not present locally (verify never pulls)", req.container_image));
  exec::Command run;
  run.argv = {"docker", "run", "--rm", "--gpus", "all", req.container_image, "nvidia-smi", "-L"};
  run.timeout = std::chrono::seconds(120);
  auto r = req.runner->run(run);
  if (!r || !r->ok()) {
    rec.add(make_check(
        id, 1, title, want,
        r ? fmt::format("{}: {}", exec::shell_quote(run.argv), util::last_lines(r->output, 3)) : r.error().message,
        Verdict::fail, "check the runtime: `hpcbake container status`, `docker info`, the daemon's journal",
        e.size_file + " gpu.count"));
    return;
  }
  const int gpus = listed_gpus(r->output);
  rec.add(make_check(id, 1, title, want, fmt::format("{} (nvidia-smi -L in {})", gpus, req.container_image),
                     gpus == e.gpu_count ? Verdict::pass : Verdict::fail,
                     gpus == e.gpu_count ? "" : "a container must see every GPU: check the CDI spec and the runtime",
                     e.size_file + " gpu.count"));
}

} // namespace

int listed_gpus(std::string_view out) {
  int gpus = 0;
  for (std::size_t pos = 0; pos < out.size();) {
    const auto nl = out.find('\n', pos);
    if (out.substr(pos).starts_with("GPU ")) ++gpus;
    pos = nl == std::string_view::npos ? out.size() : nl + 1;
  }
  return gpus;
}

void container_checks(Recorder& rec, const Expectations& e, int level) {
  const auto& fs = *rec.request().fs;
  for (const auto& [name, config] : e.container_engines) {
    const auto engine = container::parse_engine(name);
    if (!engine) continue;
    const container::Runtime rt{e.container_runtime, e.container_binary};
    auto s = container::status(fs, *engine, rt, config);
    const std::string expected = fmt::format("runtime {} = {}", rt.name, rt.binary);
    if (!s) {
      rec.add(make_check(fmt::format("container.{}.runtime", name), 0, fmt::format("{} runtime", name), expected,
                         s.error().message, Verdict::fail, s.error().hint, "the plan's container-runtime step"));
      continue;
    }
    rec.add(make_check(fmt::format("container.{}.runtime", name), 0, fmt::format("{} runtime", name), expected,
                       s->detail, s->configured ? Verdict::pass : Verdict::fail,
                       s->configured ? "" : fmt::format("hpcbake container configure --engine {}", name),
                       "the plan's container-runtime step"));
  }
  if (level < 1 || !e.nvidia || e.container_engines.empty()) return;
  cdi_check(rec, e);
  if (std::any_of(e.container_engines.begin(), e.container_engines.end(),
                  [](const auto& x) { return x.first == "docker"; }))
    docker_run_check(rec, e);
  podman_run_check(rec, e);
}

} // namespace hpcbake::verify
