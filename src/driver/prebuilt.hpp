#pragma once
// Prebuilt kernel modules: the plan's DKMS modules built and signed once per kernel release on a
// build host (`hpcbake bundle modules`), packed into one file, and installed on many nodes of
// that kernel without compiling (`plan`/`install --prebuilt`). NVIDIA's precompiled driver
// packages and AKS node images do the same: build once per kernel, ship the binaries.
//
// The file, schema 1: an uncompressed POSIX tar (pax), members in this order:
//   manifest.json                            the JSON below; always the first member
//   modules/<dkms_name>/<version>/<file>     each module file as DKMS built it (hpcbake_fixture.ko)
// manifest.json:
//   {"format": "hpcbake-prebuilt-modules", "schema": 1, "created_by": "hpcbake <version>",
//    "kernel": "6.1.0-56-amd64", "arch": "x86_64", "distro": "debian-12",
//    "signing": {"signed": true, "signer": "<CN>", "serial": "<hex>"}   (or {"signed": false}),
//    "packages": [{"component": "...", "dkms_name": "...", "version": "...",
//                  "source": "<artifact name>", "source_sha256": "<hex>",
//                  (a repository driver's package: "source" is the build host's
//                   /usr/src/NAME-VERSION and "source_sha256" its source_tree_sha256)
//                  "modules": [{"name": "hpcbake_fixture", "file": "hpcbake_fixture.ko",
//                               "sha256": "<hex>", "size": N, "vermagic": "...",
//                               "signer": "<CN or empty>", "sig_key": "<modinfo sig_key>"}]}]}
// Reading refuses, naming the member: a manifest that is not first, over 1 MiB, of another
// format or schema, or with a field missing or mistyped; a member path other than
// modules/<dkms_name>/<version>/<file> of a package and module the manifest lists (absolute
// paths, "..", anything not [A-Za-z0-9._+-~]); a member that is not a regular file (links,
// devices); a member twice; a listed module missing; a size or SHA-256 that differs; a
// truncated or damaged tar.
#include "driver/modinfo.hpp"
#include "driver/mok.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::driver {

inline constexpr const char* kPrebuiltFormat = "hpcbake-prebuilt-modules";
inline constexpr int kPrebuiltSchema = 1;

struct PrebuiltModule {
  std::string name;   // the module's name, as the plan lists it
  std::string file;   // its file name as DKMS built it: name.ko (or .ko.xz, .ko.zst, .ko.gz)
  std::string sha256; // of the file
  std::uint64_t size = 0;
  std::string vermagic, signer, sig_key; // what libkmod read when it was packed
};

struct PrebuiltPackage {
  std::string component, dkms_name, version;
  std::string source, source_sha256; // the plan's source artifact the modules were built from (or a package's tree)
  std::vector<PrebuiltModule> modules;
};

struct PrebuiltManifest {
  std::string created_by, kernel, arch, distro;
  bool is_signed = false;
  std::string signer, serial; // the certificate that signed every module (Certificate::serial spelling)
  std::vector<PrebuiltPackage> packages;

  const PrebuiltPackage* find(std::string_view dkms_name) const;
};

// The member path of a module: modules/<dkms_name>/<version>/<file>.
std::string prebuilt_member(const PrebuiltPackage& package, const PrebuiltModule& module);

nlohmann::json to_json(const PrebuiltManifest& manifest);
// `where` names the file in errors. Errors (ErrorKind::usage): not JSON, another format or
// schema, a field missing or of the wrong type, a name that cannot be a path component.
Result<PrebuiltManifest> parse_prebuilt_manifest(std::string_view text, std::string_view where);

// Writes `out` atomically (a temp file beside it, fsync, rename): manifest.json, then each
// module of each package from files[prebuilt_member(...)], whose size and SHA-256 must be the
// manifest's. Member times are SOURCE_DATE_EPOCH (or 0), so the same modules make the same file.
Status write_prebuilt(const std::filesystem::path& out, const PrebuiltManifest& manifest,
                      const std::map<std::string, std::filesystem::path>& files);

// The manifest only (the first member), checked; for the plan. Errors name the file.
Result<PrebuiltManifest> read_prebuilt_manifest(const std::filesystem::path& bundle);

// The whole file, every rule above checked; each module written to
// dir/<dkms_name>/<version>/<file> (dir is created and must not hold those files). On an error
// what was written is left in dir for the caller to remove.
Result<PrebuiltManifest> extract_prebuilt(const std::filesystem::path& bundle, const std::filesystem::path& dir);

// What a node wants of one package: this kernel release and architecture, this DKMS name and
// version, built from this source (its SHA-256), with these modules; signed or not.
struct PrebuiltWant {
  std::string kernel, arch, dkms_name, version, source_sha256;
  std::vector<std::string> modules;
  bool signing = false; // the plan signs its modules (Secure Boot, or a key given)
  // The source is a package's (a driver's -dkms package), not unpacked yet when the plan is made:
  // source_sha256 is not compared here, and install compares source_tree_sha256 once it is.
  bool source_after_unpack = false;
};

// Empty when the package for want.dkms_name fits; else why not, one sentence naming both sides.
std::string prebuilt_mismatch(const PrebuiltManifest& manifest, const PrebuiltWant& want);

// The digest of a module source tree, for sources a package installs (a -dkms package's
// /usr/src/NAME-VERSION), which have no artifact digest: SHA-256 over every regular file and
// symbolic link under `dir`, in byte order of their paths relative to it, each as
// "<path>\0<SHA-256 of its content>\n" (a link: "<path>\0-><target>\n"). Directories and
// modes are not part of it. Errors name the entry that cannot be read, and anything else
// (a device, a fifo).
Result<std::string> source_tree_sha256(const std::filesystem::path& dir);

// An extracted module against what the manifest says and the node needs: vermagic naming
// `kernel` and equal to the manifest's; when `cert` is given (the plan's signing certificate),
// signed by it (signer and serial, as the kernel checks the PKCS#7 issuer and serial).
Status check_prebuilt_module(const std::filesystem::path& ko, const PrebuiltModule& entry, const std::string& kernel,
                             const std::optional<Certificate>& cert);

} // namespace hpcbake::driver
