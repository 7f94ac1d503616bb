// The op-consistency harness (docs/architecture.md; after ggml's test-backend-ops): every elementwise
// op, cast and C++ operator is declared once (tests/harness/op_table_test.cpp: name, arity, dtypes,
// tolerance per dtype, how to call it) and run on every available backend against NumPy golden cases
// written by tests/golden/ops_golden.py (its docstring describes the manifest format). Each case's inputs
// are rebuilt in kiln with the layout NumPy used (transposed and sliced views keep their strides), moved
// to each device, and the result must have NumPy's dtype and shape and match its values: integers and
// bools exactly, floats within the op's ulp tolerance, NaN where NumPy has NaN, infinities with their sign.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln::harness {

/// Allowed error of float results in units in the last place of the result dtype (0: bit-exact).
/// Integer and bool results are always compared exactly.
struct Tolerance {
  double float64 = 0, float32 = 0, float16 = 0, bfloat16 = 0;
  /// The allowance for results of dtype `t` (0 for integers and bool).
  double ulps(DType t) const;
  bool exact() const { return float64 == 0 && float32 == 0 && float16 == 0 && bfloat16 == 0; }
};
/// Correctly rounded ops (arithmetic, comparisons, rounding, casts): the same bits as NumPy.
inline constexpr Tolerance kExact{};
/// libm-like functions: a few ulps for float32/float64 (against a reference computed in higher precision);
/// float16/bfloat16 are computed in float32 and rounded once, so they may differ by one ulp at a tie.
inline constexpr Tolerance kMath{4, 4, 1, 1};
/// Formulas that round an argument a steep function then magnifies (gelu's x/sqrt(2)): float64 within
/// 64 ulps; float32 and narrower are computed in double and rounded once (the accuracy column's Approx).
inline constexpr Tolerance kApprox{64, 4, 1, 1};

/// One operand of a golden case as the manifest spells it.
struct OperandSpec {
  enum class Kind { Array, BFloat16Bits, Int, Float, Bool };
  Kind kind = Kind::Array;
  std::string file;              ///< pooled .npy file, relative to the golden directory
  int64_t offset = 0;            ///< element offset of this array in the pool
  Shape shape;                   ///< shape of the stored (base) array
  std::string recipe = "plain";  ///< plain | T | sliceAxS: how NumPy's view was made from the base
  std::string text;              ///< the manifest text, for messages
  bool is_array() const { return kind == Kind::Array || kind == Kind::BFloat16Bits; }
  /// The Python scalar as a kiln Scalar (bool, int64 or double kind).
  Scalar scalar() const;
};

/// One case: an op applied to operands, with NumPy's result.
struct GoldenCase {
  std::string op, id;
  DType dtype = DType::Float32;  ///< NumPy's result dtype
  OperandSpec expected;
  // A flag beside a plain dtype rather than std::optional<DType>: g++ 13 reports -Wmaybe-uninitialized for the
  // optional's payload when a case is copied (a false positive of its optional<enum> analysis).
  bool has_cast_to = false;
  DType cast_to = DType::Float32;  ///< astype's target, when has_cast_to
  std::vector<OperandSpec> inputs;
  std::string line;  ///< the manifest line
  /// "op__case": the parametrised test's name.
  std::string test_name() const { return op + "__" + id; }
};
/// Lets GoogleTest print a case as its manifest line.
void PrintTo(const GoldenCase& c, std::ostream* os);

/// An op as declared by ops_golden.py's table (the manifest's `#op` lines).
struct GoldenOp {
  std::string name;
  int arity = 0;
  std::vector<DType> dtypes;
  std::string kind;  ///< "exact" or "math"
};

struct Manifest {
  std::vector<GoldenOp> ops;
  std::vector<GoldenCase> cases;
  std::string error;  ///< set when the manifest is missing or malformed
};

/// The golden data directory: $KILN_GOLDEN_DIR, else the build's KILN_GOLDEN_DIR.
std::string golden_dir();
/// golden_dir()/ops/manifest.txt, parsed once.
const Manifest& manifest();

/// An input of a case rebuilt on one device: an array view with NumPy's strides, or a Python scalar.
struct Input {
  bool is_array = false;
  Array array;
  Scalar scalar;
  Operand operand() const { return is_array ? Operand(array) : Operand(scalar); }
};

/// An op as the harness calls it: `run` computes the result; `run_out`, when set, writes it into `out`.
struct OpDecl {
  std::string name;
  int arity = 0;
  std::vector<DType> dtypes;
  Tolerance tolerance;
  std::function<Array(std::vector<Input>&, const GoldenCase&)> run;
  std::function<Array(std::vector<Input>&, const Array& out)> run_out;
};

/// The devices every case runs on: the CPU, then each GPU.
std::vector<Device> backends();
/// The stored array of an operand on the CPU (bfloat16 bit patterns become a bfloat16 array).
Array load_base(const OperandSpec& spec);
/// The dtype of an array operand (bfloat16 for bfloat16 bit patterns).
DType operand_dtype(const OperandSpec& spec);
/// NumPy's view of `base`: `plain`, `T` (all axes reversed) or `sliceAxS` (base[..., ::S] on axis A).
Array apply_recipe(const Array& base, const std::string& recipe);
/// The inputs of `c` on `device`: each base array is moved with .to(device), then viewed there.
std::vector<Input> make_inputs(const GoldenCase& c, Device device);
/// "" when `got` has `expected`'s dtype, shape and values (within `tolerance`); otherwise a message with
/// the first mismatching index, got/expected there and the input values at that index.
std::string compare(const Array& got, const Array& expected, DType expected_dtype, const Tolerance& tolerance,
                    const std::vector<Input>& inputs);
/// Runs `c` through `op` on every backend (and its out= form), reporting failures to GoogleTest.
void run_case(const OpDecl& op, const GoldenCase& c);

/// Calls f(value) with the C++ value of a scalar: bool, int64_t or double, by the scalar's kind.
template <class F>
decltype(auto) visit_scalar(const Scalar& s, F&& f) {
  switch (s.kind()) {
    case Scalar::Kind::Bool:
      return f(s.to_bool());
    case Scalar::Kind::Int:
      return f(s.to_int64());
    case Scalar::Kind::Float:
    case Scalar::Kind::Complex:  // the harness's golden scalars are real (complex cases: test_complex.cpp)
      break;
  }
  return f(s.to_double());
}
/// Calls f(array) or f(scalar value) for one input.
template <class F>
decltype(auto) visit_input(const Input& in, F&& f) {
  if (in.is_array) return f(in.array);
  return visit_scalar(in.scalar, f);
}

}  // namespace kiln::harness
