// The InfiniBand HCAs' CDI spec (container/cdi_rdma.hpp) and Docker's default memlock
// (container::edit_docker_ulimit). The spec is parsed back with yaml-cpp and checked against CDI's
// rules (cncf-tags/container-device-interface@05ae4b5 SPEC.md); tests/cli/test_cli_verify_container_rdma.py
// validates it against CDI's published JSON schema.
#include "container/cdi_rdma.hpp"
#include "container/runtime.hpp"

#include "util/hostfs.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace fs = std::filesystem;
using namespace hpcbake;
using namespace hpcbake::container;
using json = nlohmann::json;

namespace {

// An HCA in sysfs with one port of `link_layer`, and its verbs (and MAD) devices.
void add_hca(const fs::path& root, const std::string& hca, const std::string& link_layer, int uverbs, int umad) {
  test::write(root / "sys/class/infiniband" / hca / "ports/1/link_layer", link_layer + "\n");
  test::write(root / "sys/class/infiniband_verbs" / ("uverbs" + std::to_string(uverbs)) / "ibdev", hca + "\n");
  test::write(root / "dev/infiniband" / ("uverbs" + std::to_string(uverbs)), "");
  if (umad < 0) return;
  for (const char* p : {"umad", "issm"}) {
    const std::string dev = p + std::to_string(umad);
    test::write(root / "sys/class/infiniband_mad" / dev / "ibdev", hca + "\n");
    test::write(root / "dev/infiniband" / dev, "");
  }
}

fs::path two_hcas(const std::string& name) {
  const auto root = test::scratch(name);
  add_hca(root, "mlx5_ib0", "InfiniBand", 0, 0);
  add_hca(root, "mlx5_ib1", "InfiniBand", 1, 1);
  add_hca(root, "mlx5_an0", "Ethernet", 2, -1); // Azure's accelerated networking VF
  test::write(root / "dev/infiniband/rdma_cm", "");
  return root;
}

} // namespace

TEST_CASE("cdi rdma: one device per InfiniBand HCA and all, rdma_cm for every one, the Ethernet VF left out") {
  const auto root = two_hcas("cdi-rdma-discover");
  util::HostFs host(root);
  const auto d = discover_rdma(host);
  REQUIRE(d.hcas.size() == 2);
  CHECK(d.hcas[0].name == "mlx5_ib0");
  CHECK(d.hcas[0].nodes ==
        std::vector<std::string>{"/dev/infiniband/uverbs0", "/dev/infiniband/umad0", "/dev/infiniband/issm0"});
  CHECK(d.hcas[1].nodes ==
        std::vector<std::string>{"/dev/infiniband/uverbs1", "/dev/infiniband/umad1", "/dev/infiniband/issm1"});
  CHECK(d.shared == std::vector<std::string>{"/dev/infiniband/rdma_cm"});
  REQUIRE(d.left_out.size() == 1);
  CHECK(d.left_out[0] == "mlx5_an0: link layer Ethernet, not InfiniBand");

  auto text = render_rdma_spec(d);
  REQUIRE(text);
  // Parsed back as a CDI consumer would: required fields, names by CDI's rules, the edits.
  const YAML::Node doc = YAML::Load(*text);
  CHECK(doc["cdiVersion"].as<std::string>() == "0.5.0");
  CHECK(doc["kind"].as<std::string>() == "hpcbake/rdma");
  REQUIRE(doc["devices"].IsSequence());
  REQUIRE(doc["devices"].size() == 3);
  CHECK(doc["devices"][0]["name"].as<std::string>() == "mlx5_ib0");
  CHECK(doc["devices"][2]["name"].as<std::string>() == "all");
  CHECK(doc["devices"][2]["containerEdits"]["deviceNodes"].size() == 6);
  CHECK(doc["containerEdits"]["deviceNodes"][0]["path"].as<std::string>() == "/dev/infiniband/rdma_cm");
  for (const auto& dev : doc["devices"]) {
    REQUIRE(dev["containerEdits"]);
    for (const auto& n : dev["containerEdits"]["deviceNodes"])
      CHECK(n["path"].as<std::string>().starts_with("/dev/infiniband/"));
  }
  auto back = read_rdma_spec(*text, "spec");
  REQUIRE(back);
  CHECK(back->kind == kRdmaCdiKind);
  CHECK(back->devices == std::vector<std::string>{"mlx5_ib0", "mlx5_ib1", "all"});
  CHECK(back->nodes.size() == 7); // rdma_cm once, and each HCA's three
}

TEST_CASE("cdi rdma: an HCA without its verbs device node is left out, saying why") {
  const auto root = two_hcas("cdi-rdma-no-node");
  fs::remove(root / "dev/infiniband/uverbs1");
  const auto d = discover_rdma(util::HostFs(root));
  REQUIRE(d.hcas.size() == 1);
  CHECK(d.hcas[0].name == "mlx5_ib0");
  REQUIRE(d.left_out.size() == 2);
  CHECK(d.left_out[1].starts_with("mlx5_ib1: no verbs device node"));
}

TEST_CASE("cdi rdma: written atomically once, unchanged the second time, dry run writes nothing") {
  const auto root = two_hcas("cdi-rdma-write");
  util::HostFs host(root);
  auto dry = write_rdma_spec(host, kRdmaCdiSpec, true);
  REQUIRE(dry);
  CHECK(dry->changed);
  CHECK_FALSE(fs::exists(root / "var/run/cdi/hpcbake-rdma.yaml"));
  auto w = write_rdma_spec(host, kRdmaCdiSpec, false);
  REQUIRE(w);
  CHECK(w->changed);
  CHECK(test::read(root / "var/run/cdi/hpcbake-rdma.yaml") == w->text);
  CHECK(w->text == dry->text);
  auto again = write_rdma_spec(host, kRdmaCdiSpec, false);
  REQUIRE(again);
  CHECK_FALSE(again->changed);
}

TEST_CASE("cdi rdma: no HCA is an error, and a spec of another boot is removed") {
  const auto root = two_hcas("cdi-rdma-none");
  util::HostFs host(root);
  REQUIRE(write_rdma_spec(host, kRdmaCdiSpec, false));
  fs::remove_all(root / "sys/class/infiniband");
  auto dry = write_rdma_spec(host, kRdmaCdiSpec, true);
  REQUIRE_FALSE(dry);
  CHECK(dry.error().message.find("would be removed") != std::string::npos);
  CHECK(fs::exists(root / "var/run/cdi/hpcbake-rdma.yaml"));
  auto w = write_rdma_spec(host, kRdmaCdiSpec, false);
  REQUIRE_FALSE(w);
  CHECK(w.error().message.starts_with("no InfiniBand HCA"));
  CHECK(w.error().message.find("/var/run/cdi/hpcbake-rdma.yaml removed") != std::string::npos);
  CHECK_FALSE(w.error().hint.empty());
  CHECK_FALSE(fs::exists(root / "var/run/cdi/hpcbake-rdma.yaml"));
}

TEST_CASE("cdi rdma: a spec that is not CDI is refused when read back") {
  CHECK_FALSE(read_rdma_spec("kind: [", "x.yaml"));
  auto no_devices = read_rdma_spec("cdiVersion: \"0.5.0\"\nkind: hpcbake/rdma\n", "x.yaml");
  REQUIRE_FALSE(no_devices);
  CHECK(no_devices.error().message == "x.yaml: not a CDI spec (no kind or no devices list)");
}

TEST_CASE("docker memlock: default-ulimits.memlock added, every other byte kept, idempotent, replaced in place") {
  const std::string in = "{\n  \"log-driver\": \"json-file\",\n  \"default-ulimits\": {\n    \"nofile\": {\"Name\": "
                         "\"nofile\", \"Hard\": 64000, \"Soft\": 64000}\n  }\n}\n";
  auto e = edit_docker_ulimit(in, "memlock", -1, -1, "daemon.json");
  REQUIRE(e);
  CHECK(e->changed);
  CHECK(e->what == "added default-ulimits.memlock");
  CHECK(e->text == "{\n  \"log-driver\": \"json-file\",\n  \"default-ulimits\": {\n    \"memlock\": {\n      \"Hard\": "
                   "-1,\n      \"Name\": \"memlock\",\n      \"Soft\": -1\n    },\n    \"nofile\": {\"Name\": "
                   "\"nofile\", \"Hard\": 64000, \"Soft\": 64000}\n  }\n}\n");
  auto again = edit_docker_ulimit(e->text, "memlock", -1, -1, "daemon.json");
  REQUIRE(again);
  CHECK_FALSE(again->changed);
  auto lim = docker_default_ulimit(e->text, "memlock", "daemon.json");
  REQUIRE(lim);
  REQUIRE(lim->has_value());
  CHECK((**lim)["Hard"] == -1);

  // A limited memlock is replaced where it is; no default-ulimits at all: added first.
  const std::string limited = "{\"default-ulimits\": {\"memlock\": {\"Name\": \"memlock\", \"Hard\": 65536, \"Soft\": "
                              "65536}}, \"debug\": true}";
  auto r = edit_docker_ulimit(limited, "memlock", -1, -1, "daemon.json");
  REQUIRE(r);
  CHECK(r->text == "{\"default-ulimits\": {\"memlock\": {\"Hard\":-1,\"Name\":\"memlock\",\"Soft\":-1}}, \"debug\": "
                   "true}");
  CHECK(r->what.starts_with("replaced default-ulimits.memlock (was "));
  auto none = edit_docker_ulimit("{\"debug\": true}", "memlock", -1, -1, "daemon.json");
  REQUIRE(none);
  CHECK(json::parse(none->text) == json::parse(R"({"default-ulimits": {"memlock": {"Hard": -1, "Name": "memlock",
                                                  "Soft": -1}}, "debug": true})"));
  auto bad = edit_docker_ulimit("{\"default-ulimits\": []}", "memlock", -1, -1, "daemon.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "daemon.json: \"default-ulimits\" is not an object");
}

TEST_CASE("docker memlock: configure writes the runtime and the memlock in one edit") {
  const auto root = test::scratch("cdi-rdma-configure");
  util::HostFs host(root);
  Runtime rt;
  rt.memlock_unlimited = true;
  auto c = configure(host, Engine::docker, rt, "/etc/docker/daemon.json");
  REQUIRE(c);
  CHECK(c->changed);
  const json doc = json::parse(test::read(root / "etc/docker/daemon.json"));
  CHECK(doc["runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime");
  CHECK(doc["default-ulimits"]["memlock"] == json{{"Hard", -1}, {"Name", "memlock"}, {"Soft", -1}});
  auto twice = configure(host, Engine::docker, rt, "/etc/docker/daemon.json");
  REQUIRE(twice);
  CHECK_FALSE(twice->changed);
}
