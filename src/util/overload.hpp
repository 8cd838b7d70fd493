#pragma once
// Overload{lambdas...}: one visitor for std::visit over a variant (the typed plan steps).
namespace hpcbake::util {

template <class... F> struct Overload : F... { using F::operator()...; };
template <class... F> Overload(F...) -> Overload<F...>;

} // namespace hpcbake::util
