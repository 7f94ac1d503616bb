// NumPy-style printing: Array::str() and operator<< produce what NumPy's repr()
// gives for the same values (a port of numpy/_core/arrayprint.py with its
// defaults: floatmode 'maxprec', sign '-', no suppress_small), plus
// `device='cuda:0'` for arrays off the CPU. Float digits are the shortest that
// round-trip in the element's own dtype (Dragon4 "unique"), cut to `precision`
// fraction digits. Known differences from NumPy: see tests/core/test_print.cpp.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/io.hpp"
#include "core/step_trace.hpp"
#include "core/sync_debug.hpp"

namespace kiln {
namespace {

// ---------------------------------------------------------------- options

std::mutex& options_mutex() {
  static std::mutex m;
  return m;
}
PrintOptions& options_storage() {
  static PrintOptions options;
  return options;
}

// ---------------------------------------------------------------- float digits

/// A finite value as significant digits and a decimal exponent: value = d[0].d[1]d[2]... * 10^exponent.
struct Decimal {
  std::string digits;  // no sign, no leading zeros ("0" for zero)
  int exponent = 0;
};

/// Splits printf/to_chars scientific text "d.ddde+XX" (sign already removed) into a Decimal.
Decimal parse_scientific(const char* text) {
  Decimal d;
  const char* p = text;
  for (; *p && *p != 'e'; ++p)
    if (*p != '.') d.digits.push_back(*p);
  if (*p == 'e') d.exponent = std::atoi(p + 1);
  return d;
}

/// The 16-bit float next to `bits` towards +inf (up) or -inf, as a double; bits are sign-magnitude.
double neighbour16(uint16_t bits, bool up, DType t) {
  bool negative = bits & 0x8000u;
  uint16_t magnitude = bits & 0x7fffu;
  uint16_t next;
  if (magnitude == 0)
    next = up ? 0x0001 : 0x8001;  // smallest subnormal of the right sign
  else if (up != negative)
    next = static_cast<uint16_t>(bits + 1);  // away from zero
  else
    next = static_cast<uint16_t>(bits - 1);
  return t == DType::Float16 ? static_cast<double>(half_to_float(next))
                             : static_cast<double>(static_cast<float>(BFloat16::from_bits(next)));
}

/// True when the decimal `candidate` rounds (to nearest, ties to even) to the 16-bit float `bits` of type t.
bool rounds_to16(double candidate, uint16_t bits, DType t) {
  double value = t == DType::Float16 ? static_cast<double>(half_to_float(bits))
                                     : static_cast<double>(static_cast<float>(BFloat16::from_bits(bits)));
  double up = neighbour16(bits, true, t), down = neighbour16(bits, false, t);
  // Beyond the largest finite value the "neighbour" is inf: mirror the other side's gap instead.
  if (std::isinf(up)) up = value + (value - down);
  if (std::isinf(down)) down = value - (up - value);
  double hi = value + (up - value) / 2, lo = value - (value - down) / 2;
  bool even = (bits & 1u) == 0;
  return even ? (candidate >= lo && candidate <= hi) : (candidate > lo && candidate < hi);
}

/// Shortest digits that identify |v| among values of dtype t (the closest such digits when several).
Decimal shortest_digits(double v, DType t) {
  v = std::fabs(v);
  if (v == 0) return {"0", 0};
  char buf[64];
  if (t == DType::Float64 || t == DType::Float32) {
    auto result = t == DType::Float64
                      ? std::to_chars(buf, buf + sizeof(buf) - 1, v, std::chars_format::scientific)
                      : std::to_chars(buf, buf + sizeof(buf) - 1, static_cast<float>(v), std::chars_format::scientific);
    *result.ptr = '\0';
    return parse_scientific(buf);
  }
  uint16_t bits = t == DType::Float16 ? float_to_half(static_cast<float>(v)) : BFloat16(static_cast<float>(v)).bits;
  for (int digits = 1; digits < 17; ++digits) {
    // The correctly rounded `digits`-digit decimal, or one step either side of it: at a power of two
    // the rounding interval is lopsided and only the neighbour on the wide side may round-trip.
    std::snprintf(buf, sizeof(buf), "%.*e", digits - 1, v);
    Decimal rounded = parse_scientific(buf);
    int64_t mantissa = std::stoll(rounded.digits);
    int scale = rounded.exponent - (digits - 1);  // value = mantissa * 10^scale
    bool found = false;
    int64_t best = 0;
    double best_distance = 0;
    for (int64_t m : {mantissa, mantissa - 1, mantissa + 1}) {
      if (m <= 0) continue;
      std::snprintf(buf, sizeof(buf), "%llde%d", static_cast<long long>(m), scale);
      double candidate = std::strtod(buf, nullptr);
      if (!rounds_to16(candidate, bits, t)) continue;
      double distance = std::fabs(candidate - v);
      if (!found || distance < best_distance) best = m, best_distance = distance, found = true;
    }
    if (!found) continue;
    Decimal d{std::to_string(best), 0};
    d.exponent = scale + static_cast<int>(d.digits.size()) - 1;
    while (d.digits.size() > 1 && d.digits.back() == '0') d.digits.pop_back();
    return d;
  }
  std::snprintf(buf, sizeof(buf), "%.16e", v);
  return parse_scientific(buf);
}

/// Removes trailing zeros after the decimal point, keeping the point itself (Dragon4 trim '.').
void trim_zeros(std::string& s) {
  while (!s.empty() && s.back() == '0') s.pop_back();
}

/// Positional text of |v| split into integer and fraction digits: the shortest unique digits when they
/// need at most `precision` fraction digits, else the exact value rounded to `precision` digits
/// (trailing zeros trimmed either way).
void positional(double v, DType t, int precision, std::string& int_part, std::string& frac_part) {
  Decimal d = shortest_digits(v, t);
  int n = static_cast<int>(d.digits.size());
  int fraction_digits = std::max(0, n - 1 - d.exponent);
  if (d.digits == "0") fraction_digits = 0;
  if (fraction_digits <= precision) {
    if (d.digits == "0") {
      int_part = "0";
      frac_part.clear();
    } else if (d.exponent >= 0) {
      int_part = d.digits.substr(0, std::min(n, d.exponent + 1));
      if (n < d.exponent + 1) int_part.append(static_cast<size_t>(d.exponent + 1 - n), '0');
      frac_part = n > d.exponent + 1 ? d.digits.substr(static_cast<size_t>(d.exponent + 1)) : "";
    } else {
      int_part = "0";
      frac_part = std::string(static_cast<size_t>(-d.exponent - 1), '0') + d.digits;
    }
    return;
  }
  std::vector<char> buf(static_cast<size_t>(precision) + 400);
  std::snprintf(buf.data(), buf.size(), "%.*f", precision, std::fabs(v));
  std::string s = buf.data();
  size_t point = s.find('.');
  int_part = s.substr(0, point);
  frac_part = point == std::string::npos ? "" : s.substr(point + 1);
  trim_zeros(frac_part);
}

/// Scientific text of |v|: mantissa fraction digits and exponent. With `min_digits` < 0 the shortest unique
/// digits (cut to `precision`, trailing zeros trimmed); otherwise exactly `min_digits` fraction digits
/// (more exact digits when the shortest are fewer, as Dragon4 with min_digits does).
void scientific(double v, DType t, int precision, int min_digits, std::string& mantissa_int, std::string& frac,
                int& exponent) {
  Decimal d = shortest_digits(v, t);
  int fraction_digits = static_cast<int>(d.digits.size()) - 1;
  int wanted = min_digits >= 0 ? min_digits : precision;
  if ((min_digits < 0 && fraction_digits <= precision) || fraction_digits == min_digits) {
    mantissa_int = d.digits.substr(0, 1);
    frac = d.digits.substr(1);
    exponent = d.exponent;
    return;
  }
  char buf[512];  // precision is capped at 300 by set_print_options
  std::snprintf(buf, sizeof(buf), "%.*e", wanted, std::fabs(v));
  Decimal r = parse_scientific(buf);
  mantissa_int = r.digits.substr(0, 1);
  frac = r.digits.substr(1);
  exponent = r.exponent;
  if (min_digits < 0) trim_zeros(frac);
}

std::string exponent_text(int exponent, int min_digits) {
  std::string digits = std::to_string(std::abs(exponent));
  if (static_cast<int>(digits.size()) < min_digits)
    digits.insert(0, static_cast<size_t>(min_digits) - digits.size(), '0');
  return std::string("e") + (exponent < 0 ? "-" : "+") + digits;
}

/// Decimal digits of the finfo(dtype).precision NumPy uses to pick scientific notation.
int dtype_decimal_precision(DType t) {
  switch (t) {
    case DType::Float16:
      return 3;
    case DType::BFloat16:
      return 2;  // ml_dtypes' finfo(bfloat16).precision
    case DType::Float32:
      return 6;
    default:
      return 15;
  }
}

// ---------------------------------------------------------------- element formatters

/// One element read from host memory.
double read_float(const uint8_t* p, DType t) {
  switch (t) {
    case DType::Float16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return half_to_float(b);
    }
    case DType::BFloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return static_cast<float>(BFloat16::from_bits(b));
    }
    case DType::Float32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
  }
}
int64_t read_integer(const uint8_t* p, DType t) {
  switch (t) {
    case DType::Int8:
      return static_cast<int8_t>(*p);
    case DType::UInt8:
      return *p;
    case DType::Int16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case DType::Int32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

/// NumPy's BoolFormat / IntegerFormat / FloatingFormat / ComplexFloatingFormat: widths fixed from the
/// displayed elements. A complex element is its real part's text, then its imaginary part's with an explicit
/// sign and 'j' (each part formatted over the parts shown, as NumPy).
class ElementFormat {
 public:
  ElementFormat(DType t, bool zero_dim, int precision, const std::vector<const uint8_t*>& shown,
                bool plus_sign = false)
      : dtype_(t), precision_(precision), plus_(plus_sign) {
    if (is_complex(t)) {
      const DType part = real_dtype(t);
      part_size_ = itemsize(part);
      std::vector<const uint8_t*> imag;
      imag.reserve(shown.size());
      for (const uint8_t* p : shown) imag.push_back(p + part_size_);
      real_ = std::make_shared<ElementFormat>(part, zero_dim, precision, shown);
      imag_ = std::make_shared<ElementFormat>(part, zero_dim, precision, imag, true);
    } else if (t == DType::Bool) {
      true_text_ = zero_dim ? "True" : " True";
    } else if (!is_floating(t)) {
      for (const uint8_t* p : shown) {
        int64_t v = read_integer(p, t);
        width_ = std::max(width_, static_cast<int>(std::to_string(v).size()));
      }
    } else {
      fill_float_format(shown);
    }
  }

  std::string operator()(const uint8_t* p) const {
    if (real_) {
      std::string imag = (*imag_)(p + part_size_);
      const size_t end = imag.find_last_not_of(' ') + 1;  // the 'j' goes before the padding
      return (*real_)(p) + imag.insert(end, "j");
    }
    if (dtype_ == DType::Bool) return *p ? true_text_ : "False";
    if (!is_floating(dtype_)) {
      std::string s = std::to_string(read_integer(p, dtype_));
      return std::string(static_cast<size_t>(std::max(0, width_ - static_cast<int>(s.size()))), ' ') + s;
    }
    double v = read_float(p, dtype_);
    std::string body;
    if (!std::isfinite(v)) {
      body = std::isnan(v) ? (plus_ ? "+nan" : "nan") : v < 0 ? "-inf" : plus_ ? "+inf" : "inf";
      int width = pad_left_ + pad_right_ + 1;
      return std::string(static_cast<size_t>(std::max(0, width - static_cast<int>(body.size()))), ' ') + body;
    }
    std::string int_part, frac_part;
    std::string sign = std::signbit(v) ? "-" : plus_ ? "+" : "";
    std::string tail;
    if (exp_format_) {
      int exponent = 0;
      scientific(v, dtype_, precision_, exp_fraction_digits_, int_part, frac_part, exponent);
      tail = exponent_text(exponent, exp_size_);
    } else {
      positional(v, dtype_, precision_, int_part, frac_part);
      frac_part.append(static_cast<size_t>(std::max(0, pad_right_ - static_cast<int>(frac_part.size()))), ' ');
    }
    int_part = sign + int_part;
    std::string left(static_cast<size_t>(std::max(0, pad_left_ - static_cast<int>(int_part.size()))), ' ');
    return left + int_part + "." + frac_part + tail;
  }

 private:
  void fill_float_format(const std::vector<const uint8_t*>& shown) {
    std::vector<double> finite;
    bool any_nonfinite = false, negative_inf = false;
    for (const uint8_t* p : shown) {
      double v = read_float(p, dtype_);
      if (std::isfinite(v))
        finite.push_back(v);
      else {
        any_nonfinite = true;
        negative_inf |= std::isinf(v) && v < 0;
      }
    }
    double max_abs = 0, min_abs = 0;
    bool any_nonzero = false;
    for (double v : finite) {
      if (v == 0) continue;
      double a = std::fabs(v);
      if (!any_nonzero) max_abs = min_abs = a;
      max_abs = std::max(max_abs, a);
      min_abs = std::min(min_abs, a);
      any_nonzero = true;
    }
    if (any_nonzero) {
      // NumPy does these comparisons and the division in the array's dtype (Python floats are weak
      // scalars), so e.g. float16 [0.1, 100] has a ratio of exactly 1000 and stays positional.
      double cutoff = std::pow(10.0, std::min(8, dtype_decimal_precision(dtype_)));
      double ratio = dtype_ == DType::Float64
                         ? max_abs / min_abs
                         : round_to_dtype(static_cast<float>(max_abs) / static_cast<float>(min_abs));
      exp_format_ = max_abs >= round_to_dtype(cutoff) || min_abs < round_to_dtype(0.0001) || ratio > 1000.0;
    }
    if (finite.empty()) {
      pad_left_ = pad_right_ = 0;
    } else if (exp_format_) {
      int fraction_digits = 0, exp_digits = 0, int_width = 0;
      for (double v : finite) {
        std::string int_part, frac;
        int exponent = 0;
        scientific(v, dtype_, precision_, -1, int_part, frac, exponent);
        fraction_digits = std::max(fraction_digits, static_cast<int>(frac.size()));
        exp_digits = std::max(exp_digits, static_cast<int>(exponent_text(exponent, 2).size()) - 2);
        int_width = std::max(int_width, static_cast<int>(int_part.size()) + (std::signbit(v) || plus_ ? 1 : 0));
      }
      exp_fraction_digits_ = fraction_digits;
      precision_ = fraction_digits;
      exp_size_ = exp_digits;
      pad_left_ = int_width;
      pad_right_ = exp_size_ + 2 + fraction_digits;
    } else {
      for (double v : finite) {
        std::string int_part, frac;
        positional(v, dtype_, precision_, int_part, frac);
        pad_left_ = std::max(pad_left_, static_cast<int>(int_part.size()) + (std::signbit(v) || plus_ ? 1 : 0));
        pad_right_ = std::max(pad_right_, static_cast<int>(frac.size()));
      }
    }
    if (any_nonfinite) {
      int offset = pad_right_ + 1;
      pad_left_ = std::max({pad_left_, 3 - offset, 3 + (negative_inf || plus_ ? 1 : 0) - offset});
    }
  }

  /// `v` rounded to the nearest value of this formatter's dtype.
  double round_to_dtype(double v) const {
    switch (dtype_) {
      case DType::Float16:
        return half_to_float(float_to_half(static_cast<float>(v)));
      case DType::BFloat16:
        return static_cast<float>(BFloat16(static_cast<float>(v)));
      case DType::Float32:
        return static_cast<float>(v);
      default:
        return v;
    }
  }

  DType dtype_;
  int precision_;
  bool plus_ = false;  // sign '+': the imaginary part of a complex element
  std::shared_ptr<ElementFormat> real_, imag_;  // a complex dtype's parts
  int64_t part_size_ = 0;
  std::string true_text_;
  int width_ = 0;                 // integers
  bool exp_format_ = false;       // floats
  int exp_fraction_digits_ = -1;  // fraction digits of every mantissa in scientific mode
  int exp_size_ = 2;              // minimum exponent digits
  int pad_left_ = 0, pad_right_ = 0;
};

// ---------------------------------------------------------------- layout (numpy's _formatArray)

class Layout {
 public:
  Layout(const Array& host, const PrintOptions& options, bool summarise)
      : host_(host),
        base_(static_cast<const uint8_t*>(host.data_ptr())),
        item_(itemsize(host.dtype())),
        edge_(options.edgeitems),
        summarise_(summarise) {}

  /// Pointers to the elements that will be shown (the leading/trailing corners when summarising).
  std::vector<const uint8_t*> shown() const {
    std::vector<const uint8_t*> out;
    collect(0, base_, out);
    return out;
  }

  std::string format(const ElementFormat& fmt, int64_t line_width, const std::string& hanging_indent) const {
    return recurse(fmt, 0, base_, hanging_indent, line_width);
  }

 private:
  bool summarised_axis(int64_t axis) const { return summarise_ && 2 * edge_ < host_.shape()[axis]; }

  void collect(int64_t axis, const uint8_t* p, std::vector<const uint8_t*>& out) const {
    if (axis == host_.ndim()) {
      out.push_back(p);
      return;
    }
    int64_t n = host_.shape()[axis], stride = host_.strides()[axis] * item_;
    // NumPy keeps a[:edge] and a[-edge:]; with edgeitems 0 the latter is the whole axis (Python's -0).
    bool skip_middle = summarised_axis(axis) && edge_ > 0;
    for (int64_t i = 0; i < n; ++i) {
      if (skip_middle && i == edge_) i = n - edge_;
      collect(axis + 1, p + i * stride, out);
    }
  }

  static void extend_line(std::string& s, std::string& line, const std::string& word, int64_t line_width,
                          const std::string& next_line_prefix) {
    bool needs_wrap = static_cast<int64_t>(line.size() + word.size()) > line_width;
    if (line.size() <= next_line_prefix.size()) needs_wrap = false;  // wrapping would not help
    if (needs_wrap) {
      size_t end = line.find_last_not_of(' ');
      s += line.substr(0, end == std::string::npos ? 0 : end + 1) + "\n";
      line = next_line_prefix;
    }
    line += word;
  }

  std::string recurse(const ElementFormat& fmt, int64_t axis, const uint8_t* p, const std::string& hanging_indent,
                      int64_t width) const {
    if (axis == host_.ndim()) return fmt(p);
    int64_t axes_left = host_.ndim() - axis;
    std::string next_indent = hanging_indent + " ";
    int64_t next_width = width - 1;  // room for the ']'
    int64_t n = host_.shape()[axis], stride = host_.strides()[axis] * item_;
    bool summary = summarised_axis(axis);
    int64_t leading = summary ? edge_ : 0, trailing = summary ? edge_ : n;
    std::string s;
    if (axes_left == 1) {
      int64_t element_width = width - 1;  // room for ',' or ']'
      std::string line = hanging_indent;
      for (int64_t i = 0; i < leading; ++i) {
        extend_line(s, line, recurse(fmt, axis + 1, p + i * stride, next_indent, next_width), element_width,
                    hanging_indent);
        line += ", ";
      }
      if (summary) {
        extend_line(s, line, "...", element_width, hanging_indent);
        line += ", ";
      }
      for (int64_t i = trailing; i > 1; --i) {
        extend_line(s, line, recurse(fmt, axis + 1, p + (n - i) * stride, next_indent, next_width), element_width,
                    hanging_indent);
        line += ", ";
      }
      extend_line(s, line, recurse(fmt, axis + 1, p + (n - 1) * stride, next_indent, next_width), element_width,
                  hanging_indent);
      s += line;
    } else {
      std::string line_sep = "," + std::string(static_cast<size_t>(axes_left - 1), '\n');
      for (int64_t i = 0; i < leading; ++i)
        s += hanging_indent + recurse(fmt, axis + 1, p + i * stride, next_indent, next_width) + line_sep;
      if (summary) s += hanging_indent + "..." + line_sep;
      for (int64_t i = trailing; i > 1; --i)
        s += hanging_indent + recurse(fmt, axis + 1, p + (n - i) * stride, next_indent, next_width) + line_sep;
      s += hanging_indent + recurse(fmt, axis + 1, p + (n - 1) * stride, next_indent, next_width);
    }
    return "[" + s.substr(hanging_indent.size()) + "]";
  }

  const Array& host_;
  const uint8_t* base_;
  int64_t item_;
  int64_t edge_;
  bool summarise_;
};

/// NumPy leaves the dtype out of the repr for these (float64, int64 and bool).
bool dtype_is_implied(DType t) {
  return t == DType::Float64 || t == DType::Int64 || t == DType::Bool || t == DType::Complex128;
}

}  // namespace

void set_print_options(const PrintOptions& options) {
  if (options.threshold < 0 || options.edgeitems < 0 || options.precision < 0 || options.linewidth < 1)
    throw ValueError("set_print_options: threshold (" + std::to_string(options.threshold) + "), edgeitems (" +
                     std::to_string(options.edgeitems) + ") and precision (" + std::to_string(options.precision) +
                     ") must be >= 0 and linewidth (" + std::to_string(options.linewidth) + ") >= 1");
  if (options.precision > 300)
    throw ValueError("set_print_options: precision " + std::to_string(options.precision) +
                     " is too large; use at most 300 fraction digits");
  std::lock_guard<std::mutex> lock(options_mutex());
  options_storage() = options;
}

PrintOptions get_print_options() {
  std::lock_guard<std::mutex> lock(options_mutex());
  return options_storage();
}

std::string Array::str() const {
  if (!defined()) return "array(<undefined>)";
  const PrintOptions options = get_print_options();
  const std::string prefix = "array(";
  detail::refuse_host_read_while_tracing("printing");
  detail::SyncOpScope scope("printing");
  Array host = to(cpu());  // synchronises and copies a GPU array
  bool summarise = size_ > options.threshold;

  std::string body;
  if (size_ == 0) {
    body = "[]";
  } else {
    Layout layout(host, options, summarise);
    ElementFormat fmt(dtype_, ndim() == 0, options.precision, layout.shown());
    // The ')' suffix counts against the line width; continuation lines align after "array(".
    body = layout.format(fmt, options.linewidth - 1, std::string(prefix.size() + 1, ' '));
  }

  std::vector<std::string> extras;
  if ((size_ == 0 && !(ndim() == 1)) || summarise) extras.push_back("shape=" + shape_str(shape_));
  if (!dtype_is_implied(dtype_) || size_ == 0) extras.push_back("dtype=" + std::string(dtype_name(dtype_)));
  if (!device().is_cpu()) extras.push_back("device='" + device().str() + "'");
  if (extras.empty()) return prefix + body + ")";

  std::string text = prefix + body + ",";
  std::string extra_text;
  for (size_t i = 0; i < extras.size(); ++i) extra_text += (i ? ", " : "") + extras[i];
  extra_text += ")";
  size_t last_newline = text.rfind('\n');
  int64_t last_line_length =
      static_cast<int64_t>(text.size() - (last_newline == std::string::npos ? 0 : last_newline + 1));
  bool new_line = last_line_length + static_cast<int64_t>(extra_text.size()) + 1 > options.linewidth;
  return text + (new_line ? "\n" + std::string(prefix.size(), ' ') : " ") + extra_text;
}

std::ostream& operator<<(std::ostream& os, const Array& a) { return os << a.str(); }

}  // namespace kiln
