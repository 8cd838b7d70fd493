#pragma once
// OpenPGP public keys (RFC 4880 / RFC 9580), read natively: enough to pin a vendor's
// repository signing key by fingerprint before apt or dnf is told to trust it. A key file is
// fetched from the vendor (NVIDIA's 3bf863cc.pub, ...); it is accepted only when it holds
// exactly one primary key and that key's fingerprint is the manifest's pin. A keyring with a
// second primary key is refused: apt and dnf would trust every key in it.
#include "util/error.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::repo {

struct PublicKey {
  std::string fingerprint;           // upper-case hex: 40 digits (v4) or 64 (v6)
  int version = 0;                   // 4 or 6
  std::vector<std::string> subkeys;  // their fingerprints
  std::vector<std::string> user_ids; // as stored (UTF-8)
};

struct KeyFile {
  std::vector<PublicKey> keys; // primary keys, in file order
  std::string binary;          // the packets, de-armored (what a Signed-By .gpg keyring holds)
  bool armored = false;
};

// Reads an ASCII-armored ("-----BEGIN PGP PUBLIC KEY BLOCK-----") or binary key file.
// `label` names the file in errors. Errors (usage): not OpenPGP, a bad armor checksum, a
// truncated or malformed packet, a secret key, an unsupported key version.
Result<KeyFile> read_key_file(std::string_view data, const std::string& label);

// read_key_file, then: exactly one primary key, whose fingerprint equals `pinned` (in any
// spelling util::normalize_fingerprint accepts).
// Errors (kind fetch, as a checksum mismatch) name the fingerprints found and the pin.
Result<KeyFile> verify_pinned_key(std::string_view data, std::string_view pinned, const std::string& label);

} // namespace hpcbake::repo
