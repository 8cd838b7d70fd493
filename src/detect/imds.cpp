#include "detect/imds.hpp"

#include "util/strings.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <chrono>
#include <thread>

namespace hpcbake::detect {

namespace {
std::string string_at(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}
} // namespace

Result<ImdsFacts> parse_imds(std::string_view body, std::string source) {
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    return fail(ErrorKind::unsupported, fmt::format("{}: the metadata service answered with invalid JSON", source));
  auto compute = doc.find("compute");
  if (!doc.is_object() || compute == doc.end() || !compute->is_object())
    return fail(ErrorKind::unsupported, fmt::format("{}: no 'compute' object in the metadata document", source));
  ImdsFacts f;
  f.queried = true;
  f.source = std::move(source);
  f.vm_size = string_at(*compute, "vmSize");
  if (f.vm_size.empty())
    return fail(ErrorKind::unsupported, fmt::format("{}: 'compute.vmSize' is missing or not a string", f.source));
  f.on_azure = true;
  f.status = "ok";
  f.location = string_at(*compute, "location");
  f.vm_id = string_at(*compute, "vmId");
  f.zone = string_at(*compute, "zone");
  if (auto sp = compute->find("securityProfile"); sp != compute->end() && sp->is_object()) f.security_profile = *sp;
  return f;
}

ImdsFacts query_imds(util::HttpClient& http, const ImdsOptions& options) {
  ImdsFacts facts;
  facts.source = util::redact_url(options.url);
  if (!options.enabled) {
    facts.status = "not queried (" + options.disabled_reason + ")";
    return facts;
  }
  facts.queried = true;
  util::HttpRequest req;
  req.url = options.url;
  req.headers = {"Metadata: true"};
  req.connect_timeout_ms = options.connect_timeout_ms;
  req.timeout_ms = options.timeout_ms;
  req.bypass_proxy = true;
  long backoff = options.backoff_ms;
  std::string last;
  for (int attempt = 1; attempt <= options.attempts; ++attempt) {
    auto resp = http.get(req);
    if (resp && resp->status == 200) {
      auto parsed = parse_imds(resp->body, facts.source);
      if (parsed) return *parsed;
      facts.status = "not on Azure: " + parsed.error().message;
      return facts;
    }
    if (resp) {
      last = fmt::format("HTTP {}", resp->status);
      if (resp->status != 429 && resp->status < 500) break; // 4xx: asking again will not help
    } else {
      last = resp.error().message;
    }
    if (attempt < options.attempts) {
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
      backoff *= 2;
    }
  }
  facts.status = fmt::format("not on Azure: no metadata service answer ({})", last);
  return facts;
}

} // namespace hpcbake::detect
