#include "fetch/jobs.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;

namespace {

manifest::PinnedArtifact art(const std::string& name, std::optional<std::string> sha = std::nullopt) {
  manifest::Artifact a;
  a.name = name;
  a.urls = {"https://example.invalid/" + name};
  a.sha256 = std::move(sha);
  return {"c", "1", a};
}

const std::string kA(64, 'a'), kB(64, 'b');

} // namespace

TEST_CASE("jobs: --sha256 pins every unpinned artifact of a plan with two or more") {
  const std::vector<manifest::PinnedArtifact> plan = {art("driver.run"), art("fm.deb"), art("doca.deb", kB)};
  auto pins = fetch::parse_sha256_pins({"driver.run=" + kA, "fm.deb=" + kB}, plan);
  REQUIRE(pins);
  CHECK(pins->size() == 2);
  // One artifact at a time, as install fetches, with the pins of the whole plan.
  for (const auto& pa : plan) {
    auto jobs = fetch::jobs_for({pa}, *pins, fetch::Unpinned::refuse);
    REQUIRE_MESSAGE(jobs, pa.artifact.name);
    CHECK(jobs->size() == 1);
  }
  auto all = fetch::jobs_for(plan, *pins, fetch::Unpinned::refuse);
  REQUIRE(all);
  CHECK(all->at(0).sha256 == kA);
  CHECK(all->at(1).sha256 == kB);
}

TEST_CASE("jobs: a --sha256 that names no artifact says which, and lists the plan's") {
  auto pins = fetch::parse_sha256_pins({"driver.run=" + kA, "typo.run=" + kA}, {art("driver.run"), art("fm.deb")});
  REQUIRE_FALSE(pins);
  CHECK(pins.error().kind == ErrorKind::usage);
  CHECK(pins.error().message.find("typo.run") != std::string::npos);
  CHECK(pins.error().hint.find("driver.run, fm.deb") != std::string::npos);
}

TEST_CASE("jobs: a --sha256 cannot replace a pin, be malformed, or be given twice differently") {
  const std::vector<manifest::PinnedArtifact> plan = {art("doca.deb", kB), art("driver.run")};
  CHECK_FALSE(fetch::parse_sha256_pins({"doca.deb=" + kA}, plan));
  CHECK(fetch::parse_sha256_pins({"doca.deb=" + kB}, plan)); // agreeing with the pin is fine
  CHECK_FALSE(fetch::parse_sha256_pins({"driver.run=" + std::string(64, 'A')}, plan));
  CHECK_FALSE(fetch::parse_sha256_pins({"driver.run"}, plan));
  CHECK_FALSE(fetch::parse_sha256_pins({"driver.run=" + kA, "driver.run=" + kB}, plan));
  CHECK(fetch::parse_sha256_pins({"driver.run=" + kA, "driver.run=" + kA}, plan));
  auto unpinned = fetch::jobs_for(plan, fetch::Sha256Pins{}, fetch::Unpinned::refuse);
  REQUIRE_FALSE(unpinned);
  CHECK(unpinned.error().message.find("driver.run") != std::string::npos);
  auto skipped = fetch::jobs_for(plan, fetch::Sha256Pins{}, fetch::Unpinned::skip);
  REQUIRE(skipped);
  CHECK(skipped->size() == 1);
}
