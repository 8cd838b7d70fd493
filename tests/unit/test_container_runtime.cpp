#include "container/runtime.hpp"

#include "util/hostfs.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <sys/stat.h>

namespace fs = std::filesystem;
using namespace hpcbake;
using namespace hpcbake::container;
using json = nlohmann::json;

namespace {

const Runtime kRt{};

std::string debian_containerd() {
  const auto t = test::slurp(test::fixtures() / "reference" / "containerd-config.toml.debian-1.6.20");
  REQUIRE_MESSAGE(t.find("[plugins.\"io.containerd.grpc.v1.cri\".cni]") != std::string::npos, "fixture missing");
  return t;
}

std::string default_containerd() {
  const auto t = test::slurp(test::fixtures() / "reference" / "containerd-config-default.toml.1.6.20");
  REQUIRE_MESSAGE(t.find("SystemdCgroup = false") != std::string::npos, "fixture missing");
  return t;
}

} // namespace

TEST_CASE("docker: runtimes.nvidia is added first, every other byte kept") {
  const std::string in = "{\n    \"log-driver\": \"json-file\",\n    \"data-root\": \"/mnt/docker\" // no\n}\n";
  // Not JSON (a comment): refused with where it broke, as dockerd would refuse it.
  auto bad = edit_docker(in, kRt, "daemon.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("daemon.json: not valid JSON") != std::string::npos);

  const std::string ok = "{\n    \"log-driver\": \"json-file\",\n    \"data-root\": \"/mnt/docker\"\n}\n";
  auto e = edit_docker(ok, kRt, "daemon.json");
  REQUIRE(e);
  CHECK(e->changed);
  CHECK(e->text == "{\n    \"runtimes\": {\n        \"nvidia\": {\n            \"args\": [],\n            \"path\": "
                   "\"/usr/bin/nvidia-container-runtime\"\n        }\n    },\n    \"log-driver\": \"json-file\",\n    "
                   "\"data-root\": \"/mnt/docker\"\n}\n");
  // Idempotent: the edited text is left as it is.
  auto again = edit_docker(e->text, kRt, "daemon.json");
  REQUIRE(again);
  CHECK_FALSE(again->changed);
  CHECK(again->text == e->text);
  auto rt = docker_runtime(e->text, "nvidia", "daemon.json");
  REQUIRE(rt);
  CHECK(rt->value_or("") == "/usr/bin/nvidia-container-runtime");
}

TEST_CASE("docker: other runtimes stay, a stale nvidia entry is replaced in place, one-line files stay one line") {
  const std::string in = R"({"runtimes":{"crun":{"path":"/usr/bin/crun"}},"default-runtime":"runc"})";
  auto e = edit_docker(in, kRt, "d");
  REQUIRE(e);
  CHECK(
      e->text ==
      R"({"runtimes":{"nvidia":{"args":[],"path":"/usr/bin/nvidia-container-runtime"},"crun":{"path":"/usr/bin/crun"}},"default-runtime":"runc"})");
  const std::string stale =
      "{\n  \"runtimes\": {\n    \"nvidia\": {\"path\": \"/opt/old/nvidia-container-runtime\"}\n  }\n}";
  auto r = edit_docker(stale, kRt, "d");
  REQUIRE(r);
  CHECK(r->what.find("replaced runtimes.nvidia") != std::string::npos);
  CHECK(json::parse(r->text)["runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime");
  CHECK(r->text.ends_with("\n  }\n}")); // no newline at the end stays so
  // An empty file and "{}" become a document holding the runtime.
  for (const std::string t : {"", "  \n", "{}"}) {
    auto n = edit_docker(t, kRt, "d");
    REQUIRE(n);
    CHECK(json::parse(n->text) ==
          json::parse(R"({"runtimes":{"nvidia":{"args":[],"path":"/usr/bin/nvidia-container-runtime"}}})"));
  }
  auto arr = edit_docker("[1]", kRt, "d");
  REQUIRE_FALSE(arr);
  CHECK(arr.error().message.find("not a JSON object") != std::string::npos);
  auto notobj = edit_docker(R"({"runtimes": null})", kRt, "d");
  REQUIRE_FALSE(notobj);
  CHECK(notobj.error().message.find("\"runtimes\" is not an object") != std::string::npos);
}

TEST_CASE("containerd: Debian's shipped config gets the two tables appended, nothing else touched") {
  const auto in = debian_containerd();
  auto e = edit_containerd(in, kRt, "config.toml");
  REQUIRE(e);
  REQUIRE(e->changed);
  CHECK(e->text.starts_with(in));
  // runc too: a runtimes table replaces containerd's built-in map, and the CRI plugin refuses to
  // load without its default runtime (seen with containerd 1.6.20).
  CHECK(
      e->text.substr(in.size()) ==
      "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n"
      "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n  runtime_type = "
      "\"io.containerd.runc.v2\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\n  "
      "BinaryName = \"/usr/bin/nvidia-container-runtime\"\n");
  auto again = edit_containerd(e->text, kRt, "config.toml");
  REQUIRE(again);
  CHECK_FALSE(again->changed);
  auto rt = containerd_runtime(e->text, "nvidia", "config.toml");
  REQUIRE(rt);
  CHECK(rt->value_or("") == "/usr/bin/nvidia-container-runtime");
}

TEST_CASE("containerd: the default config's SystemdCgroup is carried over, version 1 and 3 name their CRI plugin") {
  auto e = edit_containerd(default_containerd(), kRt, "c");
  REQUIRE(e);
  CHECK(e->text.ends_with("BinaryName = \"/usr/bin/nvidia-container-runtime\"\n  SystemdCgroup = false\n"));
  auto v1 = edit_containerd("[plugins.cri]\n  sandbox_image = \"pause\"\n", kRt, "c");
  REQUIRE(v1);
  CHECK(v1->text.find("[plugins.cri.containerd.runtimes.nvidia]\n") != std::string::npos);
  auto v3 = edit_containerd("version = 3\n", kRt, "c");
  REQUIRE(v3);
  CHECK(v3->text.find("[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]\n") !=
        std::string::npos);
  auto empty = edit_containerd("", kRt, "c");
  REQUIRE(empty);
  CHECK(empty->text.starts_with("version = 2\n\n[plugins."));
}

TEST_CASE("containerd: existing tables get their values set in place, other forms and broken TOML are refused") {
  const std::string in = "version = 2\r\n[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.nvidia]\r\n"
                         "  runtime_type = 'io.containerd.runc.v1' # old\r\n"
                         "  privileged_without_host_devices = false\r\n"
                         "[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.nvidia.options]\r\n"
                         "  Root = \"\"\r\n";
  auto e = edit_containerd(in, kRt, "c");
  REQUIRE(e);
  CHECK(e->text == "version = 2\r\n[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.nvidia]\r\n"
                   "  runtime_type = \"io.containerd.runc.v2\" # old\r\n"
                   "  privileged_without_host_devices = false\r\n"
                   "[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.nvidia.options]\r\n"
                   "  BinaryName = \"/usr/bin/nvidia-container-runtime\"\r\n"
                   "  Root = \"\"\r\n"
                   "\r\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\r\n"
                   "  runtime_type = \"io.containerd.runc.v2\"\r\n");
  auto inl = edit_containerd("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes]\n"
                             "  nvidia = { runtime_type = \"io.containerd.runc.v2\" }\n",
                             kRt, "c");
  REQUIRE_FALSE(inl);
  CHECK(inl.error().message.find("hpcbake edits only the") != std::string::npos);
  auto broken = edit_containerd("version = 2\n[plugins\n", kRt, "config.toml");
  REQUIRE_FALSE(broken);
  CHECK(broken.error().message.find("config.toml:2: not TOML") != std::string::npos);
  // Arrays of tables repeat keys with other values (containerd 2's unpack_config): kept, counted.
  auto aot = edit_containerd("version = 3\n[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]\n"
                             "  platform = 'linux/amd64'\n"
                             "[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]\n"
                             "  platform = 'linux/arm64'\n",
                             kRt, "c");
  REQUIRE(aot);
  CHECK(aot->text.find("platform = 'linux/amd64'") != std::string::npos);
  // Multi-line strings and arrays that hold header-like lines are values, not tables.
  auto ml = edit_containerd("imports = [\n  \"/a.toml\",\n  [\"x\"],\n]\nnote = '''\n[plugins.fake]\n'''\n", kRt, "c");
  REQUIRE(ml);
  CHECK(ml->text.find("[plugins.cri.containerd.runtimes.nvidia]") != std::string::npos);
}

TEST_CASE("configure: through a symlink under the root, the original kept once, mode kept, status reads it back") {
  const auto root = test::scratch("container-configure");
  test::write(root / "etc/containerd/real.toml", debian_containerd());
  fs::create_symlink("/etc/containerd/real.toml", root / "etc/containerd/config.toml");
  ::chmod((root / "etc/containerd/real.toml").c_str(), 0600);
  util::HostFs host(root);
  auto before = status(host, Engine::containerd, kRt, "/etc/containerd/config.toml");
  REQUIRE(before);
  CHECK_FALSE(before->configured);
  auto c = configure(host, Engine::containerd, kRt, "/etc/containerd/config.toml");
  REQUIRE(c);
  CHECK(c->changed);
  CHECK(fs::is_symlink(root / "etc/containerd/config.toml"));
  CHECK(test::read(root / "etc/containerd/config.toml.hpcbake-orig") == debian_containerd());
  struct stat st {};
  REQUIRE(::stat((root / "etc/containerd/real.toml").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  auto after = status(host, Engine::containerd, kRt, "/etc/containerd/config.toml");
  REQUIRE(after);
  CHECK(after->configured);
  auto twice = configure(host, Engine::containerd, kRt, "/etc/containerd/config.toml");
  REQUIRE(twice);
  CHECK_FALSE(twice->changed);

  // A missing daemon.json is created; a broken one is refused and left as it was.
  auto d = configure(host, Engine::docker, kRt, "/etc/docker/daemon.json");
  REQUIRE(d);
  CHECK(d->created);
  CHECK_FALSE(fs::exists(root / "etc/docker/daemon.json.hpcbake-orig"));
  test::write(root / "etc/docker/daemon.json", "{\"a\": 1,}");
  auto broken = configure(host, Engine::docker, kRt, "/etc/docker/daemon.json");
  REQUIRE_FALSE(broken);
  CHECK(test::read(root / "etc/docker/daemon.json") == "{\"a\": 1,}");
  CHECK_FALSE(fs::exists(root / "etc/docker/daemon.json.hpcbake-orig"));
}
