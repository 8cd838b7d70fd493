// The fixture-root rule for programs (exec/fixture_root.hpp): under a --root other than /, a
// command that would act on this machine never runs; one confined to the tree by its argv, or a
// read-only probe, does. Issue 40 item 1: `nouveau disable --root R` ran this machine's
// update-initramfs against this machine's /boot.
#include "driver/nouveau.hpp"
#include "exec/fixture_root.hpp"
#include "helpers.hpp"
#include "recording_runner.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

using namespace hpcbake;
using namespace hpcbake::exec;
namespace fs = std::filesystem;

namespace {

// Stands for SystemRunner: it would run what it gets, so it must never get a machine command.
class WouldRun final : public Runner {
public:
  explicit WouldRun(std::vector<std::vector<std::string>>* ran) : ran_(ran) {}
  Result<Completed> run(const Command& cmd) override {
    ran_->push_back(cmd.argv);
    return exited(0);
  }

private:
  std::vector<std::vector<std::string>>* ran_;
};

Reach reach(const std::vector<std::string>& argv, const fs::path& root) {
  return judge(argv, root).reach;
}

} // namespace

TEST_CASE("fixture root: package managers, initramfs tools, services, installers and unknown programs act on "
          "the machine") {
  const fs::path root = test::scratch("fixture-judge");
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"update-initramfs", "-u", "-k", "6.1.0-56-amd64"},
           {"dracut", "-f", "/boot/initramfs-5.14.0-427.el9.x86_64.img", "5.14.0-427.el9.x86_64"},
           {"apt-get", "install", "-y", "rdma-core"},
           {"dpkg", "-i", "/var/cache/hpcbake/sha256/ab"},
           {"dnf", "-y", "install", "kernel-devel"},
           {"apt-mark", "hold", "x"},
           {"systemctl", "restart", "walinuxagent"},
           {"systemctl", "reboot"},
           {"modprobe", "nvidia"},
           {"mokutil", "--import", "x.der"},
           {"waagent", "-force", "-deprovision+user"},
           {"sh", "/var/cache/hpcbake/sha256/ab", "--silent"},
           {"docker", "run", "--rm", "img"},
           {"/usr/sbin/update-initramfs", "-u"},
           {"some-new-tool"},
           {}}) {
    CAPTURE(shell_quote(argv));
    CHECK(reach(argv, root) == Reach::machine);
  }
  CHECK(judge({"update-initramfs", "-u"}, root).why.find("/boot") != std::string::npos);
}

TEST_CASE("fixture root: dkms, depmod and rpm are confined only when every tree they write is in the root") {
  const fs::path root = test::scratch("fixture-trees");
  const fs::path outside = test::scratch("fixture-trees-outside");
  fs::create_directories(root / "var/lib");
  fs::create_directory_symlink(outside, root / "var/lib/dkms"); // a link inside that leads out
  const std::vector<std::string> in = {"--dkmstree",    (root / "dkms").string(),
                                       "--sourcetree",  (root / "src").string(),
                                       "--installtree", (root / "lib/modules").string()};
  std::vector<std::string> dkms = {"dkms", "install", "-m", "x", "-v", "1", "-k", "K"};
  dkms.insert(dkms.end(), in.begin(), in.end());
  CHECK(reach(dkms, root) == Reach::machine); // dkms 3.0 runs `depmod -a K` on this machine's /lib/modules
  dkms.push_back("--no-depmod");
  CHECK(reach(dkms, root) == Reach::tree);
  auto add = dkms;
  add[1] = "add";
  add.pop_back();
  CHECK(reach(add, root) == Reach::tree);
  CHECK(reach({"dkms", "install", "-m", "x", "-v", "1", "-k", "K"}, root) == Reach::machine); // the system trees
  auto one_out = dkms;
  one_out[9] = outside.string();
  CHECK(reach(one_out, root) == Reach::machine);
  auto through_link = dkms;
  through_link[9] = (root / "var/lib/dkms").string();
  CHECK(reach(through_link, root) == Reach::machine);
  auto climbing = dkms;
  climbing[9] = (root / "../fixture-trees-outside").string();
  CHECK(reach(climbing, root) == Reach::machine);
  CHECK(reach({"depmod", "-b", root.string(), "-a", "K"}, root) == Reach::tree);
  CHECK(reach({"depmod", "-b" + root.string(), "K"}, root) == Reach::tree);
  CHECK(reach({"depmod", "--basedir=" + root.string(), "K"}, root) == Reach::tree);
  CHECK(reach({"depmod", "-a", "K"}, root) == Reach::machine);
  CHECK(reach({"depmod", "-b", "/", "-a", "K"}, root) == Reach::machine);
  CHECK(reach({"rpm", "--root", root.string(), "-q", "waagent"}, root) == Reach::tree);
  CHECK(reach({"rpm", "--root", "/", "-q", "waagent"}, root) == Reach::probe);
  CHECK(reach({"rpm", "--root", "/", "-i", "x.rpm"}, root) == Reach::machine);
  CHECK(reach({"rpm", "-qp", "--queryformat", "%{NAME}", "x.rpm"}, root) == Reach::tree);
  CHECK(reach({"dpkg-deb", "--field", "x.deb", "Package"}, root) == Reach::tree);
  CHECK(reach({"gpgv", "--keyring", "k.gpg", "InRelease"}, root) == Reach::tree);
}

TEST_CASE("fixture root: read-only probes run") {
  const fs::path root = test::scratch("fixture-probes");
  for (const std::vector<std::string>& argv :
       std::vector<std::vector<std::string>>{{"dpkg-query", "-W", "-f=${Status}", "x"},
                                             {"rpm", "-q", "--qf", "%{VERSION}", "x"},
                                             {"dnf", "-q", "versionlock", "list"},
                                             {"systemctl", "is-active", "--quiet", "walinuxagent"},
                                             {"dcgmi", "diag", "-r", "1", "-j"},
                                             {"nvidia-smi"},
                                             {"docker", "image", "inspect", "--format", "{{.Id}}", "img"}}) {
    CAPTURE(shell_quote(argv));
    CHECK(reach(argv, root) == Reach::probe);
  }
  CHECK(reach({"dnf", "-y", "versionlock", "add", "x"}, root) == Reach::machine);
  CHECK(reach({"nvidia-smi", "-r", "-i", "0"}, root) == Reach::machine); // a GPU reset
}

TEST_CASE("fixture root: a machine command is refused by name with what to do, and never reaches the runner") {
  const fs::path root = test::scratch("fixture-runner");
  std::vector<std::vector<std::string>> ran;
  const util::HostFs tree(root);
  auto runner = for_root(tree, std::make_unique<WouldRun>(&ran));
  Command cmd;
  cmd.argv = {"update-initramfs", "-u", "-k", "6.1.0-56-amd64"};
  auto r = runner->run(cmd);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().kind == ErrorKind::permission); // exit 9: refused for safety
  CHECK(r.error().message.find("did not run `update-initramfs -u -k 6.1.0-56-amd64`") != std::string::npos);
  CHECK(r.error().message.find("this machine's /boot") != std::string::npos);
  CHECK(r.error().hint.find("chroot " + fs::absolute(root).string() + " update-initramfs -u -k 6.1.0-56-amd64") !=
        std::string::npos);
  CHECK(ran.empty());
  cmd.argv = {"depmod", "-b", root.string(), "K"};
  REQUIRE(runner->run(cmd).has_value());
  CHECK(ran == std::vector<std::vector<std::string>>{cmd.argv});

  // At / nothing is judged: the machine is the target.
  ran.clear();
  auto real = for_root(util::HostFs("/"), std::make_unique<WouldRun>(&ran));
  cmd.argv = {"update-initramfs", "-u"};
  REQUIRE(real->run(cmd).has_value());
  CHECK(ran.size() == 1);

  // A runner that only records gets machine commands too: it runs none.
  auto recorded = for_root(tree, std::make_unique<RecordingRunner>());
  CHECK(recorded->records_machine_commands());
  REQUIRE(recorded->run(cmd).has_value());
}

TEST_CASE(
    "fixture root: nouveau disable --root never runs update-initramfs, and writes nothing when it would need it") {
  const fs::path root = test::scratch("fixture-nouveau");
  auto m = manifest::load_manifests(test::source_dir() / "manifests");
  REQUIRE(m.has_value());
  const auto* debian = m->find_distro("debian-12");
  REQUIRE(debian != nullptr);
  std::vector<std::vector<std::string>> ran;
  const util::HostFs tree(root);
  auto runner = for_root(tree, std::make_unique<WouldRun>(&ran));
  auto r = driver::disable_nouveau(tree, *debian, {"6.1.0-56-amd64"}, *runner);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().kind == ErrorKind::permission);
  CHECK(r.error().message.find("update-initramfs -u -k 6.1.0-56-amd64") != std::string::npos);
  CHECK(ran.empty());
  CHECK_FALSE(fs::exists(root / "etc/modprobe.d/blacklist-nouveau.conf")); // nothing half done: refused again
  auto again = driver::disable_nouveau(tree, *debian, {"6.1.0-56-amd64"}, *runner);
  REQUIRE_FALSE(again.has_value());
  // Nothing needed (the blacklist in place, no --force-initramfs): nothing refused.
  test::write(root / "etc/modprobe.d/blacklist-nouveau.conf", driver::kNouveauBlacklist);
  auto done = driver::disable_nouveau(tree, *debian, {"6.1.0-56-amd64"}, *runner);
  REQUIRE(done.has_value());
  CHECK_FALSE(done->changed);
  CHECK(ran.empty());
  auto forced = driver::disable_nouveau(tree, *debian, {"6.1.0-56-amd64"}, *runner, true);
  REQUIRE_FALSE(forced.has_value());
  CHECK(ran.empty());
}
