#include "util/json.hpp"

#include <climits>

#include <nlohmann/json.hpp>

namespace hpcbake::util {

std::string dump_json(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string string_member(const nlohmann::json& j, const char* key, const std::string& fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

long long int_member(const nlohmann::json& j, const char* key, long long fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return fallback;
  if (it->is_number_unsigned() && it->get<unsigned long long>() > static_cast<unsigned long long>(LLONG_MAX))
    return fallback;
  return it->get<long long>();
}

} // namespace hpcbake::util
