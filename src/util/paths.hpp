#pragma once
// Every host path hpcbake reads or writes on the machine it bakes, in one place. They are
// host paths: a verb working on a fixture tree resolves them under --root (util::HostFs).
namespace hpcbake::paths {

inline constexpr const char* kStateDir = "/var/lib/hpcbake";
inline constexpr const char* kJournal = "/var/lib/hpcbake/state.json";
// The planner's answer for a no-op re-run, cached (install/plan_memo.hpp).
inline constexpr const char* kPlanFile = "/var/lib/hpcbake/plan.json"; // the plan install runs (install/plan_file.hpp)
inline constexpr const char* kPlanMemo = "/var/lib/hpcbake/plan-memo.json";
inline constexpr const char* kVerifyRecord = "/var/lib/hpcbake/verify.json";
// `verify --boot`: the node's health verdict for monitoring and start tasks (verify/node_state.hpp).
inline constexpr const char* kNodeState = "/var/lib/hpcbake/node-state.json";
// Where Debian's prometheus-node-exporter reads textfile metrics (its README.textfile).
inline constexpr const char* kNodeExporterTextfileDir = "/var/lib/prometheus/node-exporter";
inline constexpr const char* kVerifyInstallReport = "/var/lib/hpcbake/verify-install.json";
inline constexpr const char* kImageManifest = "/var/lib/hpcbake/image-manifest.json";
// The first boot's verdict on an image whose hardware checks were deferred (verify --boot).
inline constexpr const char* kHardwareVerdict = "/var/lib/hpcbake/hardware-verdict.json";
inline constexpr const char* kWorkDir = "/var/lib/hpcbake/work";
inline constexpr const char* kKeyDir = "/var/lib/hpcbake/signing";
inline constexpr const char* kCacheDir = "/var/cache/hpcbake";
inline constexpr const char* kLockFile = "/run/hpcbake/install.lock";
inline constexpr const char* kInstallLog = "/var/log/hpcbake/install.log";
// A failed DKMS build's make.log, kept after the build is rolled back.
inline constexpr const char* kDkmsLogDir = "/var/log/hpcbake/dkms";
inline constexpr const char* kResumeUnitName = "hpcbake-resume.service";
inline constexpr const char* kResumeUnit = "/etc/systemd/system/hpcbake-resume.service";
inline constexpr const char* kResumeDropIn = "/etc/systemd/system/hpcbake-resume.service.d/50-hpcbake-install.conf";
inline constexpr const char* kResumeUnitWants = "/etc/systemd/system/multi-user.target.wants/hpcbake-resume.service";
inline constexpr const char* kWaagentConf = "/etc/waagent.conf";
inline constexpr const char* kBootId = "/proc/sys/kernel/random/boot_id";
inline constexpr const char* kModulesLoadDir = "/etc/modules-load.d";
inline constexpr const char* kSystemdUnitDir = "/etc/systemd/system";
// Vendor repositories (repo::): the pinned key and the package manager's source file.
inline constexpr const char* kAptKeyringDir = "/usr/share/keyrings";        // hpcbake-<id>.gpg
inline constexpr const char* kAptSourcesDir = "/etc/apt/sources.list.d";    // hpcbake-<id>.sources
inline constexpr const char* kAptPreferencesDir = "/etc/apt/preferences.d"; // hpcbake-<component>.pref
inline constexpr const char* kRpmKeyDir = "/etc/pki/rpm-gpg";               // RPM-GPG-KEY-hpcbake-<id>
inline constexpr const char* kDnfReposDir = "/etc/yum.repos.d";             // hpcbake-<id>.repo
// A repository carried by an offline bundle, copied out of the cache: <dir>/<id>/, its signing key
// there as kRepoMirrorKey. It stays after the install: the source file names it.
inline constexpr const char* kRepoMirrorDir = "/var/lib/hpcbake/repos";
inline constexpr const char* kRepoMirrorKey = "hpcbake-repository-key";

} // namespace hpcbake::paths
