// EFI_SIGNATURE_LISTs (driver::parse_signature_lists): the firmware's db and shim's MokList, from
// which Secure Boot trust is decided (which certificate lets a module load). The input is read
// as a list (MokListRT in shim's configuration table) and as an efivarfs variable (four bytes of
// attributes, then the lists: how read_mok_state reads db). Properties: a refusal says why; an
// accepted list's entries fit in it (every entry is more than its 16-byte owner GUID); every
// certificate read holds its DER, which reads back as the same certificate.
#include "driver/mok.hpp"
#include "fuzz_util.hpp"

using namespace hpcbake_fuzz;

namespace {

void read_as(std::string_view d) {
  auto lists = hpcbake::driver::parse_signature_lists(d, "db");
  if (!lists) {
    check(!lists.error().message.empty(), "a refusal without a message");
    return;
  }
  const std::size_t entries = lists->certificates.size() + static_cast<std::size_t>(lists->hashes);
  check(lists->hashes >= 0 && entries * 17 <= d.size(), "more entries than the data can hold");
  for (const auto& c : lists->certificates) {
    check(!c.der.empty() && c.der.size() < d.size(), "a certificate whose DER is not in the list");
    auto back = hpcbake::driver::parse_certificate(c.der);
    check(back.has_value() && back->serial == c.serial && back->subject == c.subject && back->issuer == c.issuer &&
              back->ca == c.ca,
          "a certificate that reads differently from its own DER");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto d = as_text(data, size);
  read_as(d);
  if (d.size() > 4) read_as(d.substr(4));
  return 0;
}
