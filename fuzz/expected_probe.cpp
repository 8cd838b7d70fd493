// Compiled in the fuzz build only (clang, with __cpp_concepts defined as g++ defines it; see
// the top-level CMakeLists.txt): proves at compile time that libstdc++'s std::expected,
// read by clang, has the special members g++ gives it, so that the fuzzed code is the code
// g++ builds. The values were checked against g++ 12 with the same assertions.
#include <expected>
#include <string>
#include <type_traits>
#include <vector>

namespace {
struct Error {
  std::string message;
};
template <typename T>
constexpr bool trivial = std::is_trivially_destructible_v<T>&& std::is_trivially_copy_constructible_v<T>&&
    std::is_trivially_move_constructible_v<T>;
static_assert(trivial<std::expected<int, int>>);
static_assert(trivial<std::expected<void, int>>);
static_assert(!std::is_trivially_destructible_v<std::expected<std::string, Error>>);
static_assert(!std::is_trivially_destructible_v<std::expected<void, Error>>);
static_assert(!std::is_trivially_destructible_v<std::expected<int, Error>>);
static_assert(std::is_copy_constructible_v<std::expected<std::vector<std::string>, Error>>);
static_assert(std::is_copy_assignable_v<std::expected<std::vector<std::string>, Error>>);
static_assert(std::is_nothrow_move_constructible_v<std::expected<std::vector<std::string>, Error>>);
} // namespace
