#pragma once
// Whether a path hpcbake acts on as root could have been changed by someone else. hpcbake runs
// commands as root from what it reads (manifests name packages, repositories and initramfs
// commands; recipes name installers; the journal decides what is skipped; the cache holds the
// installers it runs), so whoever can write any of it can run code as root.
//
// The rule (OpenSSH's StrictModes, with the sticky-directory exception):
//   - PATH and every directory above it, up to "/", must be owned by root or by `trusted_uid`
//     (the effective uid: a test suite's fixture trees belong to whoever runs it), and must not
//     be writable by group or others;
//   - a directory *above* PATH that group or others can write is accepted only when it has the
//     sticky bit (/tmp, mode 1777): others can add entries there but cannot rename, remove or
//     replace ours;
//   - symbolic links are held to the owner rule only (their mode means nothing); the chain is
//     checked both as written and as resolved, so a link and the directory it leads to are both
//     covered;
//   - with `depth` > 0, what is inside PATH is held to the same rule, that many levels down
//     (-1: all of it), without following symbolic links out of it (a link inside is checked,
//     then the path it resolves to, with its own chain);
//   - a PATH that does not exist yet: the directories above it that do exist are checked (who
//     could create it).
// Group-writable is refused even for group root, as StrictModes does: simpler to state and to
// check, and no distro ships hpcbake's directories that way.
#include "util/error.hpp"

#include <sys/types.h>

#include <filesystem>
#include <string>

namespace hpcbake::util {

struct TrustOptions {
  uid_t trusted_uid = 0; // besides root; callers pass geteuid()
  int depth = 0;         // 0: PATH and the directories above it; N: N levels inside too; -1: everything
  std::string what;      // what PATH is, for the message: "manifest directory"
  std::string remedy;    // a second way out for the hint: "or point --manifests at a root-owned copy"
};

// ErrorKind::permission naming the offending path, its owner and mode, and the chmod/chown
// that fixes it; ErrorKind::internal when a path cannot even be examined.
Status check_trusted_path(const std::filesystem::path& path, const TrustOptions& options);

// A private key's file: a regular file (not a symbolic link) owned by root or `trusted_uid`,
// and neither readable nor writable by group or others (0600 or stricter). Missing: no error
// (the caller reports it in its own words).
Status check_private_file(const std::filesystem::path& path, uid_t trusted_uid, const std::string& what);

// "mode 0775, owner uid 1000 (alice)": how a refusal describes a file.
std::string describe_owner_and_mode(uid_t uid, unsigned mode);

} // namespace hpcbake::util
