// Shape helpers: printing, element counts, C-order strides, broadcasting, axes.
#include "kiln/shape.hpp"

#include <ostream>
#include <string>

#include "core/iteration.hpp"
#include "kiln/error.hpp"

namespace kiln {

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  if (s.size() == 1) out += ",";
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << shape_str(s); }

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size(), 1);
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i] > 0 ? s[i] : 1;
  }
  return st;
}

void detail::throw_rank_error(const std::string& op, const Shape& shape) {
  throw ShapeError(op + ": an operand of shape " + shape_str(shape) + " has " + std::to_string(shape.size()) +
                   " dimensions, more than the " + std::to_string(kMaxRank) +
                   " kiln ops support (kiln::kMaxRank); reshape it to at most " + std::to_string(kMaxRank) +
                   " dimensions first (merge or squeeze axes)");
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t ea = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t eb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (ea != eb && ea != 1 && eb != 1)
      throw ShapeError(std::string(op) + ": operands could not be broadcast together with shapes " + shape_str(a) +
                       " and " + shape_str(b) + " (axis " + std::to_string(i) + ": " + std::to_string(ea) + " vs " +
                       std::to_string(eb) + "); reshape or expand_dims one operand so each axis matches or is 1");
    out[i] = ea == 1 ? eb : ea;
  }
  return out;
}

int64_t normalize_axis(int64_t axis, int64_t ndim, const char* op) {
  if (axis < -ndim || axis >= ndim)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " is out of bounds for an array of ndim " +
                     std::to_string(ndim) + "; valid axes are " + std::to_string(-ndim) + " .. " +
                     std::to_string(ndim - 1));
  return axis < 0 ? axis + ndim : axis;
}

}  // namespace kiln
