// The container level's run through CDI: podman (daemonless, the engine EL distros ship) starts
// the image with `--device nvidia.com/gpu=all`, the fully qualified CDI name of every GPU in the
// spec nvidia-cdi-refresh writes (/var/run/cdi/nvidia.yaml; podman reads /etc/cdi and
// /var/run/cdi), and runs `nvidia-smi -L` inside it: the GPUs a container sees. Podman needs no
// runtime configuration for CDI, so hpcbake writes none for it (docs/containers.md, "A container
// that runs here"). Sources: NVIDIA's "Support for Container Device Interface"
// (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/cdi-support.html:
// `podman run --rm --device nvidia.com/gpu=all ... nvidia-smi -L`), the CDI spec dirs
// (cncf-tags/container-device-interface@3dfdac42b4f7e3e6b72ab664db019a9c68065a49 README.md,
// "How does CDI work?").
// Never pulls: the image must be in podman's local storage.
#include "verify/checks.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <chrono>

namespace hpcbake::verify {

void podman_run_check(Recorder& rec, const Expectations& e) {
  const auto& req = rec.request();
  const std::string id = "container.podman.gpus";
  const std::string title = "GPUs a container sees (podman --device nvidia.com/gpu=all)";
  const std::string want = std::to_string(e.gpu_count);
  auto skip = [&](const std::string& why) { rec.add(make_check(id, 1, title, want, why, Verdict::skip)); };
  if (req.container_image.empty())
    return skip("no --container-image given (an image present in podman's local storage)");
  if (!req.runner) return skip("no command runner");
  if (!req.fs->is_real_root()) return skip("--root is not /: the engine that runs is this machine's");
  exec::Command exists;
  exists.argv = {"podman", "image", "exists", req.container_image};
  exists.timeout = std::chrono::seconds(30);
  auto have = req.runner->run(exists);
  if (!have) return skip(fmt::format("podman cannot be run: {}", have.error().message));
  if (!have->ok())
    return skip(fmt::format("{} is not in podman's local storage (verify never pulls)", req.container_image));
  // No network: the probe needs none, and a host without a container network backend still runs it.
  exec::Command run;
  run.argv = {"podman",     "run", "--rm", "--network=none", "--device", "nvidia.com/gpu=all", req.container_image,
              "nvidia-smi", "-L"};
  run.timeout = std::chrono::seconds(120);
  auto r = req.runner->run(run);
  if (!r || !r->ok()) {
    rec.add(make_check(
        id, 1, title, want,
        r ? fmt::format("{}: {}", exec::shell_quote(run.argv), util::last_lines(r->output, 3)) : r.error().message,
        Verdict::fail,
        "podman finds the GPUs in the CDI spec (/var/run/cdi/nvidia.yaml, /etc/cdi): nvidia-ctk cdi list, "
        "systemctl restart nvidia-cdi-refresh.service; then podman's message above",
        e.size_file + " gpu.count"));
    return;
  }
  const int gpus = listed_gpus(r->output);
  rec.add(make_check(id, 1, title, want, fmt::format("{} (nvidia-smi -L in {})", gpus, req.container_image),
                     gpus == e.gpu_count ? Verdict::pass : Verdict::fail,
                     gpus == e.gpu_count ? ""
                                         : "a container must see every GPU: the CDI spec names fewer (nvidia-ctk cdi "
                                           "list) or the driver sees fewer (nvidia-smi -L on the host)",
                     e.size_file + " gpu.count"));
}

} // namespace hpcbake::verify
