// The op-consistency harness: reads the NumPy golden manifest, rebuilds each case's operands with NumPy's
// layouts on every device, runs the op and compares with NumPy's result (see op_harness.hpp).
#include "harness/op_harness.hpp"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>

#ifndef KILN_GOLDEN_DIR
#define KILN_GOLDEN_DIR ""
#endif

namespace kiln::harness {

namespace {

// Splits on `sep`, keeping empty parts ("a,,b" -> a, "", b). Views into `text`.
std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (size_t end; (end = text.find(sep, begin)) != std::string_view::npos; begin = end + 1)
    parts.push_back(text.substr(begin, end - begin));
  parts.push_back(text.substr(begin));
  return parts;
}

int64_t parse_int(std::string_view text) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())
    throw std::runtime_error("bad integer '" + std::string(text) + "'");
  return value;
}

// "(3,1,5)", "(5,)", "()" -> Shape.
Shape parse_shape(std::string_view text) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    throw std::runtime_error("bad shape '" + std::string(text) + "'");
  Shape shape;
  for (std::string_view extent : split(text.substr(1, text.size() - 2), ','))
    if (!extent.empty()) shape.push_back(parse_int(extent));
  return shape;
}

// arr:FILE@OFFSET:SHAPE:RECIPE | bf16:FILE@OFFSET:SHAPE:RECIPE | int:V | float:V | bool:0|1
/// Fills `spec` from its manifest text in place (a returned temporary, moved into the vector, made g++ 13 warn
/// -Wmaybe-uninitialized about its strings).
void parse_operand(std::string_view text, OperandSpec& spec) {
  spec.text = text;
  std::vector<std::string_view> parts = split(text, ':');
  std::string_view kind = parts[0];
  if (kind == "arr" || kind == "bf16") {
    size_t at = parts.size() == 4 ? parts[1].find('@') : std::string_view::npos;
    if (at == std::string_view::npos) throw std::runtime_error("bad array operand '" + spec.text + "'");
    spec.kind = kind == "arr" ? OperandSpec::Kind::Array : OperandSpec::Kind::BFloat16Bits;
    spec.file = parts[1].substr(0, at);
    spec.offset = parse_int(parts[1].substr(at + 1));
    spec.shape = parse_shape(parts[2]);
    spec.recipe = parts[3];
  } else if (parts.size() == 2 && (kind == "int" || kind == "float" || kind == "bool")) {
    spec.kind = kind == "int"     ? OperandSpec::Kind::Int
                : kind == "float" ? OperandSpec::Kind::Float
                                  : OperandSpec::Kind::Bool;
    (void)spec.scalar();  // validates the value
  } else {
    throw std::runtime_error("bad operand '" + spec.text + "'");
  }
}

GoldenCase parse_case(const std::string& line) {
  GoldenCase c;
  c.line = line;
  bool have_expected = false;
  for (std::string_view field : split(line, ' ')) {
    if (field.empty()) continue;
    size_t eq = field.find('=');
    if (eq == std::string_view::npos) throw std::runtime_error("field without '=': " + std::string(field));
    std::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "op")
      c.op = value;
    else if (key == "case")
      c.id = value;
    else if (key == "dtype")
      c.dtype = parse_dtype(value);
    else if (key == "expected") {
      parse_operand(value, c.expected);
      have_expected = true;
    } else if (key == "to") {
      c.cast_to = parse_dtype(value);
      c.has_cast_to = true;
    } else if (key == "in")
      parse_operand(value, c.inputs.emplace_back());
    else
      throw std::runtime_error("unknown field '" + std::string(key) + "'");
  }
  if (c.op.empty() || c.id.empty() || !have_expected || !c.expected.is_array())
    throw std::runtime_error("incomplete case");
  return c;
}

// "#op NAME ARITY DTYPE,DTYPE,.. KIND"
GoldenOp parse_op(const std::string& line) {
  std::vector<std::string_view> fields = split(line, ' ');
  if (fields.size() != 5) throw std::runtime_error("bad #op line");
  GoldenOp op;
  op.name = fields[1];
  op.arity = static_cast<int>(parse_int(fields[2]));
  for (std::string_view name : split(fields[3], ',')) op.dtypes.push_back(parse_dtype(name));
  op.kind = fields[4];
  return op;
}

Manifest read_manifest() {
  Manifest m;
  std::string path = golden_dir() + "/ops/manifest.txt";
  std::ifstream in(path);
  if (!in) {
    m.error = "cannot read " + path +
              ": build the golden data first (ninja kiln_golden runs "
              "tests/golden/ops_golden.py) or point KILN_GOLDEN_DIR at it";
    return m;
  }
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    try {
      if (line.rfind("#op ", 0) == 0) {
        m.ops.push_back(parse_op(line));
      } else if (line[0] != '#') {
        m.cases.push_back(parse_case(line));
      }
    } catch (const std::exception& e) {
      m.error = path + ":" + std::to_string(number) + ": " + e.what() + " in: " + line;
      return m;
    }
  }
  if (m.cases.empty()) m.error = path + " holds no cases";
  return m;
}

// The pooled .npy files, loaded once each.
const Array& pool(const std::string& file) {
  static std::map<std::string, Array> pools;
  auto it = pools.find(file);
  if (it == pools.end()) it = pools.emplace(file, load(golden_dir() + "/" + file, cpu())).first;
  return it->second;
}

// Mantissa bits (with the implicit one) and smallest normal exponent of a float dtype.
struct FloatFormat {
  int precision = 53;
  int min_exponent = -1022;
};
FloatFormat float_format(DType t) {
  switch (t) {
    case DType::Float16:
      return {11, -14};
    case DType::BFloat16:
      return {8, -126};
    case DType::Float32:
      return {24, -126};
    default:
      return {53, -1022};
  }
}

// Spacing of dtype `t`'s values at magnitude |x| (subnormal spacing below the normal range).
double ulp(double x, DType t) {
  FloatFormat f = float_format(t);
  int exponent = f.min_exponent;
  if (x != 0) {
    int e2 = 0;
    std::frexp(std::fabs(x), &e2);  // |x| = m * 2^e2, m in [0.5, 1)
    exponent = std::max(e2 - 1, f.min_exponent);
  }
  return std::ldexp(1.0, exponent - (f.precision - 1));
}

bool float_matches(double got, double want, DType t, double ulps) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isnan(got)) return false;
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return got == want || std::fabs(got - want) <= ulps * ulp(want, t);
}

// Every element of a host array, C order, as double (exact for all kiln dtypes but int64 beyond 2^53,
// which elements_int64 covers).
std::vector<double> elements_double(const Array& host) {
  Array a = host.contiguous();
  std::vector<double> out(static_cast<size_t>(a.size()));
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = a.data<T>();
    for (size_t i = 0; i < out.size(); ++i) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        out[i] = static_cast<float>(p[i]);
      else
        out[i] = static_cast<double>(p[i]);
    }
  });
  return out;
}

std::vector<int64_t> elements_int64(const Array& host) {
  Array a = host.contiguous();
  std::vector<int64_t> out(static_cast<size_t>(a.size()));
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = a.data<T>();
    for (size_t i = 0; i < out.size(); ++i) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        out[i] = static_cast<int64_t>(static_cast<float>(p[i]));
      else
        out[i] = static_cast<int64_t>(p[i]);
    }
  });
  return out;
}

std::string format_value(double v, DType t) {
  std::ostringstream os;
  if (t == DType::Bool)
    os << (v != 0 ? "True" : "False");
  else if (is_integral(t))
    os << static_cast<int64_t>(v);
  else
    os << std::setprecision(17) << v;
  return os.str();
}

std::string format_index(const Shape& shape, int64_t flat, std::vector<int64_t>* index_out) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string text = "(";
  for (size_t d = 0; d < index.size(); ++d) text += (d ? ", " : "") + std::to_string(index[d]);
  if (index.size() == 1) text += ",";
  *index_out = index;
  return text + ")";
}

// The value an input contributes at `index` of the (broadcast) result.
std::string input_value_at(const Input& in, const std::vector<int64_t>& index) {
  if (!in.is_array) return in.scalar.str();
  Array host = in.array.to(cpu());
  const Shape& shape = host.shape();
  size_t lead = index.size() - shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : index[lead + d]);
  if (host.dtype() == DType::Int64) return std::to_string(elements_int64(host)[static_cast<size_t>(flat)]);
  return format_value(elements_double(host)[static_cast<size_t>(flat)], host.dtype()) + " (" +
         std::string(dtype_name(host.dtype())) + ")";
}

}  // namespace

double Tolerance::ulps(DType t) const {
  switch (t) {
    case DType::Float16:
      return float16;
    case DType::BFloat16:
      return bfloat16;
    case DType::Float32:
      return float32;
    case DType::Float64:
      return float64;
    default:
      return 0;
  }
}

Scalar OperandSpec::scalar() const {
  std::string value = text.substr(text.find(':') + 1);
  char* end = nullptr;
  switch (kind) {
    case Kind::Bool:
      if (value != "0" && value != "1") break;
      return Scalar(value == "1");
    case Kind::Int:
      return Scalar(parse_int(value));
    case Kind::Float: {
      double v = std::strtod(value.c_str(), &end);  // also reads inf, -inf and nan
      if (value.empty() || *end != '\0') break;
      return Scalar(v);
    }
    default:
      throw std::logic_error("OperandSpec::scalar on an array operand: " + text);
  }
  throw std::runtime_error("bad scalar '" + text + "'");
}

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.line; }

std::string golden_dir() {
  if (const char* env = std::getenv("KILN_GOLDEN_DIR"); env && *env) return env;
  return KILN_GOLDEN_DIR;
}

const Manifest& manifest() {
  static const Manifest m = read_manifest();
  return m;
}

std::vector<Device> backends() {
  std::vector<Device> devices{cpu()};
  for (Device d : try_all_gpus())
    if (d.is_cuda()) devices.push_back(d);
  return devices;
}

Array load_base(const OperandSpec& spec) {
  const Array& data = pool(spec.file);
  DType dtype = spec.kind == OperandSpec::Kind::BFloat16Bits ? DType::BFloat16 : data.dtype();
  if (spec.kind == OperandSpec::Kind::BFloat16Bits && data.dtype() != DType::Int16)
    throw std::runtime_error(spec.file + " holds " + std::string(dtype_name(data.dtype())) +
                             ", not the int16 bit patterns of bfloat16");
  int64_t count = shape_numel(spec.shape);
  if (data.ndim() != 1 || spec.offset < 0 || spec.offset + count > data.size())
    throw std::runtime_error(spec.text + " lies outside " + spec.file + " of shape " + shape_str(data.shape()));
  // A fresh array from the raw bytes: the bit patterns of bfloat16 are read as bfloat16 as they are.
  const char* bytes = static_cast<const char*>(data.data_ptr()) + spec.offset * itemsize(data.dtype());
  return from_data(bytes, spec.shape, dtype, cpu());
}

DType operand_dtype(const OperandSpec& spec) {
  return spec.kind == OperandSpec::Kind::BFloat16Bits ? DType::BFloat16 : pool(spec.file).dtype();
}

Array apply_recipe(const Array& base, const std::string& recipe) {
  if (recipe == "plain") return base;
  if (recipe == "T") return base.transpose();
  if (recipe.rfind("slice", 0) == 0) {
    size_t x = recipe.find('x');
    int64_t axis = std::stoll(recipe.substr(5, x - 5)), step = std::stoll(recipe.substr(x + 1));
    return base.slice(axis, std::nullopt, std::nullopt, step);
  }
  throw std::runtime_error("unknown layout recipe '" + recipe + "'");
}

std::vector<Input> make_inputs(const GoldenCase& c, Device device) {
  std::vector<Input> inputs;
  for (const OperandSpec& spec : c.inputs) {
    Input in;
    if (spec.is_array()) {
      in.is_array = true;
      Array base = load_base(spec).to(device);
      in.array = apply_recipe(base, spec.recipe);
      // The layout must really be a strided view, or the case would not test what it says.
      if (spec.recipe != "plain" && !in.array.shares_storage(base))
        throw std::runtime_error("recipe " + spec.recipe + " copied instead of making a view");
    } else {
      in.scalar = spec.scalar();
    }
    inputs.push_back(in);
  }
  return inputs;
}

std::string compare(const Array& got, const Array& expected, DType expected_dtype, const Tolerance& tolerance,
                    const std::vector<Input>& inputs) {
  if (!got.defined()) return "the op returned an undefined Array";
  std::ostringstream msg;
  Array host = got.to(cpu());
  if (got.dtype() != expected_dtype)
    msg << "dtype: got " << dtype_name(got.dtype()) << ", NumPy gives " << dtype_name(expected_dtype) << "\n";
  if (!(got.shape() == expected.shape())) {
    msg << "shape: got " << shape_str(got.shape()) << ", NumPy gives " << shape_str(expected.shape()) << "\n";
    return msg.str();
  }
  size_t n = static_cast<size_t>(expected.size()), bad = 0, first = 0;
  std::string got_text, want_text;
  double ulps = tolerance.ulps(expected_dtype);
  if (is_floating(expected_dtype)) {
    std::vector<double> g = elements_double(host), w = elements_double(expected);
    for (size_t i = 0; i < n; ++i) {
      if (float_matches(g[i], w[i], expected_dtype, ulps) || bad++ > 0) continue;
      first = i;
      got_text = format_value(g[i], expected_dtype);
      want_text = format_value(w[i], expected_dtype);
      if (std::isfinite(g[i] - w[i]))
        want_text +=
            " (off by " + format_value(std::fabs(g[i] - w[i]) / ulp(w[i], expected_dtype), DType::Float64) + " ulp)";
    }
  } else {
    std::vector<int64_t> g = elements_int64(host), w = elements_int64(expected);
    auto text = [&](int64_t v) { return expected_dtype == DType::Bool ? (v ? "True" : "False") : std::to_string(v); };
    for (size_t i = 0; i < n; ++i) {
      if (g[i] == w[i] || bad++ > 0) continue;
      first = i;
      got_text = text(g[i]);
      want_text = text(w[i]);
    }
  }
  if (bad > 0) {
    std::vector<int64_t> index;
    msg << bad << " of " << n << " elements of " << dtype_name(expected_dtype) << " differ ("
        << (ulps > 0 ? "tolerance " + format_value(ulps, DType::Float64) + " ulp" : std::string("exact"))
        << "); first at index " << format_index(expected.shape(), static_cast<int64_t>(first), &index) << ": got "
        << got_text << ", expected " << want_text << "\n  inputs there:";
    for (size_t k = 0; k < inputs.size(); ++k) msg << " in" << k << "=" << input_value_at(inputs[k], index);
    msg << "\n";
  }
  return msg.str();
}

void run_case(const OpDecl& op, const GoldenCase& c) {
  Array expected = load_base(c.expected);
  for (Device device : backends()) {
    std::string where = c.op + " [" + c.id + "] on " + device.str() + ": ";
    std::vector<Input> inputs = make_inputs(c, device);
    try {
      Array got = op.run(inputs, c);
      if (got.defined() && got.device() != device) ADD_FAILURE() << where << "the result is on " << got.device().str();
      std::string problem = compare(got, expected, c.dtype, op.tolerance, inputs);
      if (!problem.empty()) ADD_FAILURE() << where << problem << "  case: " << c.line;
    } catch (const std::exception& e) {
      ADD_FAILURE() << where << "threw " << e.what() << "\n  case: " << c.line;
    }
    if (!op.run_out) continue;
    std::vector<Input> fresh = make_inputs(c, device);
    try {
      Array out = empty(expected.shape(), c.dtype, device);
      Array got = op.run_out(fresh, out);
      if (!got.shares_storage(out)) ADD_FAILURE() << where << "the out= form did not return out";
      std::string problem = compare(out, expected, c.dtype, op.tolerance, fresh);
      if (!problem.empty()) ADD_FAILURE() << where << "(out= form) " << problem << "  case: " << c.line;
    } catch (const std::exception& e) {
      ADD_FAILURE() << where << "(out= form) threw " << e.what() << "\n  case: " << c.line;
    }
  }
}

}  // namespace kiln::harness
