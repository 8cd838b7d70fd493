#pragma once
// What the fake vendor libraries pretend, read from environment variables so each CLI test
// picks its scenario per process. Documented in tests/fakes/README.md.
#include <cstdlib>
#include <string>
#include <vector>

namespace fake {

inline std::string env(const char* name, const std::string& fallback = {}) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

inline long env_long(const char* name, long fallback) {
  const std::string v = env(name);
  return v.empty() ? fallback : std::strtol(v.c_str(), nullptr, 10);
}

inline double env_double(const char* name, double fallback) {
  const std::string v = env(name);
  return v.empty() ? fallback : std::strtod(v.c_str(), nullptr);
}

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// "I:N" pairs ("1:3,4:1"): the value for index i, or fallback.
inline long indexed(const char* name, long index, long fallback) {
  for (const auto& item : split(env(name), ',')) {
    auto kv = split(item, ':');
    if (kv.size() == 2 && std::strtol(kv[0].c_str(), nullptr, 10) == index)
      return std::strtol(kv[1].c_str(), nullptr, 10);
  }
  return fallback;
}

// Fabric Manager: "ready" (default), "never" (training forever in progress), "not_started",
// "unsupported" (NVML_ERROR_NOT_SUPPORTED), "state_unsupported" (success, state NOT_SUPPORTED).
inline std::string fabric_manager() {
  return env("FAKE_FM", "ready");
}

} // namespace fake
