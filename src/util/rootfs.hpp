#pragma once
// Host paths resolved inside a root directory, the way the host's own kernel would resolve them
// if the root were "/": an absolute symlink target starts again at the root, and ".." (in the
// path asked for or in a link's target) never climbs above it. So a fixture tree or a mounted
// image given as --root can never make hpcbake read or write this machine's files.
//
// One mechanism for every host path (HostFs uses it for all its reads and for resolve()):
//   - open_in_root: the kernel's openat2(2) with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS, from a
//     descriptor of the root. On kernels without openat2 (before 5.6: RHEL 8 runs 4.18), or where
//     a seccomp filter refuses it (ENOSYS, EPERM), the userspace walk below, which has the same
//     semantics;
//   - the walk: component by component with O_PATH | O_NOFOLLOW from the root's descriptor,
//     readlinkat on a symlink, an absolute target restarting at the root, ".." popping a stack of
//     the directories walked (never above the root), at most 40 links followed (the kernel's own
//     limit) and ELOOP beyond;
//   - resolve_in_root: the walk, answering with the names below the root that the path resolves
//     to (none of them a symlink) plus the part that does not exist yet, for code that needs a
//     path rather than a descriptor (writers, external commands).
#include "util/fd.hpp"

#include <expected>
#include <string>
#include <string_view>

namespace hpcbake::util {

// Which resolver open_in_root uses. `automatic`: openat2, falling back to the walk where the
// kernel lacks it. `walk`: always the walk. Tests force `walk` to exercise the fallback on a
// kernel that has openat2: set_in_root_resolver_for_tests, or the test hook TestHook::rootfs_walk
// set to "1" (util/test_hooks.hpp; read once).
enum class InRootResolver { automatic, walk };
void set_in_root_resolver_for_tests(InRootResolver resolver);

// The most symlinks one resolution follows: Linux's MAXSYMLINKS, so the walk fails exactly
// where openat2 does.
inline constexpr int kMaxSymlinks = 40;

// Opens `path` (a host path: absolute, or relative to the root, same thing) inside the root
// `root_fd` (a directory descriptor, O_PATH is enough) with open(2) `flags` (O_CLOEXEC is
// added; O_CREAT is not supported). The errno on failure: ENOENT, ENOTDIR, ELOOP (a loop or more
// than kMaxSymlinks links), EACCES...
std::expected<Fd, int> open_in_root(int root_fd, std::string_view path, int flags);

// Where `path` lands inside the root `root_fd`: "a/b/c" (no leading '/', "" for the root itself)
// whose existing components were resolved in the root and are not symlinks, followed by the
// components that do not exist yet (".." in those removes the previous missing one). The errno
// when it cannot be resolved (ELOOP, ENOTDIR, EACCES...).
std::expected<std::string, int> resolve_in_root(int root_fd, std::string_view path);

} // namespace hpcbake::util
