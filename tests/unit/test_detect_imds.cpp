#include "detect/imds.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

#include <deque>

using namespace hpcbake;

namespace {
// A scripted HttpClient: returns the queued answers in order and records requests.
class ScriptedHttp final : public util::HttpClient {
public:
  std::deque<Result<util::HttpResponse>> answers;
  std::vector<util::HttpRequest> requests;
  Result<util::HttpResponse> get(const util::HttpRequest& r) override {
    requests.push_back(r);
    auto a = answers.front();
    answers.pop_front();
    return a;
  }
};

detect::ImdsOptions fast() {
  detect::ImdsOptions o;
  o.backoff_ms = 1;
  return o;
}
} // namespace

TEST_CASE("a full metadata document yields size, location, vmId and securityProfile") {
  auto f = detect::parse_imds(test::slurp(test::fixtures() / "imds/nd96isr_h100_v5.json"), "imds");
  REQUIRE(f.has_value());
  CHECK(f->on_azure);
  CHECK(f->vm_size == "Standard_ND96isr_H100_v5");
  CHECK(f->location == "eastus");
  CHECK(f->vm_id.size() == 36);
  REQUIRE(f->security_profile.has_value());
  CHECK((*f->security_profile)["secureBootEnabled"] == "false");
  auto nv = detect::parse_imds(test::slurp(test::fixtures() / "imds/nv36ads_a10_v5.json"), "imds");
  REQUIRE(nv.has_value());
  CHECK((*nv->security_profile)["secureBootEnabled"] == "true");
}

TEST_CASE("malformed or incomplete documents are errors, not crashes") {
  CHECK_FALSE(detect::parse_imds(test::slurp(test::fixtures() / "imds/malformed.json"), "imds").has_value());
  CHECK_FALSE(detect::parse_imds("{\"compute\": {}}", "imds").has_value());
  CHECK_FALSE(detect::parse_imds("{\"compute\": {\"vmSize\": 5}}", "imds").has_value());
  CHECK_FALSE(detect::parse_imds("[]", "imds").has_value());
}

TEST_CASE("the request carries Metadata: true and bypasses proxies") {
  ScriptedHttp http;
  http.answers.push_back(util::HttpResponse{200, test::slurp(test::fixtures() / "imds/hb120rs_v3.json")});
  auto f = detect::query_imds(http, fast());
  CHECK(f.vm_size == "Standard_HB120rs_v3");
  REQUIRE(http.requests.size() == 1);
  CHECK(http.requests[0].headers == std::vector<std::string>{"Metadata: true"});
  CHECK(http.requests[0].bypass_proxy);
  CHECK(http.requests[0].url.find("api-version=2021-02-01") != std::string::npos);
}

TEST_CASE("503 and transport errors are retried, 404 is final") {
  ScriptedHttp http;
  http.answers.push_back(util::HttpResponse{503, ""});
  http.answers.push_back(fail(ErrorKind::fetch, "timeout"));
  http.answers.push_back(util::HttpResponse{200, test::slurp(test::fixtures() / "imds/hb120rs_v3.json")});
  CHECK(detect::query_imds(http, fast()).on_azure);
  CHECK(http.requests.size() == 3);

  ScriptedHttp h404;
  h404.answers.push_back(util::HttpResponse{404, ""});
  auto f = detect::query_imds(h404, fast());
  CHECK_FALSE(f.on_azure);
  CHECK(h404.requests.size() == 1);
  CHECK(f.status.find("HTTP 404") != std::string::npos);

  ScriptedHttp down;
  for (int i = 0; i < 3; ++i)
    down.answers.push_back(fail(ErrorKind::fetch, "Connection refused"));
  auto d = detect::query_imds(down, fast());
  CHECK_FALSE(d.on_azure);
  CHECK(down.requests.size() == 3);
  CHECK(d.status.find("not on Azure") != std::string::npos);
}

TEST_CASE("--no-imds asks nothing") {
  ScriptedHttp http;
  auto o = fast();
  o.enabled = false;
  auto f = detect::query_imds(http, o);
  CHECK_FALSE(f.queried);
  CHECK(http.requests.empty());
}
