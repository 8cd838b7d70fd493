#pragma once
// The host's Secure Boot state, as detect reads it from efivars. Its spelling ("enabled",
// "disabled", "not-uefi", "unknown") is part of `detect --json` and of messages: to_string
// gives it, parse_secure_boot reads it back.
#include <optional>
#include <string_view>

namespace hpcbake::detect {

enum class SecureBoot {
  enabled,
  disabled,
  not_uefi, // legacy BIOS boot: no /sys/firmware/efi
  unknown,  // UEFI, but the SecureBoot variable could not be read
};

const char* to_string(SecureBoot state);
std::optional<SecureBoot> parse_secure_boot(std::string_view text);

} // namespace hpcbake::detect
