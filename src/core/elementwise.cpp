// Elementwise front-end: device checks, NumPy broadcasting, NEP 50 promotion
// with weak C++ scalars, overlap handling, then one backend call.
//
// Choices where NumPy warns or C++ would be undefined (the CPU and GPU agree):
// - integer floor_divide and remainder by zero give 0 (NumPy: 0 and a warning);
//   INT_MIN // -1 wraps to INT_MIN; integer overflow wraps (two's complement);
// - integer power with a negative exponent gives 0 (1 for base 1, +-1 for base -1)
//   where NumPy raises;
// - an integer scalar outside the array's integer dtype (uint8 array + 300) throws
//   ValueError for arithmetic, as NumPy 2 raises OverflowError; comparisons are
//   computed exactly in int64 instead.
#include "core/elementwise.hpp"

#include <string>

#include "core/autograd.hpp"
#include "core/derivatives.hpp"
#include "core/backend.hpp"

namespace kiln::detail {

namespace {

std::string op_str(OpCode op) { return op_info(op).name; }

[[noreturn]] void unsupported(OpCode op, DType t, const char* fix) {
  throw DTypeError(op_str(op) + ": dtype " + std::string(dtype_name(t)) + " is not supported; " + fix);
}

// True when `in` shares `out`'s storage through another layout: reading it while writing `out`
// would see new values, so the caller copies it first (an identical view is an exact in-place op).
bool overlaps_differently(const Array& in, const Array& out) {
  return in.shares_storage(out) &&
         !(in.offset() == out.offset() && in.strides() == out.strides() && in.shape() == out.shape());
}

// The compound assignment `a op= x` for the ops Array's operators run in place (out is the first operand).
const char* compound_assignment(OpCode op, const Operand& first, const Array& out) {
  if (!first.is_array() || !first.array().shares_storage(out) || overlaps_differently(first.array(), out))
    return nullptr;
  switch (op) {
    case OpCode::Add:
      return "+";
    case OpCode::Subtract:
      return "-";
    case OpCode::Multiply:
      return "*";
    case OpCode::Divide:
      return "/";
    default:
      return nullptr;
  }
}

thread_local const Array* t_donor = nullptr;
constexpr int64_t kDonorMinBytes = int64_t{256} << 10;  // NumPy's elision threshold

// The donated temporary, when it is an operand that can hold the result in place.
const Array* usable_donor(std::initializer_list<const Operand*> operands, const Shape& shape, DType out) {
  const Array* d = t_donor;
  if (!d || !d->defined() || d->storage().use_count() != 1 || d->dtype() != out || !(d->shape() == shape) ||
      d->offset() != 0 || !d->is_contiguous() || d->nbytes() < kDonorMinBytes)
    return nullptr;
  for (const Operand* o : operands)
    if (o->is_array() && &o->array() == d) return d;
  return nullptr;
}

}  // namespace

DonorScope::DonorScope(const Array& temporary) : previous_(t_donor) { t_donor = &temporary; }
DonorScope::~DonorScope() { t_donor = previous_; }

bool scalar_fits(const Scalar& s, DType t) {
  if (s.kind() != Scalar::Kind::Int || !is_integral(t)) return true;
  int64_t v = s.to_int64();
  switch (t) {
    case DType::Int8: return v >= -128 && v <= 127;
    case DType::Int16: return v >= -32768 && v <= 32767;
    case DType::Int32: return v >= INT32_MIN && v <= INT32_MAX;
    case DType::UInt8: return v >= 0 && v <= 255;
    default: return true;
  }
}

// A weak float scalar takes the array's precision first, as NumPy converts it to the
// loop's dtype: float16_array + 0.1 adds float16(0.1) = 0.0999755859375.
Scalar round_scalar(const Scalar& s, DType compute) {
  if (!s.is_floating()) return s;
  switch (compute) {
    case DType::Float16: return Scalar(static_cast<double>(half_to_float(double_to_half(s.to_double()))));
    case DType::BFloat16:
      return Scalar(static_cast<double>(float(BFloat16(double_to_float_round_odd(s.to_double())))));
    case DType::Float32: return Scalar(static_cast<double>(static_cast<float>(s.to_double())));
    case DType::Complex64: return Scalar(s.to<complex64_t>());
    default: return s;
  }
}

OpTypes op_types(OpCode op, DType p) {
  const OpInfo& info = op_info(op);
  if (is_complex(p)) {
    // One rule for every op NumPy (or PyTorch, for orderings) does not define on complex numbers.
    if (!op_supports(op, p))
      unsupported(op, p,
                  "complex numbers have no order, rounding or bit pattern here; apply it to real(a), imag(a) or "
                  "abs(a) (docs/numpy-users.md, Complex numbers)");
    if (returns_real(op)) return {p, real_dtype(p)};
  }
  switch (info.rule) {
    case TypeRule::Keep:
      if (p == DType::Bool) {
        if (op == OpCode::Negative) unsupported(op, p, "use logical_not for booleans");
        if (op == OpCode::Sign) unsupported(op, p, "convert with astype(int8) first");
        if (op == OpCode::Square) return {DType::Int8, DType::Int8};
        if (op == OpCode::Round) return {DType::Float16, DType::Float16};  // np.round(bool) -> float16
      }
      return {p, p};
    case TypeRule::Float: {
      DType f = float_result_type(p);
      return {f, f};
    }
    case TypeRule::Arith:
      if (p == DType::Bool) {
        if (op == OpCode::Subtract) unsupported(op, p, "use logical_xor (or bitwise_xor) for booleans");
        if (op == OpCode::FloorDivide || op == OpCode::Remainder || op == OpCode::Power)
          return {DType::Int8, DType::Int8};
      }
      return {p, p};
    case TypeRule::TrueDivide:
      return is_inexact(p) ? OpTypes{p, p} : OpTypes{DType::Float64, DType::Float64};
    case TypeRule::Compare: return {p, DType::Bool};
    case TypeRule::Logical: return {DType::Bool, DType::Bool};
    case TypeRule::Predicate: return {p, DType::Bool};
    case TypeRule::Bitwise:
      if (is_inexact(p)) unsupported(op, p, "bitwise ops take bool or integer arrays; use astype(int32) first");
      return {p, p};
    case TypeRule::Select: return {p, p};
  }
  return {p, p};
}

OpTypes resolve_op_types(OpCode op, const TypingOperand* operands, int count) {
  const OpInfo& info = op_info(op);
  bool have_array_dtype = false;
  DType promoted = DType::Bool;
  DType float_of_arrays = DType::Float16;  // promotion of each array's float type (Float-rule ops)
  for (int k = 0; k < count; ++k) {
    if (!operands[k].is_array || (op == OpCode::Where && k == 0)) continue;  // where's condition is not promoted
    const DType t = operands[k].dtype;
    promoted = have_array_dtype ? promote_types(promoted, t) : t;
    float_of_arrays = have_array_dtype ? promote_types(float_of_arrays, float_result_type(t)) : float_result_type(t);
    have_array_dtype = true;
  }
  const DType arrays_promoted = promoted;
  const bool arrays_promoted_defined = have_array_dtype;
  // Scalars: weak unless no array fixes the dtype (then they act as NumPy would type them).
  for (int k = 0; k < count; ++k) {
    if (operands[k].is_array || (op == OpCode::Where && k == 0)) continue;
    const Scalar::Kind kind = operands[k].kind;
    promoted = have_array_dtype ? promote_with_scalar(promoted, kind) : Scalar::default_dtype(kind);
    have_array_dtype = true;
  }
  OpTypes types = op_types(op, promoted);
  if (info.rule == TypeRule::Float && !is_inexact(promoted) && arrays_promoted_defined) {
    // NumPy picks the first float loop every integer input casts to safely: arctan2(int8, uint8)
    // is float16, not float_result_type(int16) = float32. A scalar of a higher kind still counts
    // (arctan2(bool_array, 3) is float64 through int64).
    DType f = promoted == arrays_promoted ? float_of_arrays
                                          : promote_types(float_of_arrays, float_result_type(promoted));
    types = {f, f};
  }
  return types;
}

void check_scalar_range(OpCode op, int operand, const Scalar& s, OpTypes& types) {
  if ((op == OpCode::Where && operand == 0) || scalar_fits(s, types.compute)) return;
  if (op_info(op).rule == TypeRule::Compare) {
    types.compute = DType::Int64;  // exact comparison of a small int array with a large scalar
    return;
  }
  throw ValueError(op_str(op) + ": the scalar " + s.str() + " is out of range for dtype " +
                   std::string(dtype_name(types.compute)) + "; convert the array with astype(int64) first");
}

Array elementwise(OpCode op, std::initializer_list<const Operand*> operands, const Array* out) {
  GradRecorder record(operands, 0);
  if (record && out)
    throw ValueError(op_str(op) + ": writes into an existing array (out=, +=, ...) while an operand requires "
                     "grad; autograd does not record in-place writes: write y = y + x (a new array), or run it "
                     "under a NoGradGuard");
  const OpInfo& info = op_info(op);
  // Device of the array operands; scalars are weak.
  const Array* first = nullptr;
  TypingOperand typing[3];
  int count = 0;
  for (const Operand* o : operands) {
    TypingOperand& t = typing[count++];
    t.is_array = o->is_array();
    if (!o->is_array()) {
      t.kind = o->scalar().kind();
      continue;
    }
    const Array& a = o->array();
    if (!a.defined()) throw ValueError(op_str(op) + ": an operand is an undefined (default-constructed) Array");
    t.dtype = a.dtype();
    if (!first) {
      first = &a;
    } else if (a.device() != first->device()) {
      throw DeviceError(op_str(op) + ": operands are on different devices, " + first->device().str() + " and " +
                        a.device().str() + "; move one with .to(" + first->device().str() +
                        ") so both live on the same device (kiln never copies behind your back)");
    }
  }
  if (out && out->defined() && first && out->device() != first->device())
    throw DeviceError(op_str(op) + ": the output is on " + out->device().str() + " but the operands are on " +
                      first->device().str() + "; allocate out on the operands' device");
  OpTypes types = resolve_op_types(op, typing, count);
  int index = 0;
  for (const Operand* o : operands) {
    if (!o->is_array()) check_scalar_range(op, index, o->scalar(), types);
    ++index;
  }

  Device device = first ? first->device() : (out && out->defined() ? out->device() : current_device());
  Shape shape;
  for (const Operand* o : operands)
    if (o->is_array()) shape = broadcast_shapes(shape, o->array().shape(), info.name);

  ElementwiseCall call;
  call.op = op;
  call.compute = types.compute;
  if (out) {
    if (!out->defined()) throw ValueError(op_str(op) + ": out is an undefined Array");
    Shape joint = broadcast_shapes(shape, out->shape(), info.name);
    if (!(joint == out->shape()))
      throw ShapeError(op_str(op) + ": the result has shape " + shape_str(joint) + " but out has shape " +
                       shape_str(out->shape()) + "; pass an out of the broadcast shape");
    if (!can_cast_same_kind(types.out, out->dtype())) {
      const std::string result(dtype_name(types.out)), kept(dtype_name(out->dtype()));
      if (const char* symbol = compound_assignment(op, **operands.begin(), *out))
        throw DTypeError(op_str(op) + " (a " + symbol + "= x): the result is " + result + ", which the " + kept +
                         " array a cannot hold (an in-place update keeps a's dtype); write a = a " + symbol +
                         " x for a new " + result + " array, or pass x of a's kind");
      throw DTypeError(op_str(op) + ": cannot write the " + result + " result into out of dtype " + kept +
                       " (same_kind casting); use an out of dtype " + result);
    }
    note_inplace_write(*out, info.name);
    call.out = *out;
    shape = out->shape();
  } else if (const Array* donor = record ? nullptr : usable_donor(operands, shape, types.out)) {
    call.out = *donor;  // same layout as the operand it replaces: an exact in-place update
  } else {
    const Array* arrays[3] = {nullptr, nullptr, nullptr};
    int k = 0;
    for (const Operand* o : operands)
      if (o->is_array() && k < 3) arrays[k++] = &o->array();
    call.out = make_array_following(shape, types.out, device, {arrays[0], arrays[1], arrays[2]});
  }

  // Inputs broadcast to the output's shape; an input that overlaps the output in a
  // different layout is copied first (NumPy does the same), so `a[1:] += a[:-1]` is right.
  Array views[3];
  for (const Operand* o : operands) {
    ElementwiseArg& arg = call.inputs[call.num_inputs];
    if (o->is_array()) {
      Array v = o->array();
      if (out && overlaps_differently(v, call.out)) v = v.copy();
      views[call.num_inputs] = v.shape() == shape ? v : v.broadcast_to(shape);
      arg.array = &views[call.num_inputs];
    } else {
      bool is_cond = op == OpCode::Where && call.num_inputs == 0;
      arg.scalar = is_cond ? Scalar(o->scalar().to_bool()) : round_scalar(o->scalar(), call.compute);
    }
    ++call.num_inputs;
  }
  plan_call(call);
  if (call.out.size() > 0) backend_for(device).elementwise(call);
  if (record) record_elementwise_grad(op, operands, call.out);
  return call.out;
}

void plan_call(ElementwiseCall& call, const char* op) {
  const Array* arrays[kMaxElementwiseOperands] = {&call.out};
  int operands = 1;
  for (int k = 0; k < call.num_inputs; ++k)
    if (!call.inputs[static_cast<size_t>(k)].is_scalar()) arrays[operands++] = call.inputs[static_cast<size_t>(k)].array;
  plan_elementwise(call.plan, call.out.shape(), arrays, operands, op ? op : op_info(call.op).name);
}

void copy_into(const Array& src, const Array& dst, const char* op) {
  if (!src.defined() || !dst.defined()) throw ValueError(std::string(op) + ": an operand is an undefined Array");
  if (src.device() != dst.device())
    throw DeviceError(std::string(op) + ": source is on " + src.device().str() + " and destination on " +
                      dst.device().str() + "; move the source with .to(" + dst.device().str() + ") first");
  Shape joint = broadcast_shapes(src.shape(), dst.shape(), op);
  if (!(joint == dst.shape()))
    throw ShapeError(std::string(op) + ": cannot write an array of shape " + shape_str(src.shape()) +
                     " into one of shape " + shape_str(dst.shape()) + "; the source must broadcast to the destination");
  ElementwiseCall call;
  call.op = OpCode::Identity;
  call.compute = dst.dtype();
  call.out = dst;
  Array view = src;
  if (overlaps_differently(src, dst)) view = src.copy();
  if (!(view.shape() == dst.shape())) view = view.broadcast_to(dst.shape());
  call.inputs[0].array = &view;
  call.num_inputs = 1;
  plan_call(call, op);
  if (dst.size() > 0) backend_for(dst.device()).elementwise(call);
}

void fill_into(const Array& dst, const Scalar& v) {
  note_inplace_write(dst, "fill");
  ElementwiseCall call;
  call.op = OpCode::Identity;
  call.compute = dst.dtype();
  call.out = dst;
  call.inputs[0].scalar = v;
  call.num_inputs = 1;
  plan_call(call, "fill");
  if (dst.size() > 0) backend_for(dst.device()).elementwise(call);
}

}  // namespace kiln::detail

namespace kiln {

using detail::OpCode;

// One public function (and its out= form) per `Fn` row of kiln/ops.def.
#define KILN_DEFINE_Fn1(Code, name)                                                                         \
  Array name(const Array& a) {                                                                              \
    Operand x(a);                                                                                            \
    return detail::elementwise(OpCode::Code, {&x});                                                          \
  }                                                                                                          \
  Array name(const Array& a, const Array& out) {                                                             \
    Operand x(a);                                                                                            \
    return detail::elementwise(OpCode::Code, {&x}, &out);                                                    \
  }
#define KILN_DEFINE_Fn2(Code, name)                                                                         \
  Array name(const Operand& a, const Operand& b) { return detail::elementwise(OpCode::Code, {&a, &b}); }    \
  Array name(const Operand& a, const Operand& b, const Array& out) {                                         \
    return detail::elementwise(OpCode::Code, {&a, &b}, &out);                                                \
  }
#define KILN_DEFINE_Own3(Code, name)
#define KILN_DEFINE_None0(Code, name)
#define KILN_DEFINE_None1(Code, name)
#define KILN_DEFINE(Code, name, arity, api) KILN_DEFINE_##api##arity(Code, name)
#define KILN_OP(Code, name, arity, api, ...) KILN_DEFINE(Code, name, arity, api)
#include "kiln/ops.def"
#undef KILN_DEFINE
#undef KILN_DEFINE_Fn1
#undef KILN_DEFINE_Fn2
#undef KILN_DEFINE_Own3
#undef KILN_DEFINE_None0
#undef KILN_DEFINE_None1

Array where(const Operand& cond, const Operand& x, const Operand& y) {
  return detail::elementwise(OpCode::Where, {&cond, &x, &y});
}

Array clip(const Array& a, const Operand& lo, const Operand& hi) {
  Operand x(a);
  return detail::elementwise(OpCode::Clip, {&x, &lo, &hi});
}

Array operator-(const Array& a) { return negative(a); }
Array operator!(const Array& a) { return logical_not(a); }
Array operator~(const Array& a) { return bitwise_not(a); }

}  // namespace kiln
