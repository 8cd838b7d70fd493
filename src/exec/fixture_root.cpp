#include "exec/fixture_root.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>

namespace hpcbake::exec {

namespace {

namespace fs = std::filesystem;

// `p` with every link resolved (as the program will resolve it), or the root-relative path it
// names; nothing when it cannot be resolved.
std::optional<fs::path> real_path(const fs::path& p) {
  std::error_code ec;
  auto r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) return std::nullopt;
  return r;
}

bool inside(const fs::path& p, const fs::path& root) {
  const auto real = real_path(p), top = real_path(root);
  if (!real || !top) return false;
  const auto rel = real->lexically_relative(*top);
  return !rel.empty() && *rel.begin() != "..";
}

// The value of an option given as "NAME VALUE", "NAME=VALUE" or, for a one-letter option,
// "-xVALUE"; nothing when absent.
std::optional<std::string> option(const std::vector<std::string>& argv, std::string_view name) {
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string_view a = argv[i];
    if (a == name) return i + 1 < argv.size() ? std::optional(argv[i + 1]) : std::nullopt;
    if (a.starts_with(name) && a.size() > name.size()) {
      if (a[name.size()] == '=') return std::string(a.substr(name.size() + 1));
      if (name.size() == 2) return std::string(a.substr(2)); // -bDIR
    }
  }
  return std::nullopt;
}

bool has(const std::vector<std::string>& argv, std::string_view word) {
  return std::find(argv.begin() + 1, argv.end(), word) != argv.end();
}

bool option_inside(const std::vector<std::string>& argv, std::string_view name, const fs::path& root) {
  const auto v = option(argv, name);
  return v && inside(*v, root);
}

Judgement machine(std::string why) {
  return {Reach::machine, std::move(why)};
}

// What a program acts on when it is not confined to the tree (for the refusal's message).
std::string machine_reach(const std::string& prog) {
  static const std::vector<std::pair<std::vector<std::string_view>, std::string_view>> known = {
      {{"apt-get", "apt", "apt-mark", "dpkg", "dnf", "tdnf", "yum", "rpm", "zypper"},
       "installs or changes packages in this machine's package database and file system, not the tree's"},
      {{"update-initramfs", "dracut", "mkinitrd", "mkinitramfs", "mkinitcpio"},
       "rebuilds an initramfs in this machine's /boot, not the tree's"},
      {{"systemctl", "service", "reboot", "shutdown"}, "acts on this machine's services, not the tree's"},
      {{"modprobe", "insmod", "rmmod"}, "loads or unloads modules of this machine's running kernel"},
      {{"mokutil"}, "changes this machine's Secure Boot key enrollment"},
      {{"waagent"}, "acts on this machine's Azure agent, not the tree's"},
      {{"dkms"},
       "builds into this machine's /var/lib/dkms, /usr/src or /lib/modules, or runs its depmod, unless --dkmstree, "
       "--sourcetree and --installtree all name directories in the tree and --no-depmod is given"},
      {{"depmod"}, "rewrites this machine's /lib/modules unless -b names the tree"},
      {{"docker", "podman", "ctr", "nerdctl"}, "starts or changes containers on this machine"},
      {{"sh", "bash"}, "runs an installer that writes this machine's /usr, /etc and /lib/modules, not the tree's"},
  };
  for (const auto& [names, what] : known)
    if (std::find(names.begin(), names.end(), prog) != names.end()) return std::string(what);
  return "is not known to act only on files under the tree";
}

} // namespace

Judgement judge(const std::vector<std::string>& argv, const fs::path& root) {
  if (argv.empty()) return machine("runs nothing");
  const std::string prog = fs::path(argv.front()).filename().string();
  const auto sub = [&](std::size_t i) { return argv.size() > i ? std::string_view(argv[i]) : std::string_view{}; };
  // dkms install and remove run `depmod -a K` on this machine's /lib/modules whatever the trees
  // (dkms 3.0's do_depmod), unless --no-depmod.
  if (prog == "dkms" && option_inside(argv, "--dkmstree", root) && option_inside(argv, "--sourcetree", root) &&
      option_inside(argv, "--installtree", root) && !has(argv, "--modprobe-on-install") &&
      (sub(1) == "add" || sub(1) == "build" || has(argv, "--no-depmod")))
    return {Reach::tree, {}};
  if (prog == "depmod" && (option_inside(argv, "-b", root) || option_inside(argv, "--basedir", root)))
    return {Reach::tree, {}};
  if (prog == "rpm" && option_inside(argv, "--root", root)) return {Reach::tree, {}};
  if (prog == "rpm" && has(argv, "-qp")) return {Reach::tree, {}}; // reads the package file it names
  if (prog == "dpkg-deb" && (sub(1) == "--field" || sub(1) == "-f")) return {Reach::tree, {}};
  if (prog == "gpgv") return {Reach::tree, {}}; // checks the files it names, writes only its --output
  if (prog == "dpkg-query" || (prog == "rpm" && has(argv, "-q"))) return {Reach::probe, {}};
  if (prog == "dnf" && has(argv, "versionlock") && has(argv, "list")) return {Reach::probe, {}};
  if (prog == "systemctl" && (sub(1) == "is-active" || sub(1) == "is-enabled")) return {Reach::probe, {}};
  if (prog == "dcgmi" && sub(1) == "diag") return {Reach::probe, {}};
  if (prog == "nvidia-smi" && argv.size() == 1) return {Reach::probe, {}}; // the device table, read-only
  if (prog == "docker" && sub(1) == "image" && sub(2) == "inspect") return {Reach::probe, {}};
  // verify's load checks: they measure this machine's GPUs and HCAs and write nothing.
  if (prog == "all_reduce_perf" || prog == "ib_write_bw") return {Reach::probe, {}};
  if (prog == "mpirun" && std::any_of(argv.begin() + 1, argv.end(),
                                      [](const std::string& a) { return fs::path(a).filename() == "all_reduce_perf"; }))
    return {Reach::probe, {}};
  if (prog == "numactl") { // numactl -N n -m n PROGRAM ...: what PROGRAM reaches
    std::size_t i = 1;
    while (i < argv.size() && argv[i].starts_with("-"))
      i += (argv[i].find('=') == std::string::npos && argv[i].size() == 2) ? 2 : 1;
    if (i < argv.size()) return judge(std::vector<std::string>(argv.begin() + static_cast<long>(i), argv.end()), root);
  }
  return machine(machine_reach(prog));
}

FixtureRootRunner::FixtureRootRunner(std::unique_ptr<Runner> inner, fs::path root)
    : inner_(std::move(inner)), root_(std::move(root)) {}

std::optional<Error> FixtureRootRunner::refusal(const Command& cmd) const {
  if (auto e = exec::refusal(*inner_, cmd)) return e;
  const auto j = judge(cmd.argv, root_);
  if (j.reach != Reach::machine || inner_->records_machine_commands()) return std::nullopt;
  const std::string shown = shell_quote(cmd.argv);
  const std::string prog =
      cmd.argv.empty() ? std::string("the command") : fs::path(cmd.argv.front()).filename().string();
  return Error{ErrorKind::permission,
               fmt::format("did not run `{}`: --root {} is not /, and {} {}", shown, root_.string(), prog, j.why),
               fmt::format("run it inside the tree (chroot {} {}), or run hpcbake on the machine the tree belongs to",
                           shell_quote({root_.string()}), shown)};
}

Result<Completed> FixtureRootRunner::run(const Command& cmd) {
  if (auto e = refusal(cmd)) return std::unexpected(std::move(*e));
  return inner_->run(cmd);
}

std::optional<Error> refusal(const Runner& runner, const Command& cmd) {
  if (const auto* rooted = dynamic_cast<const FixtureRootRunner*>(&runner)) return rooted->refusal(cmd);
  return std::nullopt;
}

std::unique_ptr<Runner> for_root(const util::HostFs& host, std::unique_ptr<Runner> runner) {
  if (host.is_real_root()) return runner;
  return std::make_unique<FixtureRootRunner>(std::move(runner), fs::absolute(host.root()));
}

} // namespace hpcbake::exec
