// The install journal's loader: strict about what it reads, and never misreads a journal from
// a newer hpcbake as its own (regression: 2^32 + 1 used to wrap to version 1).
#include "install/journal.hpp"

#include <doctest/doctest.h>

using hpcbake::install::journal_from_json;
using nlohmann::json;

TEST_CASE("install journal: round trip, and what is refused") {
  hpcbake::install::Journal j;
  j.size = "Standard_Test2_v1";
  j.state = hpcbake::install::RunState::reboot_required;
  j.steps["verify"].status = hpcbake::install::StepStatus::reboot_pending;
  j.steps["verify"].boot_id = "boot-1";
  auto back = journal_from_json(hpcbake::install::to_json(j), "state.json");
  REQUIRE(back.has_value());
  CHECK(back->state == hpcbake::install::RunState::reboot_required);
  CHECK(back->steps.at("verify").boot_id == "boot-1");

  for (const char* text : {R"({"version": 4294967297, "steps": {}})", R"({"version": 2, "steps": {}})"}) {
    CAPTURE(text);
    auto r = journal_from_json(json::parse(text), "state.json");
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("newer hpcbake") != std::string::npos);
  }
  for (const char* text : {R"({"version": 0, "steps": {}})", R"({"version": 1})",
                           R"({"version": 1, "steps": {"x": {"status": "half-done"}}})",
                           R"({"version": 1, "steps": {"x": {"status": "done", "attempts": -1}}})"}) {
    CAPTURE(text);
    auto r = journal_from_json(json::parse(text), "state.json");
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("state.json") != std::string::npos);
    CHECK_FALSE(r.error().hint.empty());
  }
}
