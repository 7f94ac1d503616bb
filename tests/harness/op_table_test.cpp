// The harness's op table: every op of the op list (include/kiln/ops.def: function, arity, accuracy), where,
// clip, astype and the C++ operators, with the dtypes ops_golden.py covers, run by the harness (op_harness.hpp) on every backend against
// the NumPy golden cases of tests/golden/ops_golden.py -- one GoogleTest test per (op, case). Also the
// errors the elementwise front-end throws, checked on every backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "core/op_table.hpp"
#include "harness/op_harness.hpp"

namespace kiln::harness {
namespace {

const std::vector<DType> kAll = {bool_, int8, int16, int32, int64, uint8, float16, bfloat16, float32, float64};

template <class T>
constexpr bool is_array_v = std::is_same_v<std::decay_t<T>, Array>;

// Applies a C++ operator to two inputs, each an Array or a C++ scalar (bool, int64_t, double).
template <class F>
Array apply_operator(std::vector<Input>& in, F f) {
  return visit_input(in[0], [&](const auto& a) {
    return visit_input(in[1], [&](const auto& b) -> Array {
      if constexpr (is_array_v<decltype(a)> || is_array_v<decltype(b)>)
        return f(a, b);
      else
        throw std::logic_error("an operator case needs an array operand");
    });
  });
}

// `a op= b` on the first input (a view of the case's base array); returns that array.
template <class F>
Array apply_compound(std::vector<Input>& in, F f) {
  Array a = in[0].array;
  visit_input(in[1], [&](const auto& b) { f(a, b); });
  return a;
}

using UnaryFn = Array (*)(const Array&);
using UnaryOutFn = Array (*)(const Array&, const Array&);
using BinaryFn = Array (*)(const Operand&, const Operand&);
using BinaryOutFn = Array (*)(const Operand&, const Operand&, const Array&);

/// A unary op of ops.hpp with its out= form.
OpDecl unary(std::string name, std::vector<DType> dtypes, Tolerance tolerance, UnaryFn fn, UnaryOutFn fn_out) {
  return {std::move(name),
          1,
          std::move(dtypes),
          tolerance,
          [fn](std::vector<Input>& in, const GoldenCase&) { return fn(in[0].array); },
          [fn_out](std::vector<Input>& in, const Array& out) { return fn_out(in[0].array, out); }};
}
/// A binary op of ops.hpp (arrays or scalars on either side) with its out= form.
OpDecl binary(std::string name, std::vector<DType> dtypes, Tolerance tolerance, BinaryFn fn, BinaryOutFn fn_out) {
  return {std::move(name),
          2,
          std::move(dtypes),
          tolerance,
          [fn](std::vector<Input>& in, const GoldenCase&) { return fn(in[0].operand(), in[1].operand()); },
          [fn_out](std::vector<Input>& in, const Array& out) { return fn_out(in[0].operand(), in[1].operand(), out); }};
}
/// A C++ operator `a @ b` (either side may be a scalar).
template <class F>
OpDecl binary_operator(std::string name, std::vector<DType> dtypes, F f) {
  return {std::move(name), 2, std::move(dtypes), kExact,
          [f](std::vector<Input>& in, const GoldenCase&) { return apply_operator(in, f); }};
}
/// A compound assignment `a @= b` into the first input.
template <class F>
OpDecl compound_operator(std::string name, std::vector<DType> dtypes, F f) {
  return {std::move(name), 2, std::move(dtypes), kExact,
          [f](std::vector<Input>& in, const GoldenCase&) { return apply_compound(in, f); }};
}
/// A unary C++ operator.
OpDecl unary_operator(std::string name, std::vector<DType> dtypes, UnaryFn fn) {
  return {std::move(name), 1, std::move(dtypes), kExact,
          [fn](std::vector<Input>& in, const GoldenCase&) { return fn(in[0].array); }};
}

/// The dtypes ops_golden.py declares for `name` (its `#op` line); empty when it has none (a test fails then).
std::vector<DType> golden_dtypes(const std::string& name) {
  for (const GoldenOp& op : manifest().ops)
    if (op.name == name) return op.dtypes;
  return {};
}

Tolerance tolerance_of(detail::Accuracy accuracy) {
  switch (accuracy) {
    case detail::Accuracy::Math: return kMath;
    case detail::Accuracy::Approx: return kApprox;
    case detail::Accuracy::Exact: break;
  }
  return kExact;
}

const char* golden_kind(detail::Accuracy accuracy) {
  return accuracy == detail::Accuracy::Math ? "math" : accuracy == detail::Accuracy::Approx ? "approx" : "exact";
}

/// Every op the harness knows: each `Fn` row of kiln/ops.def (its function and out= form; the accuracy column of the op table;
/// the dtypes ops_golden.py covers), where and clip, astype and the C++ operators.
const std::vector<OpDecl>& op_table() {
  static const std::vector<OpDecl> table = [] {
    std::vector<OpDecl> ops;
#define KILN_HARNESS_Fn1(name, accuracy) \
  ops.push_back(unary(#name, golden_dtypes(#name), tolerance_of(accuracy), kiln::name, kiln::name));
#define KILN_HARNESS_Fn2(name, accuracy) \
  ops.push_back(binary(#name, golden_dtypes(#name), tolerance_of(accuracy), kiln::name, kiln::name));
#define KILN_HARNESS_Own3(name, accuracy)
#define KILN_HARNESS_None0(name, accuracy)
#define KILN_HARNESS_None1(name, accuracy)
#define KILN_HARNESS(name, arity, api, accuracy) KILN_HARNESS_##api##arity(name, accuracy)
#define KILN_OP(Code, name, arity, api) KILN_HARNESS(name, arity, api, detail::op_info(detail::OpCode::Code).accuracy)
#include "kiln/ops.def"
#undef KILN_HARNESS
    std::vector<OpDecl> rest = {
      OpDecl{"where", 3, kAll, kExact,
             [](std::vector<Input>& in, const GoldenCase&) {
               return where(in[0].operand(), in[1].operand(), in[2].operand());
             }},
      OpDecl{"clip", 3, kAll, kExact,
             [](std::vector<Input>& in, const GoldenCase&) {
               return clip(in[0].array, in[1].operand(), in[2].operand());
             }},
      OpDecl{"astype", 1, kAll, kExact,
             [](std::vector<Input>& in, const GoldenCase& c) {
               if (!c.has_cast_to) throw std::runtime_error("astype case " + c.id + " has no to= field");
               return in[0].array.astype(c.cast_to);
             }},
      binary_operator("op_add", {bool_, int32, float16, float32}, [](const auto& a, const auto& b) { return a + b; }),
      binary_operator("op_subtract", {int8, float32}, [](const auto& a, const auto& b) { return a - b; }),
      binary_operator("op_multiply", {int32, float64}, [](const auto& a, const auto& b) { return a * b; }),
      binary_operator("op_divide", {int32, float32}, [](const auto& a, const auto& b) { return a / b; }),
      binary_operator("op_remainder", {int16, float32}, [](const auto& a, const auto& b) { return a % b; }),
      binary_operator("op_equal", {int32, float32}, [](const auto& a, const auto& b) { return a == b; }),
      binary_operator("op_not_equal", {int32, float32}, [](const auto& a, const auto& b) { return a != b; }),
      binary_operator("op_less", {int32, float32}, [](const auto& a, const auto& b) { return a < b; }),
      binary_operator("op_less_equal", {int32, float32}, [](const auto& a, const auto& b) { return a <= b; }),
      binary_operator("op_greater", {int32, float32}, [](const auto& a, const auto& b) { return a > b; }),
      binary_operator("op_greater_equal", {int32, float32}, [](const auto& a, const auto& b) { return a >= b; }),
      binary_operator("op_bitwise_and", {bool_, int32}, [](const auto& a, const auto& b) { return a & b; }),
      binary_operator("op_bitwise_or", {bool_, uint8}, [](const auto& a, const auto& b) { return a | b; }),
      binary_operator("op_bitwise_xor", {bool_, int64}, [](const auto& a, const auto& b) { return a ^ b; }),
      unary_operator("op_negative", {int32, float32}, [](const Array& a) { return -a; }),
      unary_operator("op_logical_not", {bool_, float32}, [](const Array& a) { return !a; }),
      unary_operator("op_bitwise_not", {bool_, int8}, [](const Array& a) { return ~a; }),
      compound_operator("op_iadd", {int32, float16, float32}, [](Array& a, const auto& b) { a += b; }),
      compound_operator("op_isubtract", {int32, float32}, [](Array& a, const auto& b) { a -= b; }),
      compound_operator("op_imultiply", {int32, float32}, [](Array& a, const auto& b) { a *= b; }),
      compound_operator("op_idivide", {float32, float64}, [](Array& a, const auto& b) { a /= b; }),
    };
    ops.insert(ops.end(), rest.begin(), rest.end());
    return ops;
  }();
  return table;
}

const OpDecl* find_op(const std::string& name) {
  for (const OpDecl& op : op_table())
    if (op.name == name) return &op;
  return nullptr;
}

std::string dtype_list(const std::vector<DType>& dtypes) {
  std::string text;
  for (DType t : dtypes) {
    if (!text.empty()) text += ',';
    text += dtype_name(t);
  }
  return text;
}

// ---------------------------------------------------------------- golden cases, one test each

std::vector<GoldenCase> golden_cases() {
  const Manifest& m = manifest();
  if (!m.error.empty()) {  // one failing placeholder says why, instead of silently testing nothing
    GoldenCase missing;
    missing.op = "golden_data";
    missing.id = "unavailable";
    missing.line = m.error;
    return {missing};
  }
  return m.cases;
}

class OpCase : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(OpCase, MatchesNumPyOnEveryBackend) {
  const GoldenCase& c = GetParam();
  ASSERT_TRUE(manifest().error.empty()) << manifest().error;
  const OpDecl* op = find_op(c.op);
  ASSERT_NE(op, nullptr) << "the golden data has op '" << c.op << "' but op_table() does not declare it";
  ASSERT_EQ(static_cast<int>(c.inputs.size()), op->arity) << c.line;
  run_case(*op, c);
}

INSTANTIATE_TEST_SUITE_P(Ops, OpCase, ::testing::ValuesIn(golden_cases()),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) { return info.param.test_name(); });

// ---------------------------------------------------------------- the two tables agree

TEST(OpTable, DeclaresEveryGoldenOpWithTheSameArityDtypesAndToleranceKind) {
  const Manifest& m = manifest();
  ASSERT_TRUE(m.error.empty()) << m.error;
  for (const auto& golden : m.ops) {
    const OpDecl* op = find_op(golden.name);
    if (!op) {
      ADD_FAILURE() << "ops_golden.py declares '" << golden.name << "' but op_table() does not";
      continue;
    }
    EXPECT_EQ(op->arity, golden.arity) << golden.name;
    EXPECT_EQ(dtype_list(op->dtypes), dtype_list(golden.dtypes)) << golden.name;
    // "exact" ops are compared bit for bit; "math" ops get their reference in higher precision.
    EXPECT_EQ(op->tolerance.exact(), golden.kind == "exact") << golden.name << " is '" << golden.kind << "'";
  }
  for (const OpDecl& op : op_table()) {
    bool declared = std::any_of(m.ops.begin(), m.ops.end(), [&](const auto& g) { return g.name == op.name; });
    EXPECT_TRUE(declared) << "op_table() declares '" << op.name << "' but ops_golden.py has no cases for it";
  }
}

TEST(OpTable, EveryOpOfTheOpListHasGoldenCasesWithItsArity) {
  const Manifest& m = manifest();
  ASSERT_TRUE(m.error.empty()) << m.error;
  int checked = 0;
  for (int o = 0; o < detail::kNumOps; ++o) {
    const detail::OpInfo& info = detail::op_info(static_cast<detail::OpCode>(o));
    if (info.api == detail::OpApi::None) continue;
    ++checked;
    auto golden = std::find_if(m.ops.begin(), m.ops.end(), [&](const GoldenOp& g) { return g.name == info.name; });
    if (golden == m.ops.end()) {
      ADD_FAILURE() << "kiln/ops.def has '" << info.name << "' but tests/golden/ops_golden.py has no cases for it";
      continue;
    }
    EXPECT_EQ(golden->arity, info.arity) << info.name;
    EXPECT_FALSE(golden->dtypes.empty()) << info.name;
    EXPECT_EQ(golden->kind, golden_kind(info.accuracy))
        << info.name << ": the accuracy column and ops_golden.py disagree";
    EXPECT_TRUE(std::any_of(m.cases.begin(), m.cases.end(), [&](const GoldenCase& c) { return c.op == info.name; }))
        << info.name << " has no golden case";
  }
  EXPECT_GT(checked, 50);
}

TEST(OpTable, EveryDeclaredDtypeHasAGoldenCase) {
  const Manifest& m = manifest();
  ASSERT_TRUE(m.error.empty()) << m.error;
  for (const OpDecl& op : op_table()) {
    for (DType t : op.dtypes) {
      bool covered = std::any_of(m.cases.begin(), m.cases.end(), [&](const GoldenCase& c) {
        if (c.op != op.name) return false;
        return std::all_of(c.inputs.begin(), c.inputs.end(), [&](const OperandSpec& s) {
          if (!s.is_array()) return true;
          return operand_dtype(s) == t || (op.name == "where" && &s == &c.inputs[0]);
        });
      });
      EXPECT_TRUE(covered) << op.name << " declares " << dtype_name(t) << " but no golden case uses it alone";
    }
  }
}

// ---------------------------------------------------------------- errors, on every backend

// Runs f and checks it throws E whose message contains every needle.
template <class E, class F>
void expect_error(F f, const std::vector<std::string>& needles, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no exception";
  } catch (const E& e) {
    std::string message = e.what();
    for (const std::string& needle : needles)
      EXPECT_NE(message.find(needle), std::string::npos) << what << ": '" << needle << "' missing from: " << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wrong exception type: " << e.what();
  }
}

TEST(OpHarnessErrors, BroadcastFailureNamesOpAndBothShapes) {
  for (Device d : backends()) {
    Array a = ones({3, 4}, float32, d), b = ones({5}, float32, d);
    expect_error<ShapeError>([&] { add(a, b); }, {"add", "(3, 4)", "(5,)"}, "add on " + d.str());
    expect_error<ShapeError>([&] { (void)(a * b); }, {"multiply", "(3, 4)", "(5,)"}, "a * b on " + d.str());
    expect_error<ShapeError>([&] { where(ones({1}, bool_, d), a, b); }, {"where", "(3, 4)", "(5,)"},
                             "where on " + d.str());
  }
}

TEST(OpHarnessErrors, BitwiseOpOnFloatIsDTypeErrorNamingOpAndDtype) {
  for (Device d : backends()) {
    Array f32 = ones({4}, float32, d), f64 = ones({4}, float64, d), i32 = ones({4}, int32, d);
    expect_error<DTypeError>([&] { bitwise_and(f32, f32); }, {"bitwise_and", "float32"}, "on " + d.str());
    expect_error<DTypeError>([&] { bitwise_xor(i32, f64); }, {"bitwise_xor", "float64"}, "on " + d.str());
    expect_error<DTypeError>([&] { bitwise_not(f64); }, {"bitwise_not", "float64"}, "on " + d.str());
    expect_error<DTypeError>([&] { (void)(i32 | 2.5); }, {"bitwise_or", "float64"}, "i32 | 2.5 on " + d.str());
  }
}

TEST(OpHarnessErrors, SubtractAndNegativeOnBoolAreDTypeErrors) {
  for (Device d : backends()) {
    Array b = ones({3}, bool_, d);
    expect_error<DTypeError>([&] { subtract(b, b); }, {"subtract", "bool"}, "subtract on " + d.str());
    expect_error<DTypeError>([&] { (void)(b - b); }, {"subtract", "bool"}, "b - b on " + d.str());
    expect_error<DTypeError>([&] { (void)(-b); }, {"negative", "bool"}, "-b on " + d.str());
  }
}

TEST(OpHarnessErrors, Uint8PlusOutOfRangeScalarIsValueError) {
  for (Device d : backends()) {
    Array u = ones({3}, uint8, d);
    expect_error<ValueError>([&] { add(u, 300); }, {"add", "300", "uint8"}, "add on " + d.str());
    expect_error<ValueError>([&] { (void)(u + 300); }, {"add", "300", "uint8"}, "u + 300 on " + d.str());
    expect_error<ValueError>([&] { (void)(ones({3}, int8, d) * -129); }, {"multiply", "-129", "int8"},
                             "int8 * -129 on " + d.str());
  }
}

TEST(OpHarnessErrors, OutOfWrongShapeIsShapeError) {
  for (Device d : backends()) {
    Array a = ones({2, 3}, float32, d), out = empty({3, 2}, float32, d);
    expect_error<ShapeError>([&] { add(a, a, out); }, {"add", "(2, 3)", "(3, 2)"}, "add on " + d.str());
    expect_error<ShapeError>([&] { exp(a, out); }, {"exp", "(2, 3)", "(3, 2)"}, "exp on " + d.str());
    Array small = empty({3}, float32, d);  // the result may not broadcast into a smaller out
    expect_error<ShapeError>([&] { add(a, a, small); }, {"add", "(2, 3)", "(3,)"}, "add into (3,) on " + d.str());
  }
}

TEST(OpHarnessErrors, OperandsOnDifferentDevicesAreDeviceError) {
  if (num_gpus() == 0) GTEST_SKIP() << "needs a GPU: this build or machine has none, so no two devices to mix";
  Array host = ones({4}, float32, cpu()), device = ones({4}, float32, gpu(0));
  expect_error<DeviceError>([&] { add(host, device); }, {"add", "cpu", "cuda:0"}, "add(cpu, cuda:0)");
  expect_error<DeviceError>([&] { (void)(device * host); }, {"multiply", "cpu", "cuda:0"}, "cuda:0 * cpu");
  Array out = empty({4}, float32, cpu());
  expect_error<DeviceError>([&] { exp(device, out); }, {"exp", "cpu", "cuda:0"}, "exp into a cpu out");
}

}  // namespace
}  // namespace kiln::harness
