// verify's podman run through CDI (src/verify/checks_container_run.cpp), with a recording runner:
// what it skips, the command it runs, and how it reads `nvidia-smi -L`. The real podman run is
// tests/container/test_podman_cdi.py.
#include "verify/checks.hpp"

#include "recording_runner.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace hpcbake;

namespace {

struct Run {
  exec::RecordingRunner runner;
  util::HostFs fs{"/"};
  verify::VerifyRequest rq;
  verify::Report report;
  verify::Expectations e;
  Run() {
    rq.runner = &runner;
    rq.fs = &fs;
    rq.container_image = "localhost/probe:1";
    e.gpu_count = 8;
    e.size_file = "sizes/nd96isr_h100_v5.yaml";
  }
  const verify::Check& check() {
    verify::Recorder rec(rq, report);
    verify::podman_run_check(rec, e);
    REQUIRE(report.checks.size() == 1);
    CHECK(report.checks.front().id == "container.podman.gpus");
    return report.checks.front();
  }
};

std::string gpu_lines(int n) {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += "GPU " + std::to_string(i) + ": Fake H100 80GB HBM3 (UUID: GPU-" + std::to_string(i) + ")\n";
  return out + "nvml_probe: NVML reports " + std::to_string(n) + " GPUs\n";
}

} // namespace

TEST_CASE("verify podman: the image runs with every CDI GPU and nvidia-smi -L, never pulled") {
  Run r;
  r.runner.on({"podman", "run"}, exec::exited(0, gpu_lines(8)));
  const auto& c = r.check();
  CHECK(c.verdict == verify::Verdict::pass);
  CHECK(c.observed == "8 (nvidia-smi -L in localhost/probe:1)");
  CHECK(c.source == "sizes/nd96isr_h100_v5.yaml gpu.count");
  REQUIRE(r.runner.calls.size() == 2);
  CHECK(r.runner.calls[0].argv == std::vector<std::string>{"podman", "image", "exists", "localhost/probe:1"});
  CHECK(r.runner.calls[1].argv == std::vector<std::string>{"podman", "run", "--rm", "--network=none", "--device",
                                                           "nvidia.com/gpu=all", "localhost/probe:1", "nvidia-smi",
                                                           "-L"});
}

TEST_CASE("verify podman: fewer GPUs in the container than the size has fail, with a hint") {
  Run r;
  r.runner.on({"podman", "run"}, exec::exited(0, gpu_lines(6)));
  const auto& c = r.check();
  CHECK(c.verdict == verify::Verdict::fail);
  CHECK(c.observed == "6 (nvidia-smi -L in localhost/probe:1)");
  CHECK(c.hint.find("nvidia-ctk cdi list") != std::string::npos);
}

TEST_CASE("verify podman: podman refusing the CDI device fails with its message and where the spec goes") {
  Run r;
  r.runner.on({"podman", "run"},
              exec::exited(126, "Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all\n"));
  const auto& c = r.check();
  CHECK(c.verdict == verify::Verdict::fail);
  CHECK(c.observed.find("unresolvable CDI devices nvidia.com/gpu=all") != std::string::npos);
  CHECK(c.hint.find("/var/run/cdi/nvidia.yaml") != std::string::npos);
}

TEST_CASE("verify podman: skipped without an image, under a fixture root, or when the image is not local") {
  SUBCASE("no --container-image") {
    Run r;
    r.rq.container_image.clear();
    CHECK(r.check().verdict == verify::Verdict::skip);
    CHECK(r.runner.calls.empty());
  }
  SUBCASE("a fixture root: the engine that would run is this machine's") {
    Run r;
    util::HostFs fixture{"/nonexistent-fixture-root"};
    r.rq.fs = &fixture;
    const auto& c = r.check();
    CHECK(c.verdict == verify::Verdict::skip);
    CHECK(c.observed.find("--root is not /") != std::string::npos);
    CHECK(r.runner.calls.empty());
  }
  SUBCASE("not in podman's storage: never pulled, never run") {
    Run r;
    r.runner.on({"podman", "image", "exists"}, exec::exited(1, ""));
    const auto& c = r.check();
    CHECK(c.verdict == verify::Verdict::skip);
    CHECK(c.observed == "localhost/probe:1 is not in podman's local storage (verify never pulls)");
    CHECK(r.runner.calls.size() == 1);
  }
}
