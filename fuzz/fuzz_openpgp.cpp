// The OpenPGP key reader (repo::read_key_file, repo::verify_pinned_key): it decides which key apt
// and dnf are told to trust for a vendor's repository. Properties: reading is deterministic; a
// file that starts with a packet header is read as binary, never as armor (a user ID may hold
// armor text); an accepted file holds at least one primary key, every primary key and subkey has
// a fingerprint of upper-case hex, 40 digits for v4 and 64 for v6; the de-armored packets (what a
// Signed-By keyring gets) read back as the same keys; and a key is accepted for a pin P exactly
// when the file holds one primary key and its fingerprint is P (tried with the file's own first
// fingerprint, in two spellings, and with a pin that matches nothing).
#include "fuzz_util.hpp"
#include "repo/openpgp.hpp"
#include "util/strings.hpp"

#include <algorithm>
#include <cctype>

using namespace hpcbake_fuzz;
using hpcbake::repo::KeyFile;

namespace {

bool is_fingerprint(const std::string& fp, int version) {
  const std::size_t want = version == 4 ? 40 : version == 6 ? 64 : 0;
  return want != 0 && fp.size() == want &&
         std::all_of(fp.begin(), fp.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); });
}

bool same_keys(const KeyFile& a, const KeyFile& b) {
  if (a.keys.size() != b.keys.size()) return false;
  for (std::size_t i = 0; i < a.keys.size(); ++i) {
    const auto &x = a.keys[i], &y = b.keys[i];
    if (x.fingerprint != y.fingerprint || x.version != y.version || x.subkeys != y.subkeys || x.user_ids != y.user_ids)
      return false;
  }
  return true;
}

std::string lower_spaced(const std::string& fp) {
  std::string out;
  for (std::size_t i = 0; i < fp.size(); ++i) {
    if (i && i % 4 == 0) out += ' ';
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(fp[i])));
  }
  return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = as_text(data, size);
  auto kf = hpcbake::repo::read_key_file(text, "key.asc");
  auto again = hpcbake::repo::read_key_file(text, "key.asc");
  check(kf.has_value() == again.has_value(), "the same file read two ways");
  if (kf) {
    check(same_keys(*kf, *again) && kf->binary == again->binary, "the same file read as different keys");
    // A packet header has the high bit set; armor is text: a binary file is never read as armor.
    check(!(static_cast<unsigned char>(text[0]) & 0x80) || !kf->armored, "a binary key file read as armored");
    check(!kf->keys.empty(), "a key file accepted without a primary key");
    for (const auto& k : kf->keys) {
      check(is_fingerprint(k.fingerprint, k.version), "a malformed fingerprint: " + k.fingerprint);
      for (const auto& s : k.subkeys)
        check(s.size() == 40 || s.size() == 64, "a malformed subkey fingerprint: " + s);
    }
    auto bin = hpcbake::repo::read_key_file(kf->binary, "key.gpg");
    check(bin.has_value() && same_keys(*kf, *bin) && bin->binary == kf->binary,
          "the de-armored packets read as different keys");
  } else {
    check(!kf.error().message.empty(), "a refusal without a message");
  }
  std::vector<std::string> pins = {std::string(40, '0')};
  if (kf) pins.insert(pins.end(), {kf->keys.front().fingerprint, lower_spaced(kf->keys.front().fingerprint)});
  for (const auto& pin : pins) {
    auto v = hpcbake::repo::verify_pinned_key(text, pin, "key.asc");
    const bool expected =
        kf && kf->keys.size() == 1 && kf->keys.front().fingerprint == hpcbake::util::normalize_fingerprint(pin);
    check(v.has_value() == expected, "a key accepted (or refused) against its pin: " + pin);
    if (v) check(same_keys(*v, *kf), "the pinned key read differently");
  }
  return 0;
}
