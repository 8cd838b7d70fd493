// The strict manifest reader against hostile input (issue 20, items 3 to 6): integers that
// would wrap, duplicate keys, invalid UTF-8, cross-file errors without a position and values
// too long to quote.
#include "manifest/manifests.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

// manifests/ (one distro, one size) with the shipped driver recipes beside it.
fs::path tree(const std::string& name) {
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
  fs::create_directories(dir / "components");
  return dir;
}

// sizes/hb120rs_v3.yaml: lines 1-4 are schema, size, family, source; `infiniband:` is line 5.
void hb_size(const fs::path& dir, const std::string& infiniband, const std::string& more = "") {
  test::write(dir / "sizes/hb120rs_v3.yaml",
              "schema: 1\nsize: Standard_HB120rs_v3\nfamily: HBv3\nsource: t\ninfiniband:\n" + infiniband + more);
}

// sizes/nd96isr_h100_v5.yaml with `gpu:` at line 5 and its count at line 8, column 10.
void h100_size(const fs::path& dir, const std::string& count, const std::string& nvswitches) {
  test::write(dir / "sizes/nd96isr_h100_v5.yaml", "schema: 1\nsize: Standard_ND96isr_H100_v5\nfamily: NDv5\nsource: t\n"
                                                  "gpu:\n  vendor: nvidia\n  model: H100\n  count: " +
                                                      count + "\n  nvswitch_count: " + nvswitches +
                                                      "\n  fabric_manager: true\n"
                                                      "driver:\n  kind: cuda\n  module_flavour: open\n");
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

std::string all(const std::vector<std::string>& diags) {
  std::string out;
  for (const auto& d : diags)
    out += d + "\n";
  return out;
}

} // namespace

TEST_CASE("the hardening tree is clean, and in-range integers load as written") {
  auto dir = tree("reader-clean");
  hb_size(dir, "  ports: 1\n  rate_gbps: 400\n");
  h100_size(dir, "8", "4");
  const auto r = manifest::lint_manifests(dir);
  CHECK(all(lint(dir)) == "");
  REQUIRE(r.manifests.sizes.size() == 2);
  const auto* hb = r.manifests.find_size("Standard_HB120rs_v3");
  REQUIRE(hb);
  CHECK(hb->infiniband->rate_gbps == 400);
  const auto* h100 = r.manifests.find_size("Standard_ND96isr_H100_v5");
  REQUIRE(h100);
  CHECK(h100->gpu->count == 8);
  CHECK(h100->gpu->nvswitch_count == 4);
}

// Issue 20, item 3: `rate_gbps: 4294967696` planned as 400, 2147483648 as -2147483648.
TEST_CASE("integers beyond the field's range or type are refused at their position, never wrapped") {
  for (const std::string big : {"4294967696", "2147483648", "10001", "9223372036854775807"}) {
    CAPTURE(big);
    auto dir = tree("reader-rate");
    hb_size(dir, "  ports: 1\n  rate_gbps: " + big + "\n");
    const auto d = lint(dir);
    CAPTURE(all(d));
    CHECK(has(d, "hb120rs_v3.yaml:7:14: 'infiniband.rate_gbps' is " + big + ": must be from 1 to 10000"));
  }
  // Past int64 itself: said as out of range, not as "not an integer".
  auto dir = tree("reader-int64");
  hb_size(dir, "  ports: 1\n  rate_gbps: 99999999999999999999\n");
  CHECK(has(lint(dir), "hb120rs_v3.yaml:7:14: 'infiniband.rate_gbps' is 99999999999999999999: must be from 1 to"));
}

TEST_CASE("GPU and NVSwitch counts that would wrap are refused where they are written") {
  auto dir = tree("reader-gpu");
  h100_size(dir, "3000000000", "4294967300");
  const auto d = lint(dir);
  CAPTURE(all(d));
  CHECK(has(d, "nd96isr_h100_v5.yaml:8:10: 'gpu.count' is 3000000000: must be from 1 to"));
  CHECK(has(d, "nd96isr_h100_v5.yaml:9:19: 'gpu.nvswitch_count' is 4294967300: must be from 0 to"));
  // Never the wrapped value of the old cross-check.
  CHECK_FALSE(has(d, "-1294967296"));
}

TEST_CASE("integers are plain decimal digits: no sign, exponent, fraction, hex or leading zero") {
  for (const std::string bad : {"+5", "1e3", "4.0", "0x10", "010", "1_000", "-0"}) {
    CAPTURE(bad);
    auto dir = tree("reader-notint");
    hb_size(dir, "  ports: " + bad + "\n  rate_gbps: 200\n");
    const auto d = lint(dir);
    CAPTURE(all(d));
    CHECK(has(d, "hb120rs_v3.yaml:6:10: 'infiniband.ports' must be an integer"));
  }
  auto dir = tree("reader-negative");
  hb_size(dir, "  ports: -1\n  rate_gbps: 200\n");
  CHECK(has(lint(dir), "hb120rs_v3.yaml:6:10: 'infiniband.ports' is -1: must be from 1 to"));
}

TEST_CASE("every integer field of every manifest kind has a range") {
  auto dir = tree("reader-fields");
  const std::string huge = "4294967297";
  hb_size(dir, "  ports: " + huge + "\n  rate_gbps: 200\n",
          "cpu:\n  sockets: " + huge + "\n  cores: " + huge + "\nnvme_count: " + huge +
              "\nmemory_mb: " + "99999999999999999999" + "\nchecks:\n  gpu_ecc_sram_threshold: 99999999999999999999\n");
  test::write(dir / "components/nvidia-grid-driver.yaml", "schema: 1\ncomponent: nvidia-grid-driver\nkind: "
                                                          "grid-driver\ndescription: d\nsource: s\nvariants:\n"
                                                          "  - distros: [debian-12]\n    version: \"1\"\n"
                                                          "    grid_branch: " +
                                                              huge +
                                                              "\n    artifacts:\n      - name: a.run\n"
                                                              "        urls: [\"https://example.invalid/a\"]\n"
                                                              "        sha256: unknown\n"
                                                              "        size: 99999999999999999999\n");
  const auto d = lint(dir);
  CAPTURE(all(d));
  for (const std::string key :
       {"'infiniband.ports' is", "'cpu.sockets' is", "'cpu.cores' is", "'nvme_count' is", "'memory_mb' is",
        "'checks.gpu_ecc_sram_threshold' is", "'variants[0].grid_branch' is", "'variants[0].artifacts[0].size' is"}) {
    CAPTURE(key);
    CHECK(has(d, key));
  }
}

// Issue 20, item 4: `count: 8` then `count: 4` linted clean and the first won.
TEST_CASE("a duplicate key is refused, naming both positions") {
  auto dir = tree("reader-dup");
  hb_size(dir, "  ports: 1\n  rate_gbps: 200\n  rate_gbps: 400\n");
  auto d = lint(dir);
  CAPTURE(all(d));
  const std::string f = (dir / "sizes/hb120rs_v3.yaml").string();
  CHECK(has(d, f + ":8:3: duplicate key 'infiniband.rate_gbps': first at " + f + ":7:3"));

  // At the top of a file.
  hb_size(dir, "  ports: 1\n  rate_gbps: 200\n", "family: HBv4\n");
  d = lint(dir);
  CHECK(has(d, f + ":8:1: duplicate key 'family': first at " + f + ":3:1"));

  // In a list of mappings, and in a driver recipe.
  test::write(dir / "components/nvidia-peermem.yaml", "schema: 1\ncomponent: nvidia-peermem\nkind: peermem\n"
                                                      "description: d\nsource: s\nvariants:\n"
                                                      "  - distros: [debian-12]\n    version: \"1\"\n"
                                                      "    version: \"2\"\n");
  test::write(dir.parent_path() / "drivers/peermem.yaml",
              test::slurp(dir.parent_path() / "drivers/peermem.yaml") + "description: again\n");
  d = lint(dir);
  CAPTURE(all(d));
  CHECK(has(d, "nvidia-peermem.yaml:9:5: duplicate key 'variants[0].version': first at "));
  CHECK(has(d, "drivers/peermem.yaml:"));
  CHECK(has(d, "duplicate key 'description': first at "));
}

// Issue 20, item 5: a \xff in a manifest linted clean, then `plan --json` died on it.
TEST_CASE("invalid UTF-8 is refused with the line and column of its first bad byte") {
  struct Case {
    std::string bytes, why;
  };
  for (const auto& [bytes, why] : std::vector<Case>{{"\xff", "lone 0xff"},
                                                    {"\xe9t\xe9", "Latin-1"},
                                                    {"\xc0\xaf", "overlong"},
                                                    {"\xe0\x80\xaf", "overlong, three bytes"},
                                                    {"\xed\xa0\x80", "surrogate"},
                                                    {"\xf4\x90\x80\x80", "above U+10FFFF"},
                                                    {"\xe2\x82", "truncated"},
                                                    {"\x80", "lone continuation byte"}}) {
    CAPTURE(why);
    auto dir = tree("reader-utf8");
    test::write(dir / "sizes/hb120rs_v3.yaml", "schema: 1\nsize: Standard_HB120rs_v3\nfamily: HBv3\nsource: t" + bytes +
                                                   "x\ninfiniband:\n  ports: 1\n  rate_gbps: 200\n");
    const auto d = lint(dir);
    CAPTURE(all(d));
    CHECK(has(d, "hb120rs_v3.yaml:4:10: invalid UTF-8"));
  }
  // In a comment too: the whole file is UTF-8 text.
  auto dir = tree("reader-utf8-comment");
  hb_size(dir, "  ports: 1 # caf\xe9\n  rate_gbps: 200\n");
  CHECK(has(lint(dir), "hb120rs_v3.yaml:6:17: invalid UTF-8"));
  // Valid multi-byte text is fine.
  hb_size(dir, "  ports: 1 # caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80\n  rate_gbps: 200\n",
          "notes: \"\xc3\xa9t\xc3\xa9\"\n");
  CHECK(all(lint(dir)) == "");
}

// Issue 20, item 6: cross-file errors named the file only.
TEST_CASE("cross-file errors carry the position of the field that names the missing thing") {
  auto dir = tree("reader-cross");
  hb_size(dir, "  ports: 1\n  rate_gbps: 200\n", "dkms_modules: [nope]\n");
  test::write(dir / "components/nvidia-peermem.yaml", "schema: 1\ncomponent: nvidia-peermem\nkind: peermem\n"
                                                      "description: d\nsource: s\nvariants:\n"
                                                      "  - distros: [debian-12, ubuntu-99.04]\n"
                                                      "    version: \"1\"\n    gpu_models: [Z100]\n"
                                                      "    repository: nowhere\n    packages: [x]\n");
  test::write(dir / "profiles/default.yaml",
              "schema: 1\nprofile: default\ndescription: d\nsource: s\ncomponents: [nvidia-peermem, ghost]\n");
  auto distro = test::slurp(dir / "distros/debian-12.yaml");
  test::write(dir / "distros/debian-12.yaml", distro + "build_repositories: [epel]\n");
  const auto d = lint(dir);
  CAPTURE(all(d));
  CHECK(has(d, "hb120rs_v3.yaml:8:16: dkms_modules names unknown component 'nope'"));
  CHECK(has(d, "nvidia-peermem.yaml:7:26: variant 1 names unknown distro 'ubuntu-99.04'"));
  CHECK(has(d, "nvidia-peermem.yaml:9:18: variant 1: gpu_models names 'Z100'"));
  CHECK(has(d, "nvidia-peermem.yaml:10:17: variant 1 names unknown repository 'nowhere'"));
  CHECK(has(d, "default.yaml:5:30: profile names unknown component 'ghost'"));
  CHECK(has(d, "default.yaml:5:14: component 'nvidia-peermem' (kind peermem) is planned from the size"));
  CHECK(has(d, "debian-12.yaml:16:22: build_repositories names unknown repository 'epel'"));
}

TEST_CASE("a component kind without a recipe and a Fabric Manager mismatch are reported where they are written") {
  auto dir = tree("reader-cross2");
  hb_size(dir, "  ports: 1\n  rate_gbps: 200\n");
  fs::remove(dir.parent_path() / "drivers/dcgm.yaml");
  test::write(dir / "components/dcgm.yaml", "schema: 1\ncomponent: dcgm\nkind: dcgm\ndescription: d\nsource: s\n"
                                            "variants:\n  - distros: [debian-12]\n    version: \"1\"\n");
  test::write(dir / "components/nvidia-cuda-driver.yaml",
              "schema: 1\ncomponent: nvidia-cuda-driver\nkind: nvidia-driver\ndescription: d\nsource: s\n"
              "variants:\n  - distros: [debian-12]\n    version: \"2\"\n    packages: [x]\n");
  test::write(dir / "components/nvidia-fabricmanager.yaml",
              "schema: 1\ncomponent: nvidia-fabricmanager\nkind: fabric-manager\ndescription: d\nsource: s\n"
              "variants:\n  - distros: [debian-12]\n    version: \"1\"\n    packages: [x]\n");
  const auto d = lint(dir);
  CAPTURE(all(d));
  CHECK(has(d, "dcgm.yaml:3:7: kind 'dcgm' has no driver recipe"));
  CHECK(has(d, "nvidia-fabricmanager.yaml:8:14: Fabric Manager 1 ("));
  CHECK(has(d, "nvidia-fabricmanager.yaml) does not equal the driver version 2 for debian-12"));
}

TEST_CASE("an unpinned artifact is reported at its sha256") {
  auto dir = tree("reader-unverifiable");
  hb_size(dir, "  ports: 1\n  rate_gbps: 200\n");
  test::write(dir / "components/nvidia-peermem.yaml",
              "schema: 1\ncomponent: nvidia-peermem\nkind: peermem\ndescription: d\nsource: s\nvariants:\n"
              "  - distros: [debian-12]\n    version: \"1\"\n    artifacts:\n      - name: a.run\n"
              "        urls: [\"https://example.invalid/a\"]\n        sha256: unknown\n");
  const auto r = manifest::lint_manifests(dir);
  REQUIRE(r.unverifiable.size() == 1);
  CHECK(r.unverifiable[0].str().find("nvidia-peermem.yaml:12:17: a.run") != std::string::npos);
}

TEST_CASE("a dkms-module's directives are read as written, and one holding a newline is refused") {
  auto dir = tree("reader-dkms-directives");
  hb_size(dir, "  ports: 1\n  rate_gbps: 200\n", "dkms_modules: [gdrdrv]\n");
  const std::string head = "schema: 1\ncomponent: gdrdrv\nkind: dkms-module\ndescription: d\nsource: s\n"
                           "dkms:\n  name: gdrdrv\n  modules: [gdrdrv]\n  directives:\n";
  const std::string variants = "variants:\n  - distros: [debian-12]\n    version: \"2.6\"\n    artifacts:\n"
                               "      - name: gdrcopy-2.6.tar.gz\n        urls: [\"https://example.invalid/g\"]\n"
                               "        sha256: \"" +
                               std::string(64, 'a') + "\"\n";
  test::write(dir / "components/gdrdrv.yaml", head +
                                                  "    - 'BUILT_MODULE_LOCATION[0]=\"src/gdrdrv/\"'\n"
                                                  "    - 'MAKE[0]=\"cd src/gdrdrv && make KVER=${kernelver}\"'\n" +
                                                  variants);
  auto m = manifest::load_manifests(dir);
  REQUIRE_MESSAGE(m.has_value(), m.error().message);
  const auto* c = m->find_component("gdrdrv");
  REQUIRE(c != nullptr);
  REQUIRE(c->dkms.has_value());
  CHECK(c->dkms->directives == std::vector<std::string>{"BUILT_MODULE_LOCATION[0]=\"src/gdrdrv/\"",
                                                        "MAKE[0]=\"cd src/gdrdrv && make KVER=${kernelver}\""});
  // dkms.conf is read line by line: a directive is one line.
  test::write(dir / "components/gdrdrv.yaml", head + "    - \"CLEAN=true\\nMAKE[0]=false\"\n" + variants);
  CHECK(has(lint(dir), "gdrdrv.yaml:10:5: 'dkms.directives': each directive is one dkms.conf line"));
}

// Issue 20, item 6: a 10 MB value was repeated in full in the diagnostic. 1 MiB values show the
// same (yaml-cpp parses about 2.5 MB/s: 10 MiB ones made this a 21 s test, four times per CI run).
TEST_CASE("diagnostics quote a short excerpt of a long value") {
  const std::string huge(1024 * 1024, 'A');
  const std::string digits(1024 * 1024, '9');
  auto dir = tree("reader-long");
  test::write(dir / "sizes/hb120rs_v3.yaml", "schema: 1\nsize: Standard_" + huge + "\nfamily: HBv3\nsource: t\narch: " +
                                                 huge + "\ninfiniband:\n  ports: 1\n  rate_gbps: " + digits + "\n");
  test::write(dir / "components/nvidia-peermem.yaml",
              "schema: 1\ncomponent: nvidia-peermem\nkind: peermem\ndescription: d\nsource: s\nvariants:\n"
              "  - distros: [debian-12, \"" +
                  huge + "\"]\n    version: \"" + huge + "\"\n");
  const auto d = lint(dir);
  CAPTURE(d.size());
  REQUIRE(d.size() >= 4);
  std::size_t total = 0;
  for (const auto& line : d) {
    CHECK(line.size() < 600);
    total += line.size();
  }
  CHECK(total < 4096);
  CHECK(has(d, "AAAA\xe2\x80\xa6 (1048576 bytes)"));
  CHECK(has(d, "'arch' is 'AAAA"));
  CHECK(has(d, "'infiniband.rate_gbps' is 9999"));
  CHECK(has(d, "9999\xe2\x80\xa6 (1048576 bytes)"));
}

// Found while adding the fuzz property "diagnostics are UTF-8": yaml-cpp's "unknown escape
// character" message ends with the first byte after the backslash, half of a character here.
TEST_CASE("a YAML syntax error about a multi-byte character is reported as valid UTF-8") {
  auto dir = tree("reader-escape");
  hb_size(dir, "  ports: 1\n  rate_gbps: 200\n", "notes: \"\\\xc3\xa9\"\n");
  const auto d = all(lint(dir));
  CHECK(d.find("hb120rs_v3.yaml:8:") != std::string::npos);
  CHECK(d.find("YAML syntax error: unknown escape character") != std::string::npos);
  bool valid = true;
  for (std::size_t i = 0; i < d.size(); ++i)
    if (static_cast<unsigned char>(d[i]) == 0xc3)
      valid = valid && i + 1 < d.size() && (static_cast<unsigned char>(d[i + 1]) & 0xc0) == 0x80;
  CHECK(valid);
}
