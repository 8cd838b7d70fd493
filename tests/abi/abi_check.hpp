#pragma once
// Type and name rules for ctest abi/nvidia-headers (nvidia_abi.cpp, nvidia_names.cpp): is a
// declaration hpcbake makes by hand (src/verify/nvml.hpp, cuda.hpp and their entry-point tables)
// the one NVIDIA's header makes? Everything here is constexpr, so a mismatch is a failed
// static_assert that names the declaration.
#include <cstddef>
#include <string_view>
#include <type_traits>
#include <utility>

namespace abi {

// The NVIDIA type a hand-declared struct or opaque handle stands for (HPCBAKE_ABI_STRUCT,
// HPCBAKE_ABI_OPAQUE in nvidia_abi.cpp specialize it).
template <class Ours> struct nvidia_of {};
template <class Ours, class = void> struct has_nvidia : std::false_type {};
template <class Ours> struct has_nvidia<Ours, std::void_t<typename nvidia_of<Ours>::type>> : std::true_type {};

template <class Ours, class Theirs> consteval bool compatible();

// What a pointer of ours may point to where NVIDIA's points to `Theirs`: the same qualifiers and a
// compatible type.
template <class Ours, class Theirs> consteval bool compatible_pointee() {
  if constexpr (std::is_const_v<Ours> != std::is_const_v<Theirs> ||
                std::is_volatile_v<Ours> != std::is_volatile_v<Theirs>)
    return false;
  else
    return compatible<std::remove_cv_t<Ours>, std::remove_cv_t<Theirs>>();
}

// One parameter, return value or field: the same type, or one of hpcbake's stand-ins for it:
// - a hand-declared struct or opaque handle for the NVIDIA type it is declared for (nvidia_of; a
//   struct's layout is checked on its own, a handle's never dereferenced);
// - an int (or unsigned) for an enum of the same size whose values it holds (GCC gives a C enum
//   with no negative value the underlying type unsigned int: the same register either way);
// - pointers by their pointees, arrays element-wise.
template <class Ours, class Theirs> consteval bool compatible() {
  if constexpr (std::is_same_v<Ours, Theirs>)
    return true;
  else if constexpr (has_nvidia<Ours>::value)
    return std::is_same_v<typename nvidia_of<Ours>::type, Theirs>;
  else if constexpr (std::is_enum_v<Theirs> && (std::is_same_v<Ours, int> || std::is_same_v<Ours, unsigned>))
    return sizeof(Ours) == sizeof(Theirs) && alignof(Ours) == alignof(Theirs) &&
           (std::is_same_v<std::underlying_type_t<Theirs>, int> ||
            std::is_same_v<std::underlying_type_t<Theirs>, unsigned>);
  else if constexpr (std::is_pointer_v<Ours> && std::is_pointer_v<Theirs>)
    return compatible_pointee<std::remove_pointer_t<Ours>, std::remove_pointer_t<Theirs>>();
  else if constexpr (std::is_array_v<Ours> && std::is_array_v<Theirs>)
    return std::extent_v<Ours> == std::extent_v<Theirs> &&
           compatible<std::remove_extent_t<Ours>, std::remove_extent_t<Theirs>>();
  else
    return false;
}

template <class F> struct signature;
template <class R, class... A> struct signature<R (*)(A...)> {
  using ret = R;
  template <class R2, class... B> static consteval bool same_as(signature<R2 (*)(B...)>) {
    if constexpr (sizeof...(A) != sizeof...(B))
      return false;
    else
      return compatible<R, R2>() && (compatible<A, B>() && ...);
  }
};

// A member of hpcbake's Api (a function pointer) against &symbol from NVIDIA's header.
template <class Ours, class Theirs> consteval bool same_prototype() {
  return signature<Ours>::same_as(signature<Theirs>{});
}

// A hand-declared constant against NVIDIA's enumerator or macro: the same value.
template <class A, class B> consteval bool same_value(A ours, B theirs) {
  auto plain = [](auto v) {
    if constexpr (std::is_enum_v<decltype(v)>)
      return static_cast<std::underlying_type_t<decltype(v)>>(v);
    else
      return v;
  };
  return std::cmp_equal(plain(ours), plain(theirs));
}

// "_v3" -> 3; no suffix -> 1 (NVIDIA's first version has none).
consteval int version_of(std::string_view name) {
  const auto at = name.rfind("_v");
  if (at == std::string_view::npos || at + 2 == name.size()) return 1;
  int v = 0;
  for (char c : name.substr(at + 2)) {
    if (c < '0' || c > '9') return 1;
    v = v * 10 + (c - '0');
  }
  return v;
}

// `name` is `api` or a version of it (`api_vN`).
consteval bool is_version_of(std::string_view name, std::string_view api) {
  if (name == api) return true;
  return name.size() > api.size() + 2 && name.starts_with(api) && name.substr(api.size(), 2) == "_v" &&
         version_of(name) > 1;
}

} // namespace abi

#define HPCBAKE_ABI_STR(x) #x
#define HPCBAKE_ABI_XSTR(x) HPCBAKE_ABI_STR(x)
