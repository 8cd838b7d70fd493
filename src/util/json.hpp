#pragma once
// JSON text for output, files and digests. nlohmann::json::dump throws (type_error.316) on a
// string that is not valid UTF-8, and such strings come from hosts (a Latin-1 PRETTY_NAME in
// os-release) and from files hpcbake did not write. Every dump in src/ goes through here, so
// those bytes become U+FFFD instead of an internal error; valid text is written unchanged.
#include <nlohmann/json_fwd.hpp>

#include <string>

namespace hpcbake::util {

// `j` as JSON text: compact with indent -1, else pretty-printed with `indent` spaces.
std::string dump_json(const nlohmann::json& j, int indent = -1);

// Members of a JSON object read from a file hpcbake did not write itself, or may not have:
// nlohmann's j.value(key, default) throws (type_error.302, .306) when the member has another
// type or `j` is not an object, which would turn a damaged file into an internal error. These
// return `fallback` then, as for a missing member, and the caller says what is wrong.
std::string string_member(const nlohmann::json& j, const char* key, const std::string& fallback = {});
long long int_member(const nlohmann::json& j, const char* key, long long fallback);

} // namespace hpcbake::util
