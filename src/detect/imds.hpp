#pragma once
// The Azure Instance Metadata Service (IMDS): the VM size and a few identity facts.
// Absence of the service means "not on Azure", reported as a fact, never an error.
#include "util/error.hpp"
#include "util/http.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace hpcbake::detect {

inline constexpr const char* default_imds_url = "http://169.254.169.254/metadata/instance?api-version=2021-02-01";

struct ImdsOptions {
  std::string disabled_reason = "--no-imds"; // said when !enabled: "not queried (<reason>)"
  std::string url = default_imds_url;        // flag --imds-url, env HPCBAKE_IMDS_URL
  bool enabled = true;                       // --no-imds
  int attempts = 3;
  long connect_timeout_ms = 1000;
  long timeout_ms = 2000;
  long backoff_ms = 200; // doubled after each failed attempt
};

struct ImdsFacts {
  bool queried = false;
  bool on_azure = false;
  std::string source; // the endpoint (query string removed)
  std::string status; // why not on Azure, or "ok"
  std::string vm_size;
  std::string location;
  std::string vm_id;
  std::string zone;
  std::optional<nlohmann::json> security_profile;
};

// Parses the JSON document the service returns for /metadata/instance.
Result<ImdsFacts> parse_imds(std::string_view body, std::string source);

// GET with "Metadata: true", bypassing any proxy, short timeouts, a few retries on
// transport errors, 429 and 5xx; 4xx other than 429 is final.
ImdsFacts query_imds(util::HttpClient& http, const ImdsOptions& options);

} // namespace hpcbake::detect
