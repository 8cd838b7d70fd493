// The makeself header reader (archive::read_makeself_header) and, for inputs whose header
// reads, extraction of the payloads it declares (archive::extract_makeself, which checks
// the CRC/MD5/SHA-256 the header carries while extracting), confined as in fuzz_extract.
#include "archive/makeself.hpp"
#include "fuzz_util.hpp"

using namespace hpcbake_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Jail jail;
  static const fs::path input = scratch() / "input.run";
  write_file(input, as_text(data, size));
  const auto info = hpcbake::archive::read_makeself_header(input);
  if (!info) return 0;
  // What a successful parse promises.
  check(info->payload_offset <= size, "payload offset past the end of the file");
  check(!info->filesizes.empty(), "no payload sizes");
  check(!info->makeself_version.empty(), "no makeself version");
  jail.begin();
  hpcbake::archive::ExtractOptions options;
  options.limits.max_total_bytes = 8u << 20;
  options.limits.max_entry_bytes = 4u << 20;
  options.limits.max_entries = 2000;
  options.limits.ratio_floor_bytes = 1u << 20; // as in fuzz_extract: seed-sized bombs reach the ratio
  const auto result = hpcbake::archive::extract_makeself(input, jail.dest(), options);
  // "Verified" names exactly the checksums the header carries: none claimed without one.
  if (result)
    check(result->verified.empty() == (info->crc.empty() && info->md5.empty() && info->sha256.empty()),
          "the checksums reported verified are not the ones the header carries");
  jail.end(result.has_value(), {input});
  return 0;
}
