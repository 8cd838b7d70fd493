#pragma once
// What a command may do under a fixture --root: the one classification of every program a verb
// can run, and the runner wrapper that applies it (docs/security.md, "What --root guarantees").
//
// Under a --root other than /, hpcbake works on a tree of files, never on the machine it runs on.
// Its own reads and writes are resolved inside the tree (util/rootfs.hpp); a program it starts is
// judged here, from its argv alone, before it starts:
//   - tree: its effects are confined to files its argv names inside the tree (dkms with
//     --dkmstree, --sourcetree and --installtree all in the tree; depmod -b DIR in the tree; rpm
//     --root DIR in the tree), or it only reads the files it is given and writes none but those its
//     argv names (gpgv, dpkg-deb --field, rpm -qp). It runs.
//   - probe: it reads this machine's state and changes nothing (verify's dcgmi diag, nvidia-smi,
//     all_reduce_perf, ib_write_bw and mpirun or numactl running them, docker
//     image inspect, dpkg-query, rpm -q, dnf versionlock list, systemctl is-active). It runs: its
//     answer is about this machine, which is what verify reports on.
//   - machine: anything else, e.g. a package manager (apt-get, dpkg -i, dnf), an initramfs tool
//     (update-initramfs, dracut), systemctl, modprobe, mokutil, waagent, an installer (sh FILE.run),
//     dkms or depmod outside the tree, and any program not listed here. It acts on this machine's
//     /, /boot, services or kernel, not on the tree's, so it never runs: the wrapper returns an
//     Error (ErrorKind::permission, exit 9) naming the command, why it was not run and what to do
//     (run it inside the tree with chroot, or run hpcbake on the machine the tree belongs to).
// A runner that only records commands (the test suite's, Runner::records_machine_commands) gets
// every command, machine ones too: it runs none of them. exec::may_act_on_machine (runner.hpp) is
// the same rule asked in advance, by verbs for which a machine command is optional (restarting a
// service after its file changed): they skip it and say so instead of failing.
#include "exec/runner.hpp"
#include "util/hostfs.hpp"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::exec {

enum class Reach { tree, probe, machine };

struct Judgement {
  Reach reach = Reach::machine;
  std::string why; // machine: what it would act on ("rebuilds an initramfs in this machine's /boot")
};

// The class of `argv` under the fixture root `root` (an absolute, existing directory).
Judgement judge(const std::vector<std::string>& argv, const std::filesystem::path& root);

// Runs what `judge` allows under `root` through `inner`; refuses machine commands unless `inner`
// only records them.
class FixtureRootRunner final : public Runner {
public:
  FixtureRootRunner(std::unique_ptr<Runner> inner, std::filesystem::path root);
  Result<Completed> run(const Command& cmd) override;
  bool records_machine_commands() const override { return inner_->records_machine_commands(); }
  // The Error run(cmd) would return, without starting anything; nothing when it would start.
  std::optional<Error> refusal(const Command& cmd) const;

private:
  std::unique_ptr<Runner> inner_;
  std::filesystem::path root_;
};

// What `runner` would refuse to start, asked before anything is changed so that nothing is left
// half done: a FixtureRootRunner's refusal; nothing for any other runner.
std::optional<Error> refusal(const Runner& runner, const Command& cmd);

// The runner every verb uses for `host`: `runner` itself at /, wrapped in a FixtureRootRunner
// under any other root.
std::unique_ptr<Runner> for_root(const util::HostFs& host, std::unique_ptr<Runner> runner);

} // namespace hpcbake::exec
