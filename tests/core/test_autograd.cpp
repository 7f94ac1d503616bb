// Autograd: every differentiable row of the op tables passes gradcheck (central differences in float64) on
// every backend; views, concatenate, take, matmul, conversions; the engine's rules (accumulation,
// retain_graph, NoGradGuard, hooks, in-place checks) with hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.hpp"
#include "core/op_table.hpp"
#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"
#include "autograd_test_util.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using autograd_test::kRows;
using autograd_test::OpRow;
using autograd_test::values;

using Fn = std::function<Array(const std::vector<Array>&)>;

void expect_gradcheck(const Fn& f, const std::vector<Array>& inputs, const std::string& what, Device d,
                      GradcheckOptions options = {}) {
  const GradcheckResult r = gradcheck(f, inputs, options);
  EXPECT_TRUE(r.passed) << what << " on " << d.str() << ": " << r.report;
}

std::vector<Device> devices() { return harness::backends(); }

// ---------------------------------------------------------------- the op list
/// Where a gradcheck draws operand `operand` of a row with input domain `domain` (the domain column of the op
/// table): an interval inside the domain where the op is smooth and its derivative finite, and which the
/// finite differences' steps never carry across a kink (0 for abs, integers for floor and remainder).
std::pair<double, double> gradcheck_interval(detail::InputDomain domain, int operand) {
  using D = detail::InputDomain;
  switch (domain) {
    case D::Any:
    case D::SmallInt:
    case D::Moderate:
    case D::Activation: return operand == 0 ? std::pair{-2.0, 2.0} : std::pair{-1.7, 2.3};
    case D::Unit: return {-0.8, 0.8};
    case D::Power: return operand == 0 ? std::pair{0.2, 1.9} : std::pair{-1.5, 2.5};
    case D::Positive:
    case D::NonNegative:
    case D::AboveMinusOne:
    case D::Halves:
    case D::Divisor:
    case D::IntDivisor: return operand == 0 ? std::pair{0.2, 1.9} : std::pair{0.4, 1.6};
    case D::Logical:
    case D::Compare:
    case D::Select:
    case D::Clip:
    case D::None: break;  // no formula, or an Own row checked by hand below
  }
  ADD_FAILURE() << "no gradcheck interval for input domain " << static_cast<int>(domain);
  return {0.0, 1.0};
}

TEST(AutogradTable, EveryDifferentiableOpPassesGradcheck) {
  int checked = 0;
  for (Device d : devices()) {
    for (const OpRow& row : kRows) {
      const detail::OpInfo& info = detail::op_info(row.code);
      if (info.derivative == detail::Derivative::NotDifferentiable) continue;
      const auto [lo0, hi0] = gradcheck_interval(info.domain, 0);
      const auto [lo1, hi1] = gradcheck_interval(info.domain, 1);
      if (row.arity == 1) {
        auto fn = row.unary;
        expect_gradcheck([fn](const std::vector<Array>& x) { return fn(x[0]); }, {values({2, 3}, lo0, hi0, 1, d)},
                         row.name, d);
      } else {
        auto fn = row.binary;
        // Broadcasting both ways: (2, 3) with (3,), (2, 1) with (1, 3); and a weak scalar on each side.
        expect_gradcheck([fn](const std::vector<Array>& x) { return fn(x[0], x[1]); },
                         {values({2, 3}, lo0, hi0, 1, d), values({3}, lo1, hi1, 2, d)},
                         std::string(row.name) + " (2,3) with (3,)", d);
        expect_gradcheck([fn](const std::vector<Array>& x) { return fn(x[0], x[1]); },
                         {values({2, 1}, lo0, hi0, 3, d), values({1, 3}, lo1, hi1, 4, d)},
                         std::string(row.name) + " (2,1) with (1,3)", d);
        const double s = 0.5 * (lo1 + hi1) + 0.0123;
        expect_gradcheck([fn, s](const std::vector<Array>& x) { return fn(x[0], s); }, {values({4}, lo0, hi0, 5, d)},
                         std::string(row.name) + " with a scalar", d);
        const double t = 0.5 * (lo0 + hi0) + 0.0321;
        expect_gradcheck([fn, t](const std::vector<Array>& x) { return fn(t, x[0]); }, {values({4}, lo1, hi1, 6, d)},
                         std::string(row.name) + " of a scalar", d);
      }
      ++checked;
    }
    // where and clip (the Own rows).
    const Array cond = values({2, 3}, -1, 1, 7, d) > 0;
    expect_gradcheck([cond](const std::vector<Array>& x) { return where(cond, x[0], x[1]); },
                     {values({2, 3}, -1, 1, 1, d), values({3}, -1, 1, 2, d)}, "where", d);
    expect_gradcheck([cond](const std::vector<Array>& x) { return where(cond, x[0], 0.5); },
                     {values({2, 3}, -1, 1, 1, d)}, "where with a scalar", d);
    expect_gradcheck([](const std::vector<Array>& x) { return clip(x[0], x[1], x[2]); },
                     {values({2, 3}, -2, 2, 1, d), values({3}, -1.5, -0.1, 2, d), values({2, 1}, 0.1, 1.5, 3, d)},
                     "clip", d);
  }
  // Every Fn row with a formula was checked (a new row cannot skip it).
  int formulas = 0;
  for (const OpRow& row : kRows) formulas += detail::op_info(row.code).derivative == detail::Derivative::Formula;
  EXPECT_EQ(checked, formulas * static_cast<int>(devices().size()));
}

TEST(AutogradTable, OpsWithoutAGradientGiveResultsThatRequireNone) {
  for (Device d : devices()) {
    Array x = values({4}, -1, 1, 1, d).astype(float32).set_requires_grad();
    Array y = values({4}, -1, 1, 2, d).astype(float32);
    EXPECT_FALSE((x > y).requires_grad());
    EXPECT_FALSE(isnan(x).requires_grad());
    EXPECT_FALSE(argmax(x).requires_grad());
    EXPECT_FALSE(x.any().requires_grad());
    EXPECT_TRUE(floor(x).requires_grad());  // piecewise constant: a zero gradient, not none
    EXPECT_THROW(cumprod(x), DTypeError);
    EXPECT_THROW(sort(x), DTypeError);
    EXPECT_THROW(x.index({x > 0}), DTypeError);
    EXPECT_NO_THROW(argsort(x));
    const ElementwiseKernel twice("T x", "T y", "y = x * 2", "autograd_twice");
    EXPECT_THROW(twice(x), DTypeError);  // user kernels have no gradient
  }
}

// ---------------------------------------------------------------- reductions and scans
TEST(AutogradReduce, EveryReductionPassesGradcheck) {
  for (Device d : devices()) {
    const Array x = values({2, 3, 4}, 0.3, 1.7, 1, d);
    struct Case {
      std::string name;
      Fn f;
    };
    const std::vector<Case> cases = {
        {"sum all", [](auto& v) { return sum(v[0]); }},
        {"sum axis 1 keepdims", [](auto& v) { return sum(v[0], 1, true); }},
        {"sum axes (0, 2)",
         [](auto& v) {
           return sum(v[0], {0, 2});
         }},
        {"prod axis -1", [](auto& v) { return prod(v[0], -1); }},
        {"prod all", [](auto& v) { return prod(v[0] * 1.2); }},
        {"mean axes (1, 2)",
         [](auto& v) {
           return mean(v[0], {1, 2});
         }},
        {"max axis 1", [](auto& v) { return max(v[0], 1); }},
        {"min all keepdims", [](auto& v) { return min(v[0], {}, true); }},
        {"var axis 2", [](auto& v) { return var(v[0], 2); }},
        {"var ddof 1",
         [](auto& v) {
           return var(v[0], {0, 1}, 1, true);
         }},
        {"std axis 0", [](auto& v) { return kiln::std(v[0], 0); }},
        {"std ddof 1 all", [](auto& v) { return kiln::std(v[0], {}, 1); }},
        {"logsumexp axis -1", [](auto& v) { return logsumexp(v[0], -1); }},
        {"logsumexp axes (0, 2) keepdims",
         [](auto& v) {
           return logsumexp(v[0], {0, 2}, true);
         }},
        {"norm all", [](auto& v) { return linalg::norm(v[0]); }},
        {"norm axis 1", [](auto& v) { return linalg::norm(v[0], 1); }},
        {"cumsum axis 1", [](auto& v) { return cumsum(v[0], 1); }},
        {"cumsum flattened", [](auto& v) { return cumsum(v[0]); }},
        {"member sum", [](auto& v) { return v[0].sum(0).mean(); }},
    };
    for (const Case& c : cases) expect_gradcheck(c.f, {x}, c.name, d);
  }
}

TEST(AutogradReduce, ProdWithZerosAndMaxTiesMatchHandValues) {
  for (Device d : devices()) {
    Array x = from_data(std::vector<double>{2, 0, 3, 0, 5, 4}, Shape{2, 3}, d).set_requires_grad();
    prod(x, 1).sum().backward();
    // Row 0: (2, 0, 3): d/dx0 = 0, d/dx1 = 6, d/dx2 = 0; row 1: (0, 5, 4): 20, 0, 0.
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 6, 0, 20, 0, 0}));
    Array y = from_data(std::vector<double>{1, 3, 3, 2}, Shape{4}, d).set_requires_grad();
    max(y).backward();
    EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 0.5, 0}));  // ties share, as torch.amax
  }
}

// ---------------------------------------------------------------- views, joins, gathers, conversions
// A view's gradient lands in its base: with no zeros under a view that reaches every element (reshape,
// transpose, flip), with zeros where a view does not reach (strided slices and windows, a broadcast row).
TEST(AutogradViews, GradientsThroughCoveringAndPartialViewsAreExact) {
  for (Device d : harness::backends()) {
    const std::vector<float> w{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // upstream weights, one per element
    auto grad_of = [&](const std::function<Array(const Array&)>& view) {
      Array x = arange(12, float32, d).reshape({3, 4});
      x.set_requires_grad(true);
      const Array y = view(x * 1.0);  // a non-leaf base: the view records against x * 1.0
      sum(y * from_data(std::vector<float>(w.begin(), w.begin() + y.size()), y.shape(), d)).backward();
      return x.grad().to(cpu()).to_vector<float>();
    };
    // reshape: element i of the view is element i of the base
    EXPECT_EQ(grad_of([](const Array& a) { return a.reshape({6, 2}); }), w) << d.str();
    // transpose (4, 3): view element (j, i) is base element (i, j)
    EXPECT_EQ(grad_of([](const Array& a) { return a.T(); }),
              (std::vector<float>{1, 4, 7, 10, 2, 5, 8, 11, 3, 6, 9, 12})) << d.str();
    // a flip of the rows: the base's row r gets the view's row 2 - r
    EXPECT_EQ(grad_of([](const Array& a) { return a.slice(0, std::nullopt, std::nullopt, -1); }),
              (std::vector<float>{9, 10, 11, 12, 5, 6, 7, 8, 1, 2, 3, 4})) << d.str();
    // every other column: the others get zeros
    EXPECT_EQ(grad_of([](const Array& a) { return a.slice(1, std::nullopt, std::nullopt, 2); }),
              (std::vector<float>{1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0})) << d.str();
    // windows of 3 every 4 elements of the flat 12: the fourth of each gets zero
    EXPECT_EQ(grad_of([](const Array& a) { return as_strided(a, {3, 3}, {4, 1}); }),
              (std::vector<float>{1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, 0})) << d.str();
    // row 0 broadcast to 3 rows: its gradient is the column sums, the other rows get zeros
    EXPECT_EQ(grad_of([](const Array& a) { return a.slice(0, 0, 1).broadcast_to({3, 4}); }),
              (std::vector<float>{15, 18, 21, 24, 0, 0, 0, 0, 0, 0, 0, 0})) << d.str();
  }
}

// Several partial views of one base (a packed q/k/v projection's heads): the engine adds their gradients into
// one buffer of the base. Disjoint, overlapping and strided views, mixed with a gradient that is not a view's, in
// both orders; each element's gradient computed by hand.
TEST(AutogradViews, PartialViewsOfOneBaseAccumulateIntoOneBufferExactly) {
  for (Device d : harness::backends()) {
    Array x = arange(12, float32, d).reshape({2, 6});
    x.set_requires_grad(true);
    const Array base = x * 1.0;  // a non-leaf base, row-major
    // three column blocks as heads (2, 2) -> transposed, weighted 1, 10, 100
    const Array q = base.slice(1, 0, 2).T(), k = base.slice(1, 2, 4).T(), v = base.slice(1, 4, 6).T();
    sum(q + k * 10.0 + v * 100.0).backward();
    EXPECT_EQ(x.grad().to(cpu()).to_vector<float>(),
              (std::vector<float>{1, 1, 10, 10, 100, 100, 1, 1, 10, 10, 100, 100})) << d.str();

    // overlapping windows, a strided view and the base itself used directly, the direct use first and last
    for (bool direct_first : {true, false}) {
      Array y = arange(8, float32, d);
      y.set_requires_grad(true);
      const Array b = y * 1.0;
      Array loss = direct_first ? sum(b * 1000.0) : scalar_array(0.0, float32, d);
      loss = loss + sum(b.slice(0, 0, 5)) + sum(b.slice(0, 3, 8) * 2.0) + sum(b.slice(0, 1, 8, 3) * 4.0);
      if (!direct_first) loss = loss + sum(b * 1000.0);
      loss.backward();
      // element e: 1000 + [e < 5] + 2 [3 <= e] + 4 [e in {1, 4, 7}]
      EXPECT_EQ(y.grad().to(cpu()).to_vector<float>(),
                (std::vector<float>{1001, 1005, 1001, 1003, 1007, 1002, 1002, 1006}))
          << d.str() << (direct_first ? " direct use first" : " direct use last");
    }

    // rows of a base made from a transposed operand (its layout may follow the operand's), and of a
    // row-major copy: the same gradients either way
    for (bool copied : {false, true}) {
      Array z = arange(6, float32, d).reshape({2, 3});
      z.set_requires_grad(true);
      const Array t = copied ? z.T().contiguous() * 1.0 : z.T() * 1.0;  // (3, 2)
      (sum(t.slice(0, 0, 1) * 3.0) + sum(t.slice(0, 2, 3) * 5.0)).backward();
      EXPECT_EQ(z.grad().to(cpu()).to_vector<float>(), (std::vector<float>{3, 0, 5, 3, 0, 5}))
          << d.str() << (copied ? " row-major base" : " base from a transposed operand");
    }
  }
}

TEST(AutogradViews, EveryViewAndJoinPassesGradcheck) {
  for (Device d : devices()) {
    const Array x = values({2, 3, 4}, -1, 1, 1, d);
    const Array y = values({2, 2, 4}, -1, 1, 2, d);
    struct Case {
      std::string name;
      Fn f;
      std::vector<Array> in;
    };
    const Array idx = from_data(std::vector<int64_t>{2, 0, 2, 1, 2}, Shape{5}, d);
    const std::vector<Case> cases = {
        {"reshape",
         [](auto& v) {
           return v[0].reshape({4, 6}) * arange(6, float64, v[0].device());
         },
         {x}},
        {"transpose", [](auto& v) { return v[0].T() * arange(2, float64, v[0].device()); }, {x}},
        {"permute",
         [](auto& v) {
           return v[0].permute({2, 0, 1}) * 1.5;
         },
         {x}},
        {"swapaxes + moveaxis", [](auto& v) { return moveaxis(swapaxes(v[0], 0, 2), 0, 1); }, {x}},
        {"slice with steps",
         [](auto& v) {
           return v[0].index({Slice(), Slice(std::nullopt, std::nullopt, -2), Slice(1, 4)});
         },
         {x}},
        {"integer index and newaxis",
         [](auto& v) {
           return v[0].index({1, newaxis, ellipsis, 2});
         },
         {x}},
        {"expand_dims + squeeze", [](auto& v) { return squeeze(expand_dims(v[0], 1)) * 2.0; }, {x}},
        {"broadcast_to",
         [](auto& v) {
           return v[0].index({0, Slice(), Slice(0, 1)}).broadcast_to({5, 3, 4}) * arange(4, float64, v[0].device());
         },
         {x}},
        {"view of a view of a view",
         [](auto& v) {
           return v[0].T().reshape({12, 2})[3].flatten();
         },
         {x}},
        {"flatten and ravel", [](auto& v) { return ravel(v[0].T()) + v[0].flatten(); }, {x}},
        {"split",
         [](auto& v) {
           auto p = split(v[0], {1, 3}, 2);
           return p[0] * 2.0 + p[2] - p[1].sum(2, true);
         },
         {x}},
        {"as_strided",
         [](auto& v) {
           return as_strided(v[0], {3, 2}, {4, 1}, 5);
         },
         {x}},
        {"concatenate",
         [](auto& v) {
           return concatenate({v[0], v[1] * 3.0, v[0]}, 1);
         },
         {x, y}},
        {"stack",
         [](auto& v) {
           return stack({v[0], v[0] * v[0]}, 2);
         },
         {x}},
        {"take along an axis (repeats)", [idx](auto& v) { return take(v[0], idx, 1); }, {x}},
        {"take flattened", [idx](auto& v) { return take(v[0], idx * 5); }, {x}},
        {"take of a transposed view (recomputed positions)", [idx](auto& v) { return take(v[0].T(), idx, 0); }, {x}},
        {"take of a sliced contiguous view (offset)", [idx](auto& v) { return take(v[0][1], idx, 0); }, {x}},
        {"take_along_axis",
         [d](auto& v) {
           return take_along_axis(v[0], from_data(std::vector<int64_t>{3, 0, 3, -1, 2, 1}, Shape{2, 1, 3}, d), 2);
         },
         {x}},
        {"contiguous copy of a transpose", [](auto& v) { return v[0].T().contiguous() * 1.0; }, {x}},
        {"dot (matmul)",
         [](auto& v) {
           return dot(v[0].reshape({6, 4}), v[0][0].T());
         },
         {x}},
    };
    for (const Case& c : cases) expect_gradcheck(c.f, c.in, c.name, d);
  }
}

TEST(AutogradViews, TakeAlongAxisPicksAsNumPyAndRefusesBadIndices) {
  for (Device d : devices()) {
    const Array a = from_data(std::vector<double>{10, 11, 12, 20, 21, 22}, Shape{2, 3}, d);
    const Array picked = take_along_axis(a, from_data(std::vector<int64_t>{2, 0}, Shape{2, 1}, d), 1);
    EXPECT_EQ(picked.shape(), (Shape{2, 1}));
    EXPECT_EQ(picked.to_vector<double>(), (std::vector<double>{12, 20}));
    // Along axis 0 with a broadcast index row: out[i, j] = a[idx[i, j], j].
    const Array rows = take_along_axis(a, from_data(std::vector<int64_t>{1, 0, -1}, Shape{1, 3}, d), 0);
    EXPECT_EQ(rows.to_vector<double>(), (std::vector<double>{20, 11, 22}));
    EXPECT_THROW(
        {
          (void)take_along_axis(a, from_data(std::vector<int64_t>{3, 0}, Shape{2, 1}, d), 1);
          synchronize(d);  // a GPU reports a bad index at the next synchronisation
        },
        ShapeError);
    EXPECT_THROW(take_along_axis(a, from_data(std::vector<int64_t>{1, 0}, Shape{2}, d), 1), ShapeError);
    EXPECT_THROW(take_along_axis(a, ones({2, 1}, float32, d), 1), DTypeError);
  }
}

TEST(AutogradViews, ScatterAddIsTheAdjointOfTakeAlongAxis) {
  for (Device d : devices()) {
    const Array a = from_data(std::vector<double>{1, 2, 3, 4, 5, 6}, Shape{2, 3}, d);
    const Array idx = from_data(std::vector<int64_t>{2, 2, 0, 1, -1, 1, 0, 0}, Shape{2, 4}, d);
    const Array src = from_data(std::vector<double>{10, 20, 30, 40, 50, 60, 70, 80}, Shape{2, 4}, d);
    // Row 0: +10 +20 at 2, +30 at 0, +40 at 1; row 1: +50 at 2, +60 at 1, +70 +80 at 0.
    EXPECT_EQ(scatter_add(a, 1, idx, src).to_vector<double>(), (std::vector<double>{31, 42, 33, 154, 65, 56}));
    expect_gradcheck([&](auto& v) { return scatter_add(v[0], 1, idx, v[1]) * arange(3, float64, d); }, {a, src},
                     "scatter_add", d);
    // <take_along_axis(x, i), y> == <x, scatter_add(0, i, y)>
    const Array x = values({2, 3}, -1, 1, 1, d), y = values({2, 4}, -1, 1, 2, d);
    EXPECT_NEAR(sum(take_along_axis(x, idx, 1) * y).item<double>(),
                sum(x * scatter_add(zeros_like(x), 1, idx, y)).item<double>(), 1e-12);
    EXPECT_THROW(scatter_add(a, 1, idx, src.index({Slice(), Slice(0, 3)})), ShapeError);
    EXPECT_THROW(scatter_add(a.astype(int64), 1, idx, src), DTypeError);
    EXPECT_THROW(
        {
          (void)scatter_add(a, 1, idx * 5, src);
          synchronize(d);  // a GPU reports a bad index at the next synchronisation
        },
        ShapeError);
  }
}

TEST(AutogradViews, MatmulShapesPassGradcheck) {
  for (Device d : devices()) {
    struct Case {
      Shape a, b;
    };
    for (const Case& c : std::vector<Case>{{{3, 4}, {4, 2}},
                                           {{4}, {4, 2}},
                                           {{3, 4}, {4}},
                                           {{4}, {4}},
                                           {{2, 3, 4}, {4, 5}},
                                           {{3, 4}, {2, 4, 5}},
                                           {{2, 1, 3, 4}, {3, 4, 2}}}) {
      expect_gradcheck([](auto& v) { return matmul(v[0], v[1]); }, {values(c.a, -1, 1, 1, d), values(c.b, -1, 1, 2, d)},
                       "matmul " + shape_str(c.a) + " @ " + shape_str(c.b), d);
    }
  }
}

TEST(AutogradViews, ConversionsSendTheGradientBackInTheInputsDtypeAndDevice) {
  for (Device d : devices()) {
    Array x = from_data(std::vector<float>{1, 2, 3}, Shape{3}, d).set_requires_grad();
    Array w = from_data(std::vector<double>{0.5, -1, 4}, Shape{3}, d);
    sum(x.astype(float64) * w).backward();
    EXPECT_EQ(x.grad().dtype(), float32);
    EXPECT_EQ(x.grad().device(), d);
    EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0.5f, -1, 4}));
    // Across devices: the gradient comes back to the input's device.
    Array z = from_data(std::vector<float>{1, 2, 3}, Shape{3}, cpu()).set_requires_grad();
    Array on_d = z.to(d);
    EXPECT_EQ(on_d.grad_fn_name(), d == cpu() ? "" : "ToBackward");
    sum(square(on_d)).backward();
    EXPECT_EQ(z.grad().device(), cpu());
    EXPECT_EQ(z.grad().to_vector<float>(), (std::vector<float>{2, 4, 6}));
  }
}

// ---------------------------------------------------------------- the engine
TEST(AutogradEngine, CustomFunctionsRecordTheirOwnBackward) {
  // f(x, y) = x * y^3 with a hand-written gradient; y may broadcast (the engine sums its gradient back).
  const AutogradFunction f{"MulCubeBackward",
                           [](const std::vector<Array>& in, std::vector<Array>& saved) {
                             saved = {in[0], in[1]};
                             return in[0] * in[1] * in[1] * in[1];
                           },
                           [](const Array& g, const std::vector<Array>& saved, const std::vector<bool>& needs) {
                             const Array &x = saved[0], &y = saved[1];
                             return std::vector<Array>{needs[0] ? g * y * y * y : Array(),
                                                       needs[1] ? g * x * y * y * 3.0 : Array()};
                           }};
  for (Device d : devices()) {
    const Array x = random::normal({3, 2}, 0.0, 1.0, float64, d), y = random::normal({2}, 0.0, 1.0, float64, d);
    const GradcheckResult r = gradcheck([&](auto& in) { return f.apply({in[0], in[1]}); }, {x, y});
    EXPECT_TRUE(r.passed) << d.str() << ": " << r.report;
    // Not recorded without an input that requires grad, or under NoGradGuard.
    EXPECT_FALSE(f.apply({x, y}).requires_grad());
    const Array xg = x.copy().set_requires_grad();
    {
      NoGradGuard no_grad;
      EXPECT_FALSE(f.apply({xg, y}).requires_grad());
    }
    const Array out = f.apply({xg, y});
    EXPECT_EQ(out.grad_fn_name(), "MulCubeBackward");
    // An in-place change to a saved array is caught, as for built-in ops.
    Array yw = y.copy();
    const Array out2 = f.apply({xg, yw});
    yw += 1.0;
    kiln_test::expect_error<ValueError>([&] { sum(out2).backward(); }, {"MulCubeBackward", "modified in place"});
    // A backward returning the wrong number of gradients is a clear error.
    const AutogradFunction bad{"BadBackward",
                               [](const std::vector<Array>& in, std::vector<Array>&) { return in[0] * 2.0; },
                               [](const Array& g, const std::vector<Array>&, const std::vector<bool>&) {
                                 return std::vector<Array>{g, g};
                               }};
    kiln_test::expect_error<ValueError>([&] { sum(bad.apply({xg})).backward(); },
                                        {"BadBackward", "2 gradients for 1 inputs"});
    // An undefined array saved for backward (an absent optional operand) comes back undefined; a second backward
    // without retain_graph still says the saved arrays were freed.
    const AutogradFunction optional{"OptionalBackward",
                                    [](const std::vector<Array>& in, std::vector<Array>& saved) {
                                      saved = {in[0], Array()};
                                      return in[0] * 3.0;
                                    },
                                    [](const Array& g, const std::vector<Array>& saved, const std::vector<bool>&) {
                                      EXPECT_TRUE(saved[0].defined());
                                      EXPECT_FALSE(saved[1].defined());
                                      return std::vector<Array>{g * 3.0};
                                    }};
    Array xo = x.copy().set_requires_grad();
    const Array yo = sum(optional.apply({xo}));
    yo.backward();
    EXPECT_TRUE(allclose(xo.grad(), full({3, 2}, 3.0, float64, d))) << d.str();
    kiln_test::expect_error<ValueError>([&] { yo.backward(); }, {"freed", "retain_graph"});
  }
}

TEST(AutogradEngine, GradientsAccumulateUntilCleared) {
  for (Device d : devices()) {
    Array x = from_data(std::vector<double>{1, 2}, Shape{2}, d).set_requires_grad();
    EXPECT_TRUE(x.is_leaf());
    Array y = sum(x * x * 3.0);  // dy/dx = 6x
    EXPECT_FALSE(y.is_leaf());
    EXPECT_EQ(y.grad_fn_name(), "SumBackward");
    y.backward(Array(), true);
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{6, 12}));
    y.backward();  // retained once: runs again and adds
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{12, 24}));
    EXPECT_THROW(y.backward(), ValueError);  // freed now
    x.set_grad(Array());
    EXPECT_FALSE(x.grad().defined());
    sum(x).backward();
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 1}));
  }
}

TEST(AutogradEngine, ADiamondAddsBothPaths) {
  for (Device d : devices()) {
    Array x = from_data(std::vector<double>{2}, Shape{1}, d).set_requires_grad();
    Array a = exp(x), b = a * x, c = a + b;  // c = e^x (1 + x): dc/dx = e^x (2 + x)
    c.backward();
    EXPECT_NEAR(x.grad().item<double>(), std::exp(2.0) * 4, 1e-12);
  }
}

TEST(AutogradEngine, NoGradGuardDetachAndErrors) {
  for (Device d : devices()) {
    Array x = from_data(std::vector<float>{1, 2}, Shape{2}, d).set_requires_grad();
    {
      NoGradGuard no_grad;
      EXPECT_FALSE(is_grad_enabled());
      EXPECT_FALSE((x * 2).requires_grad());
      x -= 1.0;  // an update of a parameter, unrecorded
      {
        EnableGradGuard enable;
        EXPECT_TRUE((x * 2).requires_grad());
      }
    }
    EXPECT_TRUE(is_grad_enabled());
    EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 1}));
    EXPECT_FALSE(x.detach().requires_grad());
    EXPECT_TRUE(x.detach().shares_storage(x));
    EXPECT_THROW(x += 1.0, ValueError);  // in place on an array that requires grad
    EXPECT_THROW(x.fill(0), ValueError);
    EXPECT_THROW(add(x, x, empty({2}, float32, d)), ValueError);  // out= with a recorded operand
    EXPECT_THROW((x * 2).backward(), ValueError);                 // not size 1: needs a gradient
    EXPECT_THROW((x * 2).backward(ones({3}, float32, d)), ShapeError);
    EXPECT_THROW(x.detach().backward(), ValueError);  // does not require grad
    EXPECT_THROW(arange(3, int64, d).set_requires_grad(), DTypeError);
    EXPECT_THROW((x * 2).set_requires_grad(false), ValueError);
    EXPECT_THROW(x.broadcast_to({3, 2}).detach().set_requires_grad(), ValueError);
    Array g = ones({2}, float32, d);
    Array y = x * 3;
    EXPECT_NO_THROW(y.backward(g));
    EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 3}));
  }
}

TEST(AutogradEngine, AnArraySavedForBackwardAndChangedInPlaceThrowsNamingTheOp) {
  for (Device d : devices()) {
    Array x = from_data(std::vector<double>{1, 2}, Shape{2}, d).set_requires_grad();
    Array s = sin(x) * 1.0;
    Array e = exp(s);  // ExpBackward saves its result, MultiplyBackward saves s? no: s is an input of exp only
    {
      NoGradGuard no_grad;
      e.fill(0);
    }
    try {
      sum(e).backward();
      FAIL() << "expected ValueError";
    } catch (const ValueError& err) {
      EXPECT_NE(std::string(err.what()).find("ExpBackward"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("modified in place"), std::string::npos) << err.what();
    }
  }
}

TEST(AutogradEngine, HooksAndRetainGrad) {
  for (Device d : devices()) {
    Array x = from_data(std::vector<double>{1, 2}, Shape{2}, d).set_requires_grad();
    int ready = 0;
    x.register_post_accumulate_grad_hook([&](const Array& leaf) {
      ++ready;
      EXPECT_TRUE(leaf.grad().defined());
    });
    Array h = x * 2.0;
    h.retain_grad();
    h.register_hook([](const Array& g) { return g * 10.0; });  // scales what flows on
    Array y = sum(h * h);                                      // dy/dh = 2h = (4, 8); hook: (40, 80); dh/dx = 2
    y.backward();
    EXPECT_EQ(ready, 1);
    EXPECT_EQ(h.grad().to_vector<double>(), (std::vector<double>{40, 80}));
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{80, 160}));
  }
}

TEST(AutogradEngine, FusedFunctionsRecordOpByOp) {
  auto softmax = fuse([](auto z) {
    auto e = exp(z - max(z, -1, true));
    return e / sum(e, -1, true);
  });
  for (Device d : devices()) {
    const Array x = values({3, 4}, -1, 1, 1, d);
    expect_gradcheck([&](auto& v) { return softmax(v[0]); }, {x}, "fused softmax", d);
    Array p = x.copy().set_requires_grad();
    EXPECT_THROW(softmax.out({empty({3, 4}, float64, d)}, p), ValueError);
  }
}

TEST(AutogradEngine, GradcheckCatchesAWrongGradient) {
  // A function whose recorded graph differs from what it computes: detach() hides a term from autograd.
  const GradcheckResult r = gradcheck([](auto& v) { return v[0] * v[0].detach(); }, {values({3}, 0.5, 1, 1, cpu())});
  EXPECT_FALSE(r.passed);
  EXPECT_GT(r.max_abs_error, 0.1);
  EXPECT_NE(r.report.find("numeric"), std::string::npos);
}

// A primitive kind the engine has never seen: recorded through the one path (detail::record) with its own
// backward, it gets the engine's gradient plumbing (broadcast reduction, accumulation, version checks, freeing)
// without any change to the hook or src/autograd.
TEST(AutogradRecord, ANewPrimitiveRecordsItsOwnBackward) {
  for (Device d : devices()) {
    // cube(x) = x^3 broadcast against y: d/dx = 3 x^2 summed over the broadcast axis, d/dy = none.
    auto cube = [](const Array& x, const Array& y) {
      detail::GradRecorder record({&x, &y});
      Array out = x * x * x + y * 0.0;
      if (record) {
        auto backward = [](const detail::Node& node, const Array& g) {
          const Array& x = node.saved_array(0);
          return std::vector<Array>{node.needs(0) ? g * x * x * 3.0 : Array(), Array()};
        };
        detail::record(out,
                       std::make_shared<detail::Node>("CubeBackward", backward,
                                                      std::vector{detail::SavedArray(x)}),
                       {&x, &y});
      }
      return out;
    };
    Array x = from_data(std::vector<double>{1, 2}, Shape{2}, d).set_requires_grad();
    Array y = zeros({3, 1}, float64, d).set_requires_grad();
    Array out = cube(x, y);
    EXPECT_EQ(out.grad_fn_name(), "CubeBackward");
    sum(out).backward(Array(), true);
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{9, 36}));  // 3 rows * 3 x^2
    EXPECT_FALSE(y.grad().defined());
    sum(out).backward();  // retained: runs again and accumulates
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{18, 72}));
    kiln_test::expect_error<ValueError>([&] { sum(out).backward(); }, {"CubeBackward", "retain_graph"});
    Array w = from_data(std::vector<double>{1, 2}, Shape{2}, d).set_requires_grad();
    Array z = w.copy();
    const Array out2 = cube(z, zeros({1}, float64, d));
    {
      NoGradGuard no_grad;
      z += 1.0;
    }
    kiln_test::expect_error<ValueError>([&] { sum(out2).backward(); }, {"CubeBackward", "modified in place"});
  }
}

}  // namespace
}  // namespace kiln
