// Shape and strides: a small vector of int64 that keeps up to 6 entries inline
// (no heap allocation for the common case), plus helpers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

/// Most dimensions the operands of an op (elementwise, reduction, user kernel, fused function) may have;
/// past it the op throws ShapeError. Views (reshape, expand_dims, indexing) of any rank are fine.
inline constexpr int kMaxRank = 16;

/// A vector of int64 with inline room for 6 dimensions.
class Shape {
 public:
  static constexpr int kInline = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> v) { assign(v.begin(), v.end()); }
  explicit Shape(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }
  Shape(size_t n, int64_t value) { resize(n, value); }
  template <std::input_iterator It> Shape(It first, It last) { assign(first, last); }
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape& operator=(const Shape& o) {
    if (this != &o) { size_ = 0; assign(o.begin(), o.end()); }
    return *this;
  }
  Shape(Shape&& o) noexcept { *this = std::move(o); }
  Shape& operator=(Shape&& o) noexcept {
    if (this == &o) return *this;
    if (o.heap_) {
      heap_ = std::move(o.heap_); capacity_ = o.capacity_; size_ = o.size_;
      o.capacity_ = kInline; o.size_ = 0;
    } else {
      heap_.reset(); capacity_ = kInline; size_ = 0; assign(o.begin(), o.end());
    }
    return *this;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap_ ? heap_.get() : inline_; }
  const int64_t* data() const { return heap_ ? heap_.get() : inline_; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t& back() { return data()[size_ - 1]; }
  int64_t back() const { return data()[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= capacity_) return;
    auto fresh = std::make_unique<int64_t[]>(n);
    std::copy(begin(), end(), fresh.get());
    heap_ = std::move(fresh);
    capacity_ = n;
  }
  void push_back(int64_t v) {
    if (size_ == capacity_) reserve(capacity_ * 2);
    data()[size_++] = v;
  }
  void insert(size_t pos, int64_t v) {
    push_back(0);
    std::copy_backward(begin() + pos, end() - 1, end());
    data()[pos] = v;
  }
  void erase(size_t pos) {
    std::copy(begin() + pos + 1, end(), begin() + pos);
    --size_;
  }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data()[i] = value;
    size_ = n;
  }
  void clear() { size_ = 0; }
  template <class It> void assign(It first, It last) {
    size_ = 0;
    reserve(static_cast<size_t>(std::distance(first, last)));
    for (; first != last; ++first) data()[size_++] = static_cast<int64_t>(*first);
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  int64_t inline_[kInline] = {};
  std::unique_ptr<int64_t[]> heap_;
  size_t size_ = 0;
  size_t capacity_ = kInline;
};

/// "(2, 3)" like NumPy ("(5,)" for one dimension, "()" for none).
std::string shape_str(const Shape& s);
/// Writes shape_str(s): `std::cout << x.shape()` prints "(2, 3)".
std::ostream& operator<<(std::ostream& os, const Shape& s);
/// Product of the extents (1 for a 0-d shape).
int64_t shape_numel(const Shape& s);
/// C-order (row-major) strides in elements.
Shape contiguous_strides(const Shape& s);
/// Broadcasts two shapes per NumPy; throws ShapeError naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast_shapes");
/// Normalises a possibly negative axis; throws ShapeError naming `op`, the axis and ndim.
int64_t normalize_axis(int64_t axis, int64_t ndim, const char* op);

}  // namespace kiln
