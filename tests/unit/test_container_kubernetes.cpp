// containerd for a Kubernetes node (the profile's `kubernetes` option): the nvidia runtime made
// containerd's default and CDI enabled in its CRI plugin, as
// `nvidia-ctk runtime configure --runtime=containerd --set-as-default --cdi.enabled` sets them
// (NVIDIA/nvidia-container-toolkit@5e0421cedf78ca25c7a9a6d8cf37cfee403fae53
// pkg/config/engine/containerd/config.go: AddRuntime's default_runtime_name, EnableCDI's
// enable_cdi), as edits that keep every other byte of the file.
#include "container/runtime.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;
using namespace hpcbake::container;

namespace {

Runtime k8s() {
  Runtime rt;
  rt.set_as_default = true;
  rt.enable_cdi = true;
  return rt;
}

std::string default_containerd() {
  const auto t = test::slurp(test::fixtures() / "reference" / "containerd-config-default.toml.1.6.20");
  REQUIRE_MESSAGE(t.find("default_runtime_name = \"runc\"") != std::string::npos, "fixture missing");
  return t;
}

} // namespace

TEST_CASE("kubernetes: containerd's default config gets default_runtime_name and enable_cdi in place") {
  const auto in = default_containerd();
  auto e = edit_containerd(in, k8s(), "config.toml");
  REQUIRE(e);
  REQUIRE(e->changed);
  CHECK(e->text.find("default_runtime_name = \"nvidia\"") != std::string::npos);
  CHECK(e->text.find("default_runtime_name = \"runc\"") == std::string::npos);
  // containerd 1.6's default config has no enable_cdi: added under the CRI plugin's own header.
  CHECK(e->text.find("[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n") != std::string::npos);
  auto cri = containerd_cri(e->text, "config.toml");
  REQUIRE(cri);
  CHECK(cri->default_runtime == "nvidia");
  CHECK(cri->default_runtime_set);
  CHECK(cri->enable_cdi == true);
  CHECK(cri->cri == "plugins.\"io.containerd.grpc.v1.cri\"");
  // The runtime is there as without the option; a second run changes nothing.
  CHECK(containerd_runtime(e->text, "nvidia", "c")->value_or("") == "/usr/bin/nvidia-container-runtime");
  auto again = edit_containerd(e->text, k8s(), "config.toml");
  REQUIRE(again);
  CHECK_FALSE(again->changed);
  // Without the option the same file is edited as before: runc stays the default, CDI untouched.
  auto plain = edit_containerd(in, Runtime{}, "config.toml");
  REQUIRE(plain);
  auto plain_cri = containerd_cri(plain->text, "c");
  REQUIRE(plain_cri);
  CHECK(plain_cri->default_runtime == "runc");
  CHECK_FALSE(plain_cri->enable_cdi.has_value());
  // Byte for byte, the option's edit is the plain edit plus its two values.
  std::string back = e->text;
  const std::string cdi_line = "  enable_cdi = true\n";
  back.erase(back.find(cdi_line), cdi_line.size());
  const auto v = back.find("default_runtime_name = \"nvidia\"");
  back.replace(v, 31, "default_runtime_name = \"runc\"");
  CHECK(back == plain->text);
}

TEST_CASE("kubernetes: a file without the tables gets them appended, parents first, for each config version") {
  auto v2 = edit_containerd("version = 2\n", k8s(), "c");
  REQUIRE(v2);
  CHECK(v2->text == "version = 2\n"
                    "\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_cdi = true\n"
                    "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"nvidia\"\n"
                    "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
                    "  runtime_type = \"io.containerd.runc.v2\"\n"
                    "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n"
                    "  runtime_type = \"io.containerd.runc.v2\"\n"
                    "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\n"
                    "  BinaryName = \"/usr/bin/nvidia-container-runtime\"\n");
  // containerd 2's version 3: the CRI runtime plugin is io.containerd.cri.v1.runtime
  // (containerd/containerd@f7e5f7ea4ea92d7bb68419bd1b5bc356e8ae7707 docs/cri/config.md).
  auto v3 = edit_containerd("version = 3\n", k8s(), "c");
  REQUIRE(v3);
  CHECK(v3->text.find("[plugins.\"io.containerd.cri.v1.runtime\"]\n  enable_cdi = true\n") != std::string::npos);
  CHECK(v3->text.find("[plugins.\"io.containerd.cri.v1.runtime\".containerd]\n  default_runtime_name = \"nvidia\"\n") !=
        std::string::npos);
  auto v1 = edit_containerd("[plugins.cri]\n  sandbox_image = \"pause\"\n", k8s(), "c");
  REQUIRE(v1);
  CHECK(v1->text.starts_with("[plugins.cri]\n  enable_cdi = true\n  sandbox_image = \"pause\"\n"));
  CHECK(v1->text.find("[plugins.cri.containerd]\n  default_runtime_name = \"nvidia\"\n") != std::string::npos);
  auto cri = containerd_cri(v1->text, "c");
  REQUIRE(cri);
  CHECK(cri->default_runtime == "nvidia");
}

TEST_CASE("kubernetes: values set in place keep comments and line ends, other forms are refused") {
  const std::string in = "version = 2\r\n[plugins.'io.containerd.grpc.v1.cri']\r\n"
                         "  enable_cdi = false # off for now\r\n"
                         "  cdi_spec_dirs = ['/etc/cdi', \"/var/run/cdi\"]\r\n"
                         "[plugins.'io.containerd.grpc.v1.cri'.containerd]\r\n"
                         "  snapshotter = 'overlayfs'\r\n";
  auto e = edit_containerd(in, k8s(), "c");
  REQUIRE(e);
  CHECK(e->text.starts_with("version = 2\r\n[plugins.'io.containerd.grpc.v1.cri']\r\n"
                            "  enable_cdi = true # off for now\r\n"
                            "  cdi_spec_dirs = ['/etc/cdi', \"/var/run/cdi\"]\r\n"
                            "[plugins.'io.containerd.grpc.v1.cri'.containerd]\r\n"
                            "  default_runtime_name = \"nvidia\"\r\n"
                            "  snapshotter = 'overlayfs'\r\n"));
  CHECK(e->what.find("set enable_cdi (was false)") != std::string::npos);
  auto cri = containerd_cri(e->text, "c");
  REQUIRE(cri);
  CHECK(cri->cdi_spec_dirs == std::vector<std::string>{"/etc/cdi", "/var/run/cdi"});
  // A dotted key would be written twice (invalid TOML): refused, saying which.
  auto dotted = edit_containerd("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n"
                                "  containerd.default_runtime_name = \"runc\"\n",
                                k8s(), "config.toml");
  REQUIRE_FALSE(dotted);
  CHECK(dotted.error().message.find("default_runtime_name is set as `containerd.default_runtime_name = ...`") !=
        std::string::npos);
  auto under = edit_containerd("version = 2\n[plugins]\n  \"io.containerd.grpc.v1.cri\".enable_cdi = false\n", k8s(),
                               "config.toml");
  REQUIRE_FALSE(under);
  CHECK(
      under.error().message.find("hpcbake edits only `enable_cdi = ...` in the [plugins.\"io.containerd.grpc.v1.cri\"] "
                                 "table") != std::string::npos);
  // The CRI plugin as an inline table holds the runtime too: refused as without the option.
  auto inl = edit_containerd("version = 2\n[plugins]\n  \"io.containerd.grpc.v1.cri\" = { enable_cdi = false }\n",
                             k8s(), "config.toml");
  REQUIRE_FALSE(inl);
  CHECK(inl.error().message.find("hpcbake edits only") != std::string::npos);
  // Without the option neither form is looked at.
  CHECK(edit_containerd("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n"
                        "  containerd.default_runtime_name = \"runc\"\n",
                        Runtime{}, "c"));
}

TEST_CASE("kubernetes: containerd_cri reads containerd's defaults when the file says nothing") {
  auto cri = containerd_cri("version = 3\n", "c");
  REQUIRE(cri);
  CHECK(cri->default_runtime == "runc");
  CHECK_FALSE(cri->default_runtime_set);
  CHECK_FALSE(cri->enable_cdi.has_value());
  CHECK(cri->cdi_spec_dirs.empty());
  CHECK(cri->cri == "plugins.\"io.containerd.cri.v1.runtime\"");
  CHECK_FALSE(containerd_cri("version = 2\n[plugins\n", "c"));
}
