#include "util/json.hpp"

#include <nlohmann/json.hpp>

namespace hpcbake::util {

std::string dump_json(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace hpcbake::util
