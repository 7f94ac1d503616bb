// The backward of the table-driven ops: each elementwise row's, reduction row's and scan row's derivative
// column (ops_internal.def, reductions_internal.def) expanded into one case of a formula function, and the
// node each such op records on its result (which inputs it saves follows from the names its formula uses).
#include "core/derivatives.hpp"

#include <array>
#include <string>
#include <string_view>

#include "core/autograd.hpp"
#include "core/reduce.hpp"
#include "kiln/fuse.hpp"
#include "kiln/scalar.hpp"

namespace kiln::derivatives {

namespace {

/// f(g, a) computed in float32 when the arguments are float16/bfloat16, rounded once at the end (PyTorch's
/// "opmath" for these backward kernels): more accurate than rounding each of the formula's dozen intermediates,
/// and on a GPU memory-bound instead of bound by the roundings.
template <class F>
auto widened(F f) {
  return [f](auto g, auto a) {
    const DType t = promote_types(g.dtype(), a.dtype());
    if (t == DType::Float16 || t == DType::BFloat16) return astype(f(astype(g, float32), astype(a, float32)), t);
    return f(g, a);
  };
}

}  // namespace

Array gelu_backward(const Array& g, const Array& a) {
  static const auto f = fuse(widened([](auto g, auto a) { return g * gelu_grad(a); }), "gelu_backward");
  return f(g, a);
}

Array gelu_tanh_backward(const Array& g, const Array& a) {
  static const auto f = fuse(widened([](auto g, auto a) { return g * gelu_tanh_grad(a); }), "gelu_tanh_backward");
  return f(g, a);
}

Array silu_backward(const Array& g, const Array& a) {
  static const auto f = fuse(widened([](auto g, auto a) { return g * silu_grad(a); }), "silu_backward");
  return f(g, a);
}

Array tanh_backward(const Array& g, const Array& out) {
  static const auto f = fuse(widened([](auto g, auto out) { return g * (1.0 - out * out); }), "tanh_backward");
  return f(g, out);
}

Array sigmoid_backward(const Array& g, const Array& out) {
  static const auto f =
      fuse(widened([](auto g, auto out) { return g * out * (1.0 - out); }), "sigmoid_backward");
  return f(g, out);
}

}  // namespace kiln::derivatives

namespace kiln::detail {

namespace {

using namespace kiln::derivatives;

const char* const kOpCodes[] = {
#define KILN_OP(Code, ...) #Code,
#include "kiln/ops.def"
};
const char* const kReduceCodes[] = {
#define KILN_REDUCTION(Code, ...) #Code,
#include "kiln/reductions.def"
};
std::string backward_name(const char* code) { return std::string(code) + "Backward"; }

// ---------------------------------------------------------------- formulas
// KILN_GRAD(da, db, dc) assigns the gradient of each input that needs one; NotDifferentiable leaves them
// undefined.
#define KILN_GRAD_1(d0) \
  if (need[0]) r[0] = (d0);
#define KILN_GRAD_2(d0, d1) \
  KILN_GRAD_1(d0)           \
  if (need[1]) r[1] = (d1);
#define KILN_GRAD_3(d0, d1, d2) \
  KILN_GRAD_2(d0, d1)           \
  if (need[2]) r[2] = (d2);
#define KILN_GRAD_PICK(_1, _2, _3, N, ...) N
#define KILN_GRAD(...) KILN_GRAD_PICK(__VA_ARGS__, KILN_GRAD_3, KILN_GRAD_2, KILN_GRAD_1, unused)(__VA_ARGS__) return r;
#define NotDifferentiable return r;

std::vector<Array> elementwise_formula(OpCode op, const Array& a, const Array& b, const Array& c, const Array& out,
                                       const Array& g, const bool* need) {
  std::vector<Array> r(3);
  (void)b;
  (void)c;
  (void)out;
  switch (op) {
#define KILN_OP_IMPL(Code, rule, dtypes, accuracy, gpu_vector, cpu_simd, domain, derivative, ...) \
  case OpCode::Code: {                                                                            \
    derivative                                                                                    \
  }
#include "core/ops_internal.def"
    case OpCode::Count:
      break;
  }
  return r;
}

std::vector<Array> reduction_formula(ReduceOp op, const Array& a, const Array& out, const Array& g, const Shape& axes,
                                     double n, double ddof, int64_t axis, const bool* need) {
  std::vector<Array> r(1);
  (void)out;
  (void)axes;
  (void)n;
  (void)ddof;
  (void)axis;
  (void)a;
  switch (op) {
#define KILN_REDUCE_IMPL(Code, kind, result, empty, fuse, derivative) \
  case ReduceOp::Code: {                                              \
    derivative                                                        \
  }
#include "core/reductions_internal.def"
  }
  return r;
}
#undef NotDifferentiable
#undef KILN_GRAD
#undef KILN_GRAD_PICK
#undef KILN_GRAD_1
#undef KILN_GRAD_2
#undef KILN_GRAD_3

/// Whether a derivative text names identifier `id` (so the node saves that array).
constexpr bool names(std::string_view text, std::string_view id) {
  auto ident = [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
  };
  for (size_t p = text.find(id); p != std::string_view::npos; p = text.find(id, p + 1)) {
    const bool before = p == 0 || !ident(text[p - 1]);
    const bool after = p + id.size() >= text.size() || !ident(text[p + id.size()]);
    if (before && after) return true;
  }
  return false;
}

#define KILN_GRAD_TEXT_KILN_GRAD(...) #__VA_ARGS__
#define KILN_GRAD_TEXT_NotDifferentiable ""
#define KILN_GRAD_TEXT(derivative) KILN_GRAD_TEXT_##derivative
const std::string_view kOpDerivatives[] = {
#define KILN_OP_IMPL(Code, rule, dtypes, accuracy, gpu_vector, cpu_simd, domain, derivative, ...) \
  KILN_GRAD_TEXT(derivative),
#include "core/ops_internal.def"
};
const std::string_view kReduceDerivatives[] = {
#define KILN_REDUCE_IMPL(Code, kind, result, empty, fuse, derivative) KILN_GRAD_TEXT(derivative),
#include "core/reductions_internal.def"
};

}  // namespace

void record_elementwise_grad(OpCode op, std::initializer_list<const Operand*> operands, Array& out) {
  const OpInfo& info = op_info(op);
  if (info.derivative == Derivative::NotDifferentiable) {
    if (is_inexact(out.dtype())) throw_not_differentiable(info.name, "it is not differentiable");
    return;  // bool and integer results carry no gradient
  }
  const std::string_view text = kOpDerivatives[static_cast<size_t>(op)];
  static constexpr const char* kNames[] = {"a", "b", "c"};
  // Saved slots 0..2: the array operands the formula reads; slot 3: the result.
  std::vector<SavedArray> saved(4);
  std::vector<const Array*> inputs;
  std::array<std::optional<Scalar>, 3> scalars;
  size_t k = 0;
  for (const Operand* o : operands) {
    if (o->is_array()) {
      inputs.push_back(&o->array());
      if (names(text, kNames[k])) saved[k] = SavedArray(o->array());
    } else {
      inputs.push_back(nullptr);
      scalars[k] = o->scalar();
    }
    ++k;
  }
  if (names(text, "out")) saved[3] = SavedArray(out);
  const size_t arity = operands.size();
  auto backward = [op, arity, scalars, out_dtype = out.dtype(), device = out.device()](const Node& node,
                                                                                       const Array& g) {
    Array operands[3];
    for (size_t i = 0; i < arity; ++i) {
      if (node.saved[i].defined())
        operands[i] = node.saved_array(i);
      else if (scalars[i])
        operands[i] =
            scalar_array(*scalars[i], scalars[i]->kind() == Scalar::Kind::Bool ? DType::Bool : out_dtype, device);
    }
    const bool need[3] = {node.needs(0), node.needs(1), node.needs(2)};
    return elementwise_formula(op, operands[0], operands[1], operands[2], node.saved_array(3), g, need);
  };
  record(
      out,
      std::make_shared<Node>(backward_name(kOpCodes[static_cast<size_t>(op)]), std::move(backward), std::move(saved)),
      inputs);
}

void record_reduction_grad(ReduceOp op, const Array& in, const Axes& axes, bool keepdims, int64_t ddof, Array& out) {
  const ReduceInfo& info = reduce_info(op);
  if (info.derivative == Derivative::NotDifferentiable) {
    if (is_inexact(out.dtype())) throw_not_differentiable(info.name, "it is not differentiable");
    return;
  }
  const Reduction plan = plan_reduction(in.shape(), axes, info.name);
  const std::string_view text = kReduceDerivatives[static_cast<size_t>(op)];
  std::vector<SavedArray> saved(2);  // the input and the result, when the formula reads them
  if (names(text, "a")) saved[0] = SavedArray(in);
  if (names(text, "out")) saved[1] = SavedArray(out);
  auto backward = [op, reduced = plan.axes, keep_shape = plan.keep_shape, keepdims, n = static_cast<double>(plan.count),
                   ddof = static_cast<double>(ddof)](const Node& node, const Array& g) {
    const Array& a = node.saved_array(0);
    Array result = node.saved_array(1);
    Array grad = g;
    if (!keepdims) {
      grad = grad.reshape(keep_shape);
      if (result.defined()) result = result.reshape(keep_shape);
    }
    const bool need[1] = {true};
    std::vector<Array> r = reduction_formula(op, a, result, grad, reduced, n, ddof, 0, need);
    if (r[0].defined() && !(r[0].shape() == node.inputs[0].shape)) r[0] = broadcast_to(r[0], node.inputs[0].shape);
    return r;
  };
  record(out,
         std::make_shared<Node>(backward_name(kReduceCodes[static_cast<size_t>(op)]), std::move(backward),
                                std::move(saved)),
         {&in});
}

void record_scan_grad(ReduceOp op, const Array& in, std::optional<int64_t> axis, Array& out) {
  const ReduceInfo& info = reduce_info(op);
  if (info.derivative == Derivative::NotDifferentiable)
    throw_not_differentiable(info.name, "compute it as exp(cumsum(log(x))) for positive x");
  if (axis) axis = normalize_axis(*axis, in.ndim(), info.name);
  auto backward = [op, axis](const Node& node, const Array& g) {
    const bool need[1] = {true};
    std::vector<Array> r = reduction_formula(op, Array(), Array(), g, {}, 1, 0, axis ? *axis : 0, need);
    if (!axis && r[0].defined()) r[0] = r[0].reshape(node.inputs[0].shape);
    return r;
  };
  record(out, std::make_shared<Node>(backward_name(kReduceCodes[static_cast<size_t>(op)]), std::move(backward)), {&in});
}

}  // namespace kiln::detail
