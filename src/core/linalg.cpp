// Linear algebra front-end: matmul (NumPy semantics: 1-d operands promoted,
// batch axes broadcast), dot and linalg::norm. matmul hands the backend 3-d
// (batch, m, k) x (batch, k, n) views without copying: broadcast batch axes get
// stride 0, transposed matrices keep their layout (BLAS transposes them), and
// batch axes that cannot merge into one stride become separate backend calls.
// linalg::norm is one backend reduction (ReduceOp::Norm: squares summed in float64, the
// square root and the cast in the same kernel).
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "core/derivatives.hpp"
#include "core/reduce.hpp"
#include "kiln/ops.hpp"

namespace kiln {
namespace {

void require_operands(const Array& a, const Array& b, const char* op) {
  if (!a.defined() || !b.defined())
    throw ValueError(std::string(op) +
                     ": an operand is undefined (default-constructed); create it with empty/zeros/...");
  if (a.device() != b.device())
    throw DeviceError(std::string(op) + ": operands are on different devices, " + a.device().str() + " and " +
                      b.device().str() + "; move one with .to(" + a.device().str() + ") or .to(" + b.device().str() +
                      ") first");
}

std::string operand_shapes(const Array& a, const Array& b) {
  return "shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape());
}

void check_contraction(const Array& a, const Array& b, const char* op) {
  const int64_t ka = a.shape()[a.ndim() - 1];
  const int64_t kb = b.ndim() == 1 ? b.shape()[0] : b.shape()[b.ndim() - 2];
  if (ka != kb)
    throw ShapeError(std::string(op) + ": " + operand_shapes(a, b) + " do not align: the last axis of the first (" +
                     std::to_string(ka) + ") must equal the " + (b.ndim() == 1 ? "only" : "second-to-last") +
                     " axis of the second (" + std::to_string(kb) + "); transpose or reshape an operand");
}

/// Makes a matrix's strides acceptable to BLAS: row-major (column stride 1, row stride >= columns) or
/// column-major (row stride 1, column stride >= rows). Strides of size-1 axes are free to choose.
bool blas_layout(int64_t rows, int64_t cols, int64_t& row_stride, int64_t& col_stride) {
  if (rows == 1 && cols == 1) {
    row_stride = col_stride = 1;
    return true;
  }
  if (rows == 1) {
    if (col_stride == 1) {
      row_stride = cols;
      return true;
    }
    if (col_stride >= 1) {
      row_stride = 1;
      return true;
    }
    return false;
  }
  if (cols == 1) {
    if (row_stride == 1) {
      col_stride = rows;
      return true;
    }
    if (row_stride >= 1) {
      col_stride = 1;
      return true;
    }
    return false;
  }
  return (col_stride == 1 && row_stride >= cols) || (row_stride == 1 && col_stride >= rows);
}

/// True when batch axes [first, end) of `strides` (over `sizes`) step through memory with one stride.
bool batch_axes_merge(const Shape& sizes, const Shape& strides, size_t first, size_t end) {
  int64_t expected = 0;
  bool have_inner = false;
  for (size_t d = end; d-- > first;) {
    if (sizes[d] == 1) continue;
    if (have_inner && strides[d] != expected) return false;
    have_inner = true;
    expected = strides[d] * sizes[d];
  }
  return true;
}

/// The stride of the merged batch axes [first, end): that of the innermost one longer than 1 (0 if none).
int64_t merged_batch_stride(const Shape& sizes, const Shape& strides, size_t first, size_t end) {
  for (size_t d = end; d-- > first;)
    if (sizes[d] != 1) return strides[d];
  return 0;
}

/// A 3-d (batch, rows, cols) view of `full` (batch axes [first, end) merged) at element offset `offset`.
Array matrix_batch_view(const Array& full, size_t first, int64_t batch, int64_t offset) {
  const size_t nb = full.shape().size() - 2;
  const int64_t rows = full.shape()[nb], cols = full.shape()[nb + 1];
  int64_t row_stride = full.strides()[nb], col_stride = full.strides()[nb + 1];
  blas_layout(rows, cols, row_stride, col_stride);
  const int64_t batch_stride = merged_batch_stride(full.shape(), full.strides(), first, nb);
  return Array(full.storage(), Shape{batch, rows, cols}, Shape{batch_stride, row_stride, col_stride},
               full.offset() + offset, full.dtype());
}

bool layout_ok(const Array& m) {
  const size_t nd = m.shape().size();
  int64_t row_stride = m.strides()[nd - 2], col_stride = m.strides()[nd - 1];
  return blas_layout(m.shape()[nd - 2], m.shape()[nd - 1], row_stride, col_stride);
}

}  // namespace

/// What addmm and addmm_gelu ask of one 2-d product beyond it (detail::MatmulCall's fields), and what the backend
/// did of it.
struct ProductExtras {
  const Array* bias = nullptr;
  Array* pre_gelu = nullptr;
  bool bias_added = false, gelu_applied = false;
};
static Array matmul_impl(const Array& a_in, const Array& b_in, ProductExtras* extras = nullptr);

namespace {
/// A 2-d matrix whose transpose is C-contiguous (x.T() of a contiguous x), with more than one row and column.
bool transposed_layout(const Array& m) {
  return m.ndim() == 2 && m.shape(0) > 1 && m.shape(1) > 1 && m.strides()[0] == 1 && m.strides()[1] == m.shape(0);
}

/// matmul's backward: g @ b^H and a^H @ g (the conjugate transposes; b^T and a^T for real operands), a 1-d
/// operand treated as a row (a) or a column (b) vector.
std::vector<Array> matmul_backward(const detail::Node& node, const Array& g) {
  const DType t = g.dtype();
  const Array a = derivatives::conj_if_complex(node.saved_array(0).astype(t));
  const Array b = derivatives::conj_if_complex(node.saved_array(1).astype(t));
  const Array a2 = a.ndim() == 1 ? a.reshape({1, a.shape(0)}) : a;
  const Array b2 = b.ndim() == 1 ? b.reshape({b.shape(0), 1}) : b;
  Array g2 = g;
  if (b.ndim() == 1) g2 = expand_dims(g2, -1);
  if (a.ndim() == 1) g2 = expand_dims(g2, -2);
  std::vector<Array> r(2);
  if (node.needs(0)) {
    r[0] = matmul(g2, swapaxes(b2, -1, -2));
    if (a.ndim() == 1) r[0] = squeeze(r[0], -2);
  }
  if (node.needs(1)) {
    // A transposed matrix (nn.Linear's weight.T()) gets its gradient in its own layout: (g^T a)^T, so the
    // transpose's backward hands the weight a contiguous gradient.
    r[1] = a2.ndim() == 2 && transposed_layout(b2) ? matmul(g2.T(), a2).T() : matmul(swapaxes(a2, -1, -2), g2);
    if (b.ndim() == 1) r[1] = squeeze(r[1], -1);
  }
  return r;
}
}  // namespace

Array matmul(const Array& a, const Array& b) {
  require_operands(a, b, "matmul");
  detail::GradRecorder record({&a, &b});
  Array out = matmul_impl(a, b);
  if (record)
    detail::record(out,
                   std::make_shared<detail::Node>("MatmulBackward", &matmul_backward,
                                                  std::vector{detail::SavedArray(a), detail::SavedArray(b)}),
                   {&a, &b});
  return out;
}

static Array matmul_impl(const Array& a_in, const Array& b_in, ProductExtras* extras) {
  const Array* bias = extras ? extras->bias : nullptr;
  require_operands(a_in, b_in, "matmul");
  if (a_in.ndim() == 0 || b_in.ndim() == 0)
    throw ShapeError("matmul: " + operand_shapes(a_in, b_in) +
                     ": a 0-d operand has no axis to contract; use multiply for a scalar product");
  check_contraction(a_in, b_in, "matmul");
  const DType dtype = promote_types(a_in.dtype(), b_in.dtype());
  Array a = a_in.astype(dtype), b = b_in.astype(dtype);
  const bool a_vector = a.ndim() == 1, b_vector = b.ndim() == 1;
  if (a_vector) a = a.reshape({1, a.shape()[0]});
  if (b_vector) b = b.reshape({b.shape()[0], 1});
  const int64_t m = a.shape()[a.ndim() - 2], k = a.shape()[a.ndim() - 1], n = b.shape()[b.ndim() - 1];

  // Broadcast the batch axes (everything before the last two).
  Shape batch_a(a.shape().begin(), a.shape().end() - 2), batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(batch_a, batch_b, "matmul");
  } catch (const ShapeError&) {
    throw ShapeError("matmul: " + operand_shapes(a_in, b_in) + ": the batch axes " + shape_str(batch_a) + " and " +
                     shape_str(batch_b) + " do not broadcast; make them equal or 1");
  }
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Array out = detail::make_array(out_shape, dtype, a.device());

  if (extras) extras->bias_added = extras->gelu_applied = true;  // an empty result, or the empty contraction's below
  if (out.size() > 0 && k == 0) {
    out.fill(0);  // a sum over an empty axis
    if (bias) out.assign(add(out, *bias));
    if (extras) extras->gelu_applied = false;
  } else if (out.size() > 0) {
    auto full_view = [&batch](const Array& x, int64_t rows, int64_t cols) {
      Shape s = batch;
      s.push_back(rows);
      s.push_back(cols);
      // Matrices BLAS cannot read in place (both strides > 1, negative...) are copied once, before broadcasting.
      return broadcast_to(layout_ok(x) ? x : x.contiguous(), s);
    };
    Array a_full = full_view(a, m, k), b_full = full_view(b, k, n);
    // Merge the longest run of trailing batch axes that both operands step through with one stride;
    // the leading batch axes left over are looped here, one backend call each.
    const size_t nb = batch.size();
    size_t first = nb;
    while (first > 0 && batch_axes_merge(a_full.shape(), a_full.strides(), first - 1, nb) &&
           batch_axes_merge(b_full.shape(), b_full.strides(), first - 1, nb))
      --first;
    int64_t inner_batch = 1, outer_count = 1;
    for (size_t d = 0; d < nb; ++d) (d < first ? outer_count : inner_batch) *= batch[d];
    detail::Backend& backend = detail::backend_for(a.device());
    std::vector<int64_t> index(first, 0);
    int64_t a_offset = 0, b_offset = 0;
    for (int64_t it = 0; it < outer_count; ++it) {
      const int64_t out_offset = it * inner_batch * m * n;
      Array out_view(out.storage(), Shape{inner_batch, m, n}, Shape{m * n, n, 1}, out.offset() + out_offset, dtype);
      Array a3 = matrix_batch_view(a_full, first, inner_batch, a_offset);
      Array b3 = matrix_batch_view(b_full, first, inner_batch, b_offset);
      if (inner_batch > 1 && b3.strides()[0] == 0 && a3.strides()[2] == 1 && a3.strides()[0] == m * a3.strides()[1]) {
        // One shared right matrix and row-major left matrices stacked in memory: one (batch*m, k) product.
        a3 = Array(a3.storage(), Shape{1, inner_batch * m, k}, Shape{0, a3.strides()[1], 1}, a3.offset(), dtype);
        b3 = Array(b3.storage(), Shape{1, k, n}, Shape{0, b3.strides()[1], b3.strides()[2]}, b3.offset(), dtype);
        out_view = Array(out.storage(), Shape{1, inner_batch * m, n}, Shape{0, n, 1}, out.offset() + out_offset, dtype);
      }
      detail::MatmulCall call{&a3, &b3, out_view};
      if (extras) {  // passed for one 2-d product only (outer_count == inner_batch == 1)
        call.bias = bias;
        call.pre_gelu = extras->pre_gelu;
      }
      backend.matmul(call);
      if (extras) {  // a bias not folded: nothing was computed
        extras->bias_added = !bias || call.bias_added;
        extras->gelu_applied = call.gelu_applied;
      }
      for (size_t d = first; d-- > 0;) {
        a_offset += a_full.strides()[d];
        b_offset += b_full.strides()[d];
        if (++index[d] < batch[d]) break;
        a_offset -= a_full.strides()[d] * batch[d];
        b_offset -= b_full.strides()[d] * batch[d];
        index[d] = 0;
      }
    }
  }
  if (!a_vector && !b_vector) return out;
  Shape result_shape = batch;
  if (!a_vector) result_shape.push_back(m);
  if (!b_vector) result_shape.push_back(n);
  return out.reshape(result_shape);
}

namespace {

/// addmm's and addmm_gelu's checks of the operands: ShapeError naming `op` for matrices that are not 2-d or do not
/// contract, or a bias that does not broadcast to the product.
void check_addmm(const Array& bias, const Array& a, const Array& b, const char* op) {
  require_operands(a, b, op);
  require_operands(a, bias, op);
  if (a.ndim() != 2 || b.ndim() != 2)
    throw ShapeError(std::string(op) + ": " + operand_shapes(a, b) +
                     ": both matrices must have 2 axes; use matmul(a, b) + bias for vectors and batches");
  check_contraction(a, b, op);
  const int64_t n = b.shape(1);
  const Shape product{a.shape(0), n};
  bool fits = false;
  try {
    fits = broadcast_shapes(bias.shape(), product, op) == product;
  } catch (const ShapeError&) {
  }
  if (!fits)
    throw ShapeError(std::string(op) + ": the bias of shape " + shape_str(bias.shape()) +
                     " does not broadcast to the product's " + shape_str(product) + "; pass a bias of shape (" +
                     std::to_string(n) + ",) or " + shape_str(product));
}

/// The folded form: one floating (not complex) dtype and a bias that is one row of n values.
bool foldable(const Array& bias, const Array& a, const Array& b) {
  const int64_t n = b.shape(1);
  const DType t = a.dtype();
  const bool row_bias = bias.size() == n && (bias.ndim() == 1 || (bias.ndim() == 2 && bias.shape(0) == 1));
  return row_bias && b.dtype() == t && bias.dtype() == t && is_floating(t);
}

/// a @ b + row with the sum rounded once, through the backend's folded bias where it has one (extras->bias = row):
/// float16/bfloat16 otherwise as a float32 product plus the bias, then the cast.
Array folded_addmm(const Array& row, const Array& a, const Array& b, ProductExtras& extras) {
  extras.bias = &row;
  Array out = matmul_impl(a, b, &extras);
  if (extras.bias_added) return out;
  const DType t = a.dtype();
  return t == float16 || t == bfloat16
             ? add(matmul_impl(a.astype(float32), b.astype(float32)), row.astype(float32)).astype(t)
             : add(matmul_impl(a, b), row);
}

/// The gradients of addmm(bias, a, b) from g: the bias's (g summed over the rows, to its shape), a's (g b^T) and
/// b's (a^T g, made in b's own layout: (g^T a)^T for nn.Linear's weight.T(), whose transpose's backward then hands
/// the weight a contiguous gradient).
std::vector<Array> addmm_backward(const detail::Node& node, const Array& g, const Shape& bias_shape) {
  std::vector<Array> r(3);
  if (node.needs(0)) r[0] = sum(g, 0).reshape(bias_shape);
  if (node.needs(1)) r[1] = matmul(g, node.saved_array(1).T());
  if (node.needs(2)) {
    const Array& a = node.saved_array(0);
    r[2] = transposed_layout(node.saved_array(1)) ? matmul(g.T(), a).T() : matmul(a.T(), g);
  }
  return r;
}

}  // namespace

Array addmm(const Array& bias, const Array& a, const Array& b) {
  check_addmm(bias, a, b, "addmm");
  // Anything but the folded form is the product plus a broadcast add, recorded through those two ops.
  if (!foldable(bias, a, b)) return add(matmul(a, b), bias);
  detail::GradRecorder record({&bias, &a, &b});
  const Array row = bias.reshape({b.shape(1)}).contiguous();
  ProductExtras extras;
  Array out = folded_addmm(row, a, b, extras);
  if (record) {
    auto backward = [bias_shape = bias.shape()](const detail::Node& node, const Array& g) {
      return addmm_backward(node, g, bias_shape);
    };
    detail::record(out,
                   std::make_shared<detail::Node>("AddmmBackward", std::move(backward),
                                                  std::vector{detail::SavedArray(a), detail::SavedArray(b)}),
                   {&bias, &a, &b});
  }
  return out;
}

Array addmm_gelu(const Array& bias, const Array& a, const Array& b) {
  check_addmm(bias, a, b, "addmm_gelu");
  if (!foldable(bias, a, b)) return gelu_tanh(add(matmul(a, b), bias));
  detail::GradRecorder record({&bias, &a, &b});
  const Array row = bias.reshape({b.shape(1)}).contiguous();
  Array pre = detail::make_array({a.shape(0), b.shape(1)}, a.dtype(), a.device());
  ProductExtras extras;
  extras.pre_gelu = &pre;
  Array out = folded_addmm(row, a, b, extras);
  if (!extras.bias_added || !extras.gelu_applied) {  // the backend added no GELU: the sum, then the op
    pre = out;
    out = gelu_tanh(pre);
  }
  if (record) {
    // The pre-activation's gradient g * gelu_tanh'(pre), then addmm's.
    auto backward = [bias_shape = bias.shape()](const detail::Node& node, const Array& g) {
      return addmm_backward(node, derivatives::gelu_tanh_backward(g, node.saved_array(2)), bias_shape);
    };
    detail::record(out,
                   std::make_shared<detail::Node>(
                       "AddmmGeluBackward", std::move(backward),
                       std::vector{detail::SavedArray(a), detail::SavedArray(b), detail::SavedArray(pre)}),
                   {&bias, &a, &b});
  }
  return out;
}

Array dot(const Array& a, const Array& b) {
  require_operands(a, b, "dot");
  if (a.ndim() == 0 || b.ndim() == 0) return multiply(a, b);
  check_contraction(a, b, "dot");
  // With b of at most 2 axes, or a a vector, NumPy's dot is matmul.
  if (b.ndim() <= 2 || a.ndim() == 1) return matmul(a, b);
  // dot(a, b)[i..., j..., c] = sum(a[i..., :] * b[j..., :, c]): matmul of the flattened a against every matrix of
  // b (batch axes of b broadcast), then a's leading axes moved to the front.
  const int64_t k = a.shape()[a.ndim() - 1];
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < a.ndim(); ++d) rows *= a.shape()[d];
  Array product = matmul(a.reshape({rows, k}), b);  // (b batch..., rows, n)
  Shape result(a.shape().begin(), a.shape().end() - 1);
  for (int64_t d = 0; d + 2 < b.ndim(); ++d) result.push_back(b.shape()[d]);
  result.push_back(b.shape()[b.ndim() - 1]);
  return moveaxis(product, -2, 0).reshape(result);
}

namespace linalg {

Array norm(const Array& a, Axes axes, bool keepdims) {
  if (!a.defined())
    throw ValueError("norm: the array is undefined (default-constructed); create it with empty/zeros/...");
  if (!axes.all()) {  // check before the float64 copy
    std::vector<bool> seen(static_cast<size_t>(a.ndim()), false);
    for (int64_t axis : axes.list()) {
      if (axis < -a.ndim() || axis >= a.ndim() || seen[static_cast<size_t>(axis < 0 ? axis + a.ndim() : axis)])
        throw ShapeError("norm: axis " + std::to_string(axis) + " is out of bounds or repeated for an array of ndim " +
                         std::to_string(a.ndim()) + " (shape " + shape_str(a.shape()) + "); list distinct axes in [" +
                         std::to_string(-a.ndim()) + ", " + std::to_string(a.ndim()) + ")");
      seen[static_cast<size_t>(axis < 0 ? axis + a.ndim() : axis)] = true;
    }
  }
  // One backend reduction: squares summed in float64 (no float16/float32 overflow or rounding of the partial
  // sums), the square root taken in float64 and narrowed once, in the same kernel on a GPU.
  if (is_complex(a.dtype()))
    throw DTypeError("norm: dtype " + std::string(dtype_name(a.dtype())) +
                     " is not supported yet; take the norm of abs(a)");
  const DType out = is_floating(a.dtype()) ? a.dtype() : DType::Float64;
  detail::GradRecorder record({&a});
  Array result = detail::reduction_axes(axes, a.ndim(), "norm", &a.shape()).empty()
                     ? abs(a.astype(out))  // 0-d
                     : detail::run_reduction(a, detail::ReduceOp::Norm, axes, out, keepdims);
  if (record) detail::record_reduction_grad(detail::ReduceOp::Norm, a, axes, keepdims, 0, result);
  return result;
}

}  // namespace linalg
}  // namespace kiln
