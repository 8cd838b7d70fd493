#include "manifest/manifests.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

#include <sstream>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

// A minimal valid manifest tree to break one file at a time.
fs::path mini_tree(const std::string& name) {
  // manifests/ with the shipped driver recipes beside it, as in the source tree.
  const auto top = test::scratch(name);
  fs::copy(test::source_dir() / "drivers", top / "drivers", fs::copy_options::recursive);
  auto dir = top / "manifests";
  test::write(dir / "distros/debian-12.yaml", R"(schema: 1
name: Debian 12
source: test
os_release:
  id: debian
  version_id: "12"
reference_key: debian12
package_manager: apt
kernel_headers_package: "linux-headers-{kernel}"
build_packages: [dkms]
rdma_packages: [rdma-core]
initramfs_command: [update-initramfs, -u, -k, "{kernel}"]
nouveau_blacklist_file: /etc/modprobe.d/blacklist-nouveau.conf
waagent_service: walinuxagent
waagent_config: /etc/waagent.conf
)");
  test::write(dir / "sizes/hb120rs_v3.yaml", R"(schema: 1
size: Standard_HB120rs_v3
family: HBv3
source: test
infiniband:
  ports: 1
  rate_gbps: 200
)");
  fs::create_directories(dir / "components");
  return dir;
}

std::string cuda_driver(const std::string& sha256) {
  return R"(schema: 1
component: nvidia-cuda-driver
kind: nvidia-driver
description: d
source: s
variants:
  - distros: [debian-12]
    version: "580.126.20"
    artifacts:
      - name: NVIDIA-Linux-x86_64-580.126.20.run
        urls: ["https://example.invalid/a.run"]
        sha256: )" +
         sha256 + "\n";
}

// A size manifest for Standard_HB120rs_v3 with the given schema line and infiniband body.
std::string hb_size(const std::string& schema, const std::string& infiniband) {
  return schema + "\nsize: Standard_HB120rs_v3\nfamily: HBv3\nsource: t\ninfiniband:\n" + infiniband;
}

std::vector<std::string> lint(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& d : manifest::lint_manifests(dir).diagnostics)
    out.push_back(d.str());
  return out;
}

bool has(const std::vector<std::string>& diags, const std::string& needle) {
  for (const auto& d : diags)
    if (d.find(needle) != std::string::npos) return true;
  return false;
}

} // namespace

TEST_CASE("every shipped manifest lints clean") {
  auto r = manifest::lint_manifests(test::source_dir() / "manifests");
  for (const auto& d : r.diagnostics)
    FAIL_CHECK(d.str());
  CHECK(r.manifests.sizes.size() >= 50);
  CHECK(r.manifests.distros.size() == 10);
  CHECK(r.manifests.components.size() == 18);
  // Every size with an azurehpc-health-checks conf has a size manifest.
  std::istringstream names(test::slurp(test::fixtures() / "reference" / "azurehpc-health-checks-conf.list"));
  int confs = 0;
  for (std::string name; std::getline(names, name);) {
    if (name.empty() || name[0] == '#') continue;
    ++confs;
    CAPTURE(name);
    CHECK(fs::exists(test::source_dir() / "manifests/sizes" / (fs::path(name).stem().string() + ".yaml")));
  }
  CHECK(confs == 38); // the list holds 38 names
}

TEST_CASE("the minimal tree is clean") {
  CHECK(lint(mini_tree("mini-clean")).empty());
}

TEST_CASE("an unknown key is reported at its line and column, with a suggestion") {
  auto dir = mini_tree("mini-unknown");
  test::write(dir / "sizes/hb120rs_v3.yaml", hb_size("schema: 1", "  ports: 1\n  rate_gpbs: 200\n"));
  auto d = lint(dir);
  CHECK(has(d, "sizes/hb120rs_v3.yaml:7:3: unknown key 'infiniband.rate_gpbs' (did you mean 'rate_gbps'?)"));
  CHECK(has(d, "missing required key 'infiniband.rate_gbps'"));
}

TEST_CASE("type errors, unquoted versions, bad enums and wrong schema versions") {
  auto dir = mini_tree("mini-types");
  test::write(dir / "sizes/hb120rs_v3.yaml", hb_size("schema: 2", "  ports: many\n  rate_gbps: 200\n"));
  auto d = lint(dir);
  CHECK(has(d, "hb120rs_v3.yaml:1:9: 'schema': schema version 2 is not supported"));
  CHECK(has(d, "hb120rs_v3.yaml:6:10: 'infiniband.ports' must be an integer"));

  auto text = test::slurp(dir / "distros/debian-12.yaml");
  text.replace(text.find("\"12\""), 4, "12");
  test::write(dir / "distros/debian-12.yaml", text);
  d = lint(dir);
  CHECK(has(d, "debian-12.yaml:6:15: 'os_release.version_id' must be a quoted string: write \"12\""));
}

// Regression (found while writing the fuzz target's properties, fuzz/fuzz_manifest.cpp):
// from_chars reads "nan" and "inf", and NaN passed the "< 0" test, so a check threshold of
// nan or inf loaded as a number.
TEST_CASE("check thresholds must be finite numbers") {
  for (const std::string bad : {"nan", "inf", "-inf", "infinity", "NAN"}) {
    CAPTURE(bad);
    auto dir = mini_tree("mini-nan");
    test::write(dir / "sizes/hb120rs_v3.yaml",
                hb_size("schema: 1", "  ports: 1\n  rate_gbps: 200\n") + "checks:\n  cpu_stream_mbs: " + bad + "\n");
    CHECK(has(lint(dir), "hb120rs_v3.yaml:9:19: 'checks.cpu_stream_mbs' must be a non-negative number"));
  }
}

TEST_CASE("YAML syntax errors carry line and column") {
  auto dir = mini_tree("mini-syntax");
  test::write(dir / "sizes/hb120rs_v3.yaml", "schema: 1\nsize: [unclosed\n");
  auto d = lint(dir);
  REQUIRE_FALSE(d.empty());
  CHECK(has(d, "hb120rs_v3.yaml:"));
  CHECK(has(d, "YAML syntax error"));
}

TEST_CASE("cross-file rules: file names, unknown distros, SHA-256 format") {
  auto dir = mini_tree("mini-cross");
  test::write(dir / "sizes/hb120rs.yaml", test::slurp(dir / "sizes/hb120rs_v3.yaml"));
  test::write(dir / "components/nvidia-cuda-driver.yaml", cuda_driver("ABC"));
  test::write(dir / "components/nvidia-fabricmanager.yaml", R"(schema: 1
component: nvidia-fabricmanager
kind: fabric-manager
description: d
source: s
variants:
  - distros: [debian-12, ubuntu-99.04]
    version: "580.126.16"
    packages: ["nvidia-fabricmanager=580.126.16-1"]
)");
  auto d = lint(dir);
  CHECK(has(d, "file name 'hb120rs.yaml' does not match size 'Standard_HB120rs_v3'"));
  CHECK(has(d, "must be 64 lower-case hex digits, or 'unknown'"));
  CHECK(has(d, "names unknown distro 'ubuntu-99.04'"));
  CHECK(has(d, "nvidia-cuda-driver.yaml:12:"));
}

TEST_CASE("load_manifests turns diagnostics into one manifest error") {
  auto dir = mini_tree("mini-load");
  test::write(dir / "sizes/hb120rs_v3.yaml", "schema: 1\nsize: Standard_HB120rs_v3\n");
  auto m = manifest::load_manifests(dir);
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().kind == ErrorKind::manifest);
  CHECK(m.error().message.find("missing required key 'family'") != std::string::npos);
  CHECK(m.error().hint.find("hpcbake manifest lint") != std::string::npos);
}

TEST_CASE("Fabric Manager must equal the CUDA driver version") {
  auto dir = mini_tree("mini-fm");
  test::write(dir / "components/nvidia-cuda-driver.yaml", cuda_driver("unknown"));
  test::write(dir / "components/nvidia-fabricmanager.yaml", R"(schema: 1
component: nvidia-fabricmanager
kind: fabric-manager
description: d
source: s
variants:
  - distros: [debian-12]
    version: "580.126.16"
    packages: ["nvidia-fabricmanager=580.126.16-1"]
)");
  // The message plan refuses with (manifest::driver_coupling: one rule for both).
  const auto d = lint(dir);
  CHECK(has(d, "Fabric Manager 580.126.16 ("));
  CHECK(has(d, "nvidia-fabricmanager.yaml) does not equal the driver version 580.126.20 for debian-12"));
}

TEST_CASE("the driver recipes are part of the manifest set: linted, and every kind needs one") {
  const auto dir = mini_tree("mini-recipes");
  test::write(dir.parent_path() / "drivers/peermem.yaml",
              "schema: 1\nkind: peermem\ndescription: x\ninstaller: modules-load\nmodules_lod: [x]\n");
  auto diags = lint(dir);
  REQUIRE_FALSE(diags.empty());
  bool named = false;
  for (const auto& d : diags)
    named = named || (d.find("peermem.yaml:5") != std::string::npos && d.find("modules_lod") != std::string::npos);
  CHECK(named);
  fs::remove_all(dir.parent_path() / "drivers");
  diags = lint(dir);
  REQUIRE_FALSE(diags.empty());
  CHECK(diags.front().find("missing driver recipe directory") != std::string::npos);
}

TEST_CASE("zypper is refused by the schema: install has no SLES path") {
  const auto dir = mini_tree("mini-zypper");
  auto text = test::read(dir / "distros/debian-12.yaml");
  const auto at = text.find("package_manager: apt");
  REQUIRE(at != std::string::npos);
  text.replace(at, 20, "package_manager: zypper");
  test::write(dir / "distros/debian-12.yaml", text);
  auto diags = lint(dir);
  REQUIRE_FALSE(diags.empty());
  CHECK(diags.front().find("zypper") != std::string::npos);
}

TEST_CASE("version match: exact and major, spelled as the manifests spell them") {
  using manifest::VersionMatch;
  CHECK(manifest::parse_version_match("exact") == VersionMatch::exact);
  CHECK(manifest::parse_version_match("major") == VersionMatch::major);
  CHECK_FALSE(manifest::parse_version_match("minor").has_value());
  CHECK(std::string(manifest::to_string(VersionMatch::exact)) == "exact");
  CHECK(std::string(manifest::to_string(VersionMatch::major)) == "major");
  manifest::DistroManifest d;
  d.os_id = "rhel";
  d.os_version_id = "9";
  d.version_match = VersionMatch::major;
  CHECK(d.matches("rhel", "9.4"));
  CHECK(d.matches("rhel", "9"));
  CHECK_FALSE(d.matches("rhel", "94"));
  d.version_match = VersionMatch::exact;
  CHECK_FALSE(d.matches("rhel", "9.4"));
}

TEST_CASE("kinds: every driver and component kind reads back as itself, and nothing else reads") {
  using namespace hpcbake::manifest;
  for (const auto& name : driver_kind_names()) {
    const auto k = parse_driver_kind(name);
    REQUIRE(k);
    CHECK(std::string(to_string(*k)) == name);
  }
  for (const auto& name : component_kind_names()) {
    const auto k = parse_component_kind(name);
    REQUIRE(k);
    CHECK(std::string(to_string(*k)) == name);
  }
  CHECK(driver_kind_names() == std::vector<std::string>{"cuda", "grid", "rocm"});
  CHECK(component_kind_names().size() == 11);
  CHECK_FALSE(parse_driver_kind("CUDA"));
  CHECK_FALSE(parse_component_kind("dkms_module"));
  CHECK_FALSE(parse_component_kind(""));
  CHECK(is_nvidia(DriverKind::grid));
  CHECK_FALSE(is_nvidia(DriverKind::rocm));
}

TEST_CASE("repositories: https or a local file:/// directory, keys by full fingerprint, build repositories exist") {
  const auto repo = [](const std::string& uri, const std::string& key_url, const std::string& fpr) {
    return "schema: 1\nrepository: local\ndescription: d\nsource: s\nvariants:\n  - distros: [\"debian-12\"]\n"
           "    uri: " +
           uri + "\n    suite: /\n    key:\n      urls: [\"" + key_url + "\"]\n      fingerprint: \"" + fpr +
           "\"\n      source: s\n";
  };
  const std::string fpr = "C607052566F81BB2813915641787F05C5250046E";
  auto dir = mini_tree("mini-repos");
  test::write(dir / "repositories/local.yaml", repo("file:///media/mirror/", "file:///media/mirror/key.asc", fpr));
  CHECK(lint(dir).empty());
  test::write(dir / "repositories/local.yaml", repo("https://example.invalid/r/", "https://example.invalid/k", fpr));
  CHECK(lint(dir).empty());
  test::write(dir / "repositories/local.yaml", repo("http://example.invalid/r/", "https://example.invalid/k", fpr));
  CHECK(has(lint(dir), "must be one https:// URL"));
  test::write(dir / "repositories/local.yaml", repo("file:///media/mirror", "file:///media/mirror/key.asc", fpr));
  CHECK(has(lint(dir), "file:///DIR/"));
  test::write(dir / "repositories/local.yaml", repo("file:///m/", "ftp://example.invalid/k", fpr));
  CHECK(has(lint(dir), "is not an http(s) URL or a file:/// path"));
  test::write(dir / "repositories/local.yaml", repo("file:///m/../etc/", "file:///m/k", fpr));
  CHECK(has(lint(dir), "must be one https:// URL"));
  test::write(dir / "repositories/local.yaml", repo("file:///m/", "file:///m/../../etc/k", fpr));
  CHECK(has(lint(dir), "(without '..')"));
  test::write(dir / "repositories/local.yaml", repo("file:///m/", "file:///m/k", "3BF863CC"));
  CHECK(has(lint(dir), "never a short key id"));
  // A distro's build repositories must exist and serve that distro.
  test::write(dir / "repositories/local.yaml", repo("file:///m/", "file:///m/k", fpr));
  auto distro = test::slurp(dir / "distros/debian-12.yaml");
  test::write(dir / "distros/debian-12.yaml", distro + "build_repositories: [epel]\n");
  CHECK(has(lint(dir), "build_repositories names unknown repository 'epel'"));
  test::write(dir / "distros/debian-12.yaml", distro + "build_repositories: [local]\n");
  CHECK(lint(dir).empty());
}

// Issue 40, item 5: a password in an artifact URL, a repository URI or a key URL, in a spelling
// libcurl reads otherwise than its text, is refused, and the diagnostic holds none of it.
TEST_CASE("manifest URLs libcurl would read otherwise are refused without echoing their password") {
  const std::string fpr = "C607052566F81BB2813915641787F05C5250046E";
  const auto repo = [&](const std::string& uri, const std::string& key_url) {
    return "schema: 1\nrepository: local\ndescription: d\nsource: s\nvariants:\n  - distros: [\"debian-12\"]\n"
           "    uri: \"" +
           uri + "\"\n    suite: /\n    key:\n      urls: [\"" + key_url + "\"]\n      fingerprint: \"" + fpr +
           "\"\n      source: s\n";
  };
  const auto clean_of = [](const std::vector<std::string>& diags, const std::vector<std::string>& secrets) {
    for (const auto& d : diags)
      for (const auto& s : secrets)
        if (d.find(s) != std::string::npos) return false;
    return true;
  };
  auto dir = mini_tree("mini-url-secrets");
  const std::string good = cuda_driver(std::string(64, 'a'));
  const std::string plain = "https://example.invalid/a.run";
  for (const std::string url : {"https://Uq1:Pw1a/Pw1b@example.invalid/a.run",
                                "https://Uq1:123?Pw1b@example.invalid/a.run", "Uq1:Pw1a@example.invalid/a.run",
                                "//Uq1:Pw1a@example.invalid/a.run", "https://Uq1:Pw1a@Pw1b@example.invalid/a.run"}) {
    CAPTURE(url);
    std::string text = good;
    text.replace(text.find(plain), plain.size(), url);
    test::write(dir / "components/nvidia-cuda-driver.yaml", text);
    const auto diags = lint(dir);
    CHECK(has(diags, "urls"));
    CHECK(clean_of(diags, {"Uq1", "Pw1a", "Pw1b", "123"}));
  }
  fs::remove(dir / "components/nvidia-cuda-driver.yaml");
  test::write(dir / "repositories/local.yaml", repo("https://Uq2:Pw2@example.invalid/r/", "file:///m/k"));
  CHECK(has(lint(dir), "without a user name, password"));
  CHECK(clean_of(lint(dir), {"Uq2", "Pw2"}));
  test::write(dir / "repositories/local.yaml", repo("https://example.invalid/r/?sig=Pw3", "file:///m/k"));
  CHECK(has(lint(dir), "must be one https:// URL"));
  CHECK(clean_of(lint(dir), {"Pw3"}));
  test::write(dir / "repositories/local.yaml", repo("file:///m/", "https://example.invalid/k?sig=Pw4"));
  CHECK(has(lint(dir), "a public key needs none"));
  CHECK(clean_of(lint(dir), {"Pw4"}));
  test::write(dir / "repositories/local.yaml", repo("file:///m/", "https://Uq5:Pw5a/Pw5b@example.invalid/k"));
  CHECK(has(lint(dir), "%-encoded"));
  CHECK(clean_of(lint(dir), {"Uq5", "Pw5a", "Pw5b"}));
}

TEST_CASE("a variant's gpu_models must name the GPU model of some size") {
  auto dir = mini_tree("mini-gpu-models");
  test::write(dir / "components/nvidia-peermem.yaml", R"(schema: 1
component: nvidia-peermem
kind: peermem
description: d
source: s
variants:
  - distros: ["debian-12"]
    gpu_models: ["v100"]
    version: "1"
)");
  CHECK(has(lint(dir), "gpu_models names 'v100', the model of no size"));
}

// Issue 40, item 15: a GRID size stated only a minimum branch, uncited, and got a newer guest
// driver than Azure's hosts load. Each GRID size now states its range with the source.
TEST_CASE("a GRID size states its branch range with a source: none, uncited, empty or min above max fails lint") {
  auto dir = mini_tree("mini-grid-range");
  const auto a10 = [&](const std::string& driver) {
    test::write(dir / "sizes/nv36ads_a10_v5.yaml", "schema: 1\nsize: Standard_NV36ads_A10_v5\nfamily: NVadsA10 v5\n"
                                                   "source: t\ngpu:\n  vendor: nvidia\n  model: A10\n  count: 1\n"
                                                   "driver:\n  kind: grid\n  module_flavour: proprietary\n" +
                                                       driver);
    return lint(dir);
  };
  CHECK(a10("  grid_branch:\n    min: 17\n    max: 18\n    source: Azure's driver page\n").empty());
  CHECK(a10("  grid_branch:\n    max: 16\n    source: s\n").empty());
  CHECK(has(a10(""), "missing required key 'driver.grid_branch'"));
  CHECK(has(a10("  grid_branch:\n    min: 17\n    max: 18\n"), "missing required key 'driver.grid_branch.source'"));
  CHECK(has(a10("  grid_branch:\n    source: s\n"), "state at least one bound (min, max) of the GRID branch range"));
  CHECK(has(a10("  grid_branch:\n    min: 18\n    max: 17\n    source: s\n"),
            "nv36ads_a10_v5.yaml:13:10: 'driver.grid_branch.min': 18 is above max 17: no GRID branch fits"));
  // The old, uncited keys are no longer read.
  CHECK(has(a10("  grid_branch_min: 17\n  grid_branch:\n    min: 17\n    source: s\n"),
            "unknown key 'driver.grid_branch_min'"));
  // A range only means something for a GRID driver.
  test::write(dir / "sizes/nv36ads_a10_v5.yaml",
              "schema: 1\nsize: Standard_NV36ads_A10_v5\nfamily: NVadsA10 v5\nsource: t\ngpu:\n  vendor: nvidia\n"
              "  model: A10\n  count: 1\ndriver:\n  kind: cuda\n  module_flavour: open\n  grid_branch:\n    min: 17\n"
              "    source: s\n");
  CHECK(has(lint(dir), "a GRID branch range only applies to kind: grid"));
}

TEST_CASE("a NUL or other control character in a manifest string is a diagnostic at its line (issue 40 item 10)") {
  auto dir = mini_tree("mini-nul");
  // YAML's "\0" escape in a double-quoted scalar gives a NUL byte: in a URL (curl would stop
  // there) and in a package name (a list item).
  std::string url = cuda_driver(std::string(64, 'a'));
  url.replace(url.find("a.run\"]"), 7, "a.run\\0.evil\"]");
  test::write(dir / "components/nvidia-cuda-driver.yaml", url);
  test::write(dir / "distros/debian-12.yaml",
              test::read(dir / "distros/debian-12.yaml")
                  .replace(test::read(dir / "distros/debian-12.yaml").find("[dkms]"), 6, "[\"dkms\\0x\", \"ok\\r\"]"));
  const auto d = lint(dir);
  CHECK(has(d, "nvidia-cuda-driver.yaml:11:16: 'variants[0].artifacts[0].urls[0]' holds the control character \\x00"));
  CHECK(has(d, "debian-12.yaml:10:18: 'build_packages[0]' holds the control character \\x00 at byte 4"));
  CHECK_FALSE(manifest::load_manifests(dir).has_value());
  // TAB and LF stay allowed: a block scalar holds them.
  auto clean = mini_tree("mini-nul-clean");
  test::write(clean / "sizes/hb120rs_v3.yaml",
              "schema: 1\nsize: Standard_HB120rs_v3\nfamily: HBv3\nsource: |\n  a\tb\n  c\ninfiniband:\n  ports: 1\n"
              "  rate_gbps: 200\n");
  CHECK(lint(clean).empty());
}

TEST_CASE("a manifest that is a link out of the tree is refused unread, and no secret is echoed (issue 40 item 4)") {
  auto dir = mini_tree("mini-shadow");
  const auto secret = test::scratch("mini-shadow-secret") / "shadow";
  const std::string shadow = "root:$6$s4ltS4LT$h4shH4SHh4sh:19000:0:99999:7:::\n"
                             "alice:$y$j9T$SALTsalt$HASHhash: 19000\n";
  test::write(secret, shadow);
  fs::create_symlink(secret, dir / "sizes/x.yaml");
  auto d = lint(dir);
  CHECK(has(d, (dir / "sizes/x.yaml").string() + ": is a symbolic link to " + secret.string() + ", outside the tree " +
                   dir.string() + ": refused, not read"));
  for (const auto& line : d)
    for (const char* bit : {"s4lt", "h4sh", "SALT", "HASH", "alice", "root:"})
      CHECK_MESSAGE(line.find(bit) == std::string::npos, line);
  // A link inside the tree stays allowed.
  fs::remove(dir / "sizes/x.yaml");
  fs::rename(dir / "sizes/hb120rs_v3.yaml", dir / "hb.yaml.txt");
  fs::create_symlink("../hb.yaml.txt", dir / "sizes/hb120rs_v3.yaml");
  CHECK(lint(dir).empty());
  // A file in the tree that is no manifest: its lines are not quoted as "unknown keys".
  fs::remove(dir / "sizes/hb120rs_v3.yaml");
  test::write(dir / "sizes/hb120rs_v3.yaml",
              hb_size("schema: 1", "  ports: 1\n  rate_gbps: 200\n") + "alice:$y$j9T$SALTsalt$HASHhash: 19000\n");
  d = lint(dir);
  CHECK(has(d, "unknown key '<"));
  for (const auto& line : d)
    for (const char* bit : {"SALT", "HASH", "alice"})
      CHECK_MESSAGE(line.find(bit) == std::string::npos, line);
}

TEST_CASE("memory_kb (a conf's exact kB) must round down to memory_mb") {
  auto dir = mini_tree("mini-memory-kb");
  const auto ib = hb_size("schema: 1", "  ports: 1\n  rate_gbps: 200\n");
  test::write(dir / "sizes/hb120rs_v3.yaml", ib + "memory_mb: 459515\nmemory_kb: 470543164\n");
  CHECK(has(lint(dir), "'memory_kb': memory_kb 470543164 needs memory_mb 459514"));
  test::write(dir / "sizes/hb120rs_v3.yaml", ib + "memory_kb: 470543164\n");
  CHECK(has(lint(dir), "memory_kb 470543164 needs memory_mb 459514"));
  test::write(dir / "sizes/hb120rs_v3.yaml", ib + "memory_mb: 459514\nmemory_kb: 470543164\n");
  CHECK(lint(dir).empty());
}

// A repository that signs only its metadata is trusted that way only where the manifest says so,
// with its source, never with repo_gpgcheck off, and only for dnf distros.
TEST_CASE("signatures metadata needs its source and repo_gpgcheck, and is refused for an apt distro") {
  const auto repo = [](const std::string& extra) {
    return "schema: 1\nrepository: local\ndescription: d\nsource: s\nvariants:\n  - distros: [\"debian-12\"]\n"
           "    uri: \"file:///m/\"\n    suite: /\n" +
           extra +
           "    key:\n      urls: [\"file:///m/k\"]\n      fingerprint: \"C607052566F81BB2813915641787F05C5250046E\"\n"
           "      source: s\n";
  };
  auto dir = mini_tree("mini-metadata-only");
  test::write(dir / "repositories/local.yaml", repo("    signatures: metadata\n"));
  CHECK(has(lint(dir), "signatures_source"));
  test::write(dir / "repositories/local.yaml",
              repo("    signatures: metadata\n    signatures_source: v\n    repo_gpgcheck: false\n"));
  CHECK(has(lint(dir), "needs repo_gpgcheck"));
  test::write(dir / "repositories/local.yaml", repo("    signatures: nothing\n"));
  CHECK(has(lint(dir), "'nothing' is not what a vendor signs"));
  test::write(dir / "repositories/local.yaml", repo("    signatures_source: v\n"));
  CHECK(has(lint(dir), "only with signatures: metadata"));
  // debian-12 is an apt distro: the setting means nothing there.
  test::write(dir / "repositories/local.yaml", repo("    signatures: metadata\n    signatures_source: v\n"));
  CHECK(has(lint(dir), "signatures: metadata is for dnf repositories, and debian-12 uses apt"));
  test::write(dir / "repositories/local.yaml", repo("    signatures: packages\n"));
  CHECK(lint(dir).empty());
}
