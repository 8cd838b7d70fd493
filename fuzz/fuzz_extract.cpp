// Archive extraction (archive::extract_file): tar in every compression libarchive reads here,
// and zip, compression bombs included (stopped by the byte and expansion-ratio limits). Each input is written to a file
// and extracted into a fresh directory; the Jail then proves nothing was created outside it (no `..`, absolute name,
// symlink or hard link escape), that a failed extraction left nothing behind, and removes the tree.
#include "archive/extract.hpp"
#include "fuzz_util.hpp"

using namespace hpcbake_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Jail jail;
  static const fs::path input = scratch() / "input.archive";
  write_file(input, as_text(data, size));
  jail.begin();
  hpcbake::archive::ExtractOptions options;
  // Small limits: an input may declare gigabytes; the limits must stop it, and quickly.
  options.limits.max_total_bytes = 8u << 20;
  options.limits.max_entry_bytes = 4u << 20;
  options.limits.max_entries = 2000;
  // The expansion ratio is judged past 1 MiB (not 64 MiB), so that bombs the size of a seed
  // reach it before the byte limits do.
  options.limits.ratio_floor_bytes = 1u << 20;
  const auto result = hpcbake::archive::extract_file(input, jail.dest(), options);
  if (result) check(result->bytes <= options.limits.max_total_bytes, "extraction wrote more than max_total_bytes");
  if (result) check(result->verified.empty(), "a plain archive reported verified checksums");
  jail.end(result.has_value(), {input});
  return 0;
}
