// The install journal (install::load_journal, which parses JSON and calls
// journal_from_json). Properties: a journal that loads declares a version this hpcbake reads
// (the header's contract: a newer one is refused, never misread), and it survives a
// to_json/journal_from_json round trip unchanged (install rewrites it after every step, so a
// lossy field would drift over a run).
#include "fuzz_util.hpp"
#include "install/journal.hpp"

using namespace hpcbake_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path file = scratch() / "state.json";
  write_file(file, as_text(data, size));
  auto j = hpcbake::install::load_journal(file);
  if (!j) {
    check(!j.error().message.empty(), "an error without a message");
    return 0;
  }
  const auto raw = nlohmann::json::parse(as_text(data, size), nullptr, false);
  const auto& v = raw.at("version");
  check(v.is_number_unsigned() ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hpcbake::install::kJournalVersion)
                               : v.get<std::int64_t>() <= hpcbake::install::kJournalVersion,
        "a journal of version " + v.dump() + " was accepted; this hpcbake reads up to version 1");
  const auto doc = hpcbake::install::to_json(*j);
  auto again = hpcbake::install::journal_from_json(doc, file.string());
  check(again.has_value(),
        "a loaded journal does not load again after to_json: " + (again ? std::string() : again.error().message));
  check(hpcbake::install::to_json(*again) == doc, "a journal changed in a to_json/journal_from_json round trip");
  return 0;
}
