#include "detect/kernels.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;

TEST_CASE("Ubuntu with GRUB_DEFAULT=0: next boot is the newest installed kernel, not the running one") {
  auto k = detect::detect_kernels(util::HostFs(test::host_fixture("nd96isr_h100_v5")));
  CHECK(k.running == "6.5.0-1025-azure");
  REQUIRE(k.installed.size() == 2);
  CHECK(k.installed.front() == "6.8.0-1015-azure");
  CHECK(k.next_boot == "6.8.0-1015-azure");
  CHECK(k.next_boot_rule.find("GRUB_DEFAULT=0") != std::string::npos);
  CHECK(k.targets() == std::vector<std::string>{"6.5.0-1025-azure", "6.8.0-1015-azure"});
  bool warned = false;
  for (const auto& w : k.warnings)
    warned |= w.find("must be built for both") != std::string::npos;
  CHECK(warned);
}

TEST_CASE("AlmaLinux BLS: grubenv saved_entry picks the entry") {
  auto k = detect::detect_kernels(util::HostFs(test::host_fixture("hb120rs_v3")));
  CHECK(k.running == "4.18.0-553.el8_10.x86_64");
  CHECK(k.next_boot == "4.18.0-553.16.1.el8_10.x86_64");
  CHECK(k.next_boot_rule.find("saved_entry") != std::string::npos);
  CHECK(k.next_boot_rule.find("/boot/grub2/grubenv") != std::string::npos);
}

TEST_CASE("BLS: saved_entry naming the older kernel is honoured, next_entry wins over it") {
  auto root = test::scratch("bls-older");
  for (auto v : {"5.14.0-427.el9.x86_64", "5.14.0-503.el9.x86_64"})
    test::write(root / "boot/loader/entries" / (std::string("abc-") + v + ".conf"),
                std::string("title x\nversion ") + v + "\nlinux /vmlinuz-" + v + "\n");
  test::write(root / "boot/vmlinuz-5.14.0-427.el9.x86_64", "");
  test::write(root / "boot/vmlinuz-5.14.0-503.el9.x86_64", "");
  test::write(root / "boot/grub2/grubenv", "# GRUB Environment Block\nsaved_entry=abc-5.14.0-427.el9.x86_64\n");
  CHECK(detect::detect_kernels(util::HostFs(root)).next_boot == "5.14.0-427.el9.x86_64");
  test::write(
      root / "boot/grub2/grubenv",
      "# GRUB Environment Block\nsaved_entry=abc-5.14.0-427.el9.x86_64\nnext_entry=abc-5.14.0-503.el9.x86_64\n");
  CHECK(detect::detect_kernels(util::HostFs(root)).next_boot == "5.14.0-503.el9.x86_64");
  // Without grubenv: the newest entry.
  std::filesystem::remove(root / "boot/grub2/grubenv");
  auto k = detect::detect_kernels(util::HostFs(root));
  CHECK(k.next_boot == "5.14.0-503.el9.x86_64");
  CHECK(k.next_boot_rule.find("newest BLS entry") != std::string::npos);
}

TEST_CASE("Debian GRUB_DEFAULT=saved resolves the kernel named in saved_entry") {
  auto root = test::scratch("grub-saved");
  test::write(root / "etc/default/grub", "GRUB_DEFAULT=saved\nGRUB_SAVEDEFAULT=true\n");
  test::write(root / "boot/vmlinuz-6.1.0-25-amd64", "");
  test::write(root / "boot/vmlinuz-6.1.0-26-amd64", "");
  test::write(root / "boot/grub/grubenv",
              "# GRUB Environment Block\nsaved_entry=gnulinux-advanced-uuid>gnulinux-6.1.0-25-amd64-advanced-uuid\n");
  auto k = detect::detect_kernels(util::HostFs(root));
  CHECK(k.next_boot == "6.1.0-25-amd64");
  CHECK(k.next_boot_rule.find("GRUB_DEFAULT=saved") != std::string::npos);
}

TEST_CASE("no boot loader config: newest installed, no /boot kernels: /lib/modules stands in") {
  auto k = detect::detect_kernels(util::HostFs(test::host_fixture("plain")));
  CHECK(k.running == "6.1.0-26-amd64");
  CHECK(k.next_boot == "6.1.0-26-amd64");
  CHECK(k.targets().size() == 1);

  auto root = test::scratch("modules-only");
  std::filesystem::create_directories(root / "lib/modules/6.1.0-9-amd64");
  std::filesystem::create_directories(root / "lib/modules/6.1.0-26-amd64");
  auto m = detect::detect_kernels(util::HostFs(root));
  CHECK(m.running.empty());
  CHECK(m.installed_source.find("/lib/modules") != std::string::npos);
  CHECK(m.next_boot == "6.1.0-26-amd64");
  CHECK(m.targets() == std::vector<std::string>{"6.1.0-26-amd64"});
}

TEST_CASE("dracut's rescue image is not an installed kernel: no module warning, never the next boot") {
  auto root = test::scratch("rescue");
  const std::string k = "5.14.0-570.12.1.el9_6.x86_64", rescue = "0-rescue-65dd8a0b080e4373a5633404cabaac84";
  test::write(root / "proc/sys/kernel/osrelease", k + "\n");
  std::filesystem::create_directories(root / "lib/modules" / k);
  test::write(root / "boot" / ("vmlinuz-" + k), "kernel");
  test::write(root / "boot" / ("vmlinuz-" + rescue), "kernel");
  test::write(root / "boot/loader/entries/65dd8a0b080e4373a5633404cabaac84-0-rescue.conf",
              "title AlmaLinux (" + rescue + ") 9.6\nversion " + rescue + "\nlinux /vmlinuz-" + rescue + "\n");
  test::write(root / ("boot/loader/entries/65dd8a0b080e4373a5633404cabaac84-" + k + ".conf"),
              "title AlmaLinux (" + k + ") 9.6\nversion " + k + "\nlinux /vmlinuz-" + k + "\n");
  auto facts = detect::detect_kernels(util::HostFs(root));
  CHECK(facts.installed == std::vector<std::string>{k});
  CHECK(facts.next_boot == k);
  for (const auto& w : facts.warnings)
    CHECK_MESSAGE(w.find("rescue") == std::string::npos, w);
}

TEST_CASE("a 3 GiB sparse BLS entry or osrelease is a warning naming it, not a read (issue 40 item 8)") {
  auto root = test::scratch("bls-huge");
  test::write(root / "boot/loader/entries/abc-5.14.0-503.el9.x86_64.conf",
              "title x\nversion 5.14.0-503.el9.x86_64\nlinux /vmlinuz-5.14.0-503.el9.x86_64\n");
  test::sparse(root / "boot/loader/entries/abc-6.0.conf", test::three_gib);
  test::sparse(root / "proc/sys/kernel/osrelease", test::three_gib);
  test::write(root / "boot/vmlinuz-5.14.0-503.el9.x86_64", "");
  const auto k = detect::detect_kernels(util::HostFs(root));
  CHECK(k.running.empty());
  bool named = false;
  for (const auto& w : k.warnings)
    named |= w.find((root / "boot/loader/entries/abc-6.0.conf").string() +
                    " is 3.0 GiB; a boot loader entry is at most") != std::string::npos;
  CHECK(named);
  CHECK(k.next_boot == "5.14.0-503.el9.x86_64");
}
