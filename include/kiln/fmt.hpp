// fmt::formatter specialisations for kiln's value types, so that
// fmt::format("{} {} {}", x.shape(), x.device(), x.dtype()) gives "(2, 3) cuda:0 float32".
// Include this header only where fmt is used: kiln.hpp does not include it, so
// kiln's users need fmt's headers only when they ask for them.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "kiln/array.hpp"
#include "kiln/device.hpp"
#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"

/// Formats a Shape as shape_str: "(2, 3)"; string format specs (width, alignment) apply.
template <>
struct fmt::formatter<kiln::Shape> : fmt::formatter<std::string_view> {
  template <class Context>
  auto format(const kiln::Shape& s, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(kiln::shape_str(s), ctx);
  }
};

/// Formats a Device as Device::str(): "cpu", "cuda:1".
template <>
struct fmt::formatter<kiln::Device> : fmt::formatter<std::string_view> {
  template <class Context>
  auto format(const kiln::Device& d, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(d.str(), ctx);
  }
};

/// Formats a DType as dtype_name: "float32".
template <>
struct fmt::formatter<kiln::DType> : fmt::formatter<std::string_view> {
  template <class Context>
  auto format(kiln::DType t, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(kiln::dtype_name(t), ctx);
  }
};
