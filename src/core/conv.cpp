// Convolution, pooling and batch normalisation primitives (kiln/conv.hpp): argument checks, layouts, the
// backend's engine (Backend::convolution / batch_norm: cuDNN on a GPU) and the reference every backend can run.
// The reference convolution gathers each output's input window with a strided view of the padded input
// (im2col without a copy until the product), multiplies by the weights (BLAS / cuBLAS), and scatters window
// gradients back with one strided add per kernel offset (col2im). Pooling is the same window view reduced.
#include "kiln/conv.hpp"

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "kiln/fuse.hpp"
#include "kiln/indexing.hpp"
#include "kiln/ops.hpp"

namespace kiln {

namespace cudnn {
namespace {
std::atomic<bool> g_benchmark{false};
std::atomic<bool> g_allow_tf32{true};
}  // namespace
void set_benchmark(bool on) { g_benchmark.store(on, std::memory_order_relaxed); }
bool benchmark() { return g_benchmark.load(std::memory_order_relaxed); }
void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }
}  // namespace cudnn

namespace {

using Pair = std::pair<int64_t, int64_t>;

std::string pair_str(Pair p) { return std::to_string(p.first) + "x" + std::to_string(p.second); }

struct Geometry {
  int64_t n, c, h, w;  // input
  int64_t kh, kw;      // window
  int64_t sh, sw;      // stride
  int64_t ph, pw;      // padding
  int64_t dh, dw;      // dilation
  int64_t oh, ow;      // output
  int64_t hp() const { return h + 2 * ph; }
  int64_t wp() const { return w + 2 * pw; }
};

Geometry geometry(const Shape& x, Pair kernel, Pair stride, Pair padding, Pair dilation, const char* op) {
  if (x.size() != 4)
    throw ShapeError(std::string(op) + ": the input must be (N, C, H, W), got shape " + shape_str(x) +
                     "; add a batch axis with reshape");
  if (kernel.first <= 0 || kernel.second <= 0 || stride.first <= 0 || stride.second <= 0 || dilation.first <= 0 ||
      dilation.second <= 0 || padding.first < 0 || padding.second < 0)
    throw ValueError(std::string(op) + ": kernel, stride and dilation must be positive and padding non-negative, got " +
                     "kernel " + pair_str(kernel) + ", stride " + pair_str(stride) + ", padding " + pair_str(padding) +
                     ", dilation " + pair_str(dilation));
  Geometry g{x[0],
             x[1],
             x[2],
             x[3],
             kernel.first,
             kernel.second,
             stride.first,
             stride.second,
             padding.first,
             padding.second,
             dilation.first,
             dilation.second,
             0,
             0};
  if (g.hp() < g.dh * (g.kh - 1) + 1 || g.wp() < g.dw * (g.kw - 1) + 1)
    throw ShapeError(std::string(op) + ": the padded input " + std::to_string(g.hp()) + "x" + std::to_string(g.wp()) +
                     " is smaller than the dilated kernel " + std::to_string(g.dh * (g.kh - 1) + 1) + "x" +
                     std::to_string(g.dw * (g.kw - 1) + 1) + "; pad the input or use a smaller kernel");
  g.oh = (g.hp() - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.ow = (g.wp() - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  return g;
}

Geometry conv_geometry(const Shape& x, const Shape& w, const ConvParams& p, const char* op) {
  if (w.size() != 4)
    throw ShapeError(std::string(op) + ": the weight must be (out_channels, in_channels / groups, KH, KW), got shape " +
                     shape_str(w));
  const Geometry g = geometry(x, {w[2], w[3]}, p.stride, p.padding, p.dilation, op);
  if (p.groups <= 0 || g.c % p.groups != 0 || w[0] % p.groups != 0 || w[1] * p.groups != g.c)
    throw ShapeError(std::string(op) + ": an input of shape " + shape_str(x) + ", a weight of shape " + shape_str(w) +
                     " and groups " + std::to_string(p.groups) +
                     " do not fit: in_channels and out_channels must divide by groups and the weight's second axis "
                     "must be in_channels / groups");
  return g;
}

Geometry pool_geometry(const Shape& x, const PoolParams& p, const char* op) {
  const Geometry g = geometry(x, p.kernel, p.stride, p.padding, p.dilation, op);
  if (2 * g.ph > g.kh || 2 * g.pw > g.kw)
    throw ValueError(std::string(op) + ": padding must be at most half the kernel (PyTorch's rule), got padding " +
                     pair_str(p.padding) + " for a " + pair_str(p.kernel) + " kernel");
  return g;
}

void require_floating(const Array& a, const char* op, const char* what) {
  if (!a.defined()) throw ValueError(std::string(op) + ": the " + what + " is undefined (default-constructed)");
  if (!is_floating(a.dtype()))
    throw DTypeError(std::string(op) + ": the " + what +
                     " must be floating (float16, bfloat16, float32, float64), got " +
                     std::string(dtype_name(a.dtype())) + "; convert it with astype(float32)");
}

void require_pair(const Array& a, const Array& b, const char* op, const char* what_a, const char* what_b) {
  require_floating(a, op, what_a);
  require_floating(b, op, what_b);
  if (a.device() != b.device())
    throw DeviceError(std::string(op) + ": the " + what_a + " is on " + a.device().str() + " and the " + what_b +
                      " on " + b.device().str() + "; move one with .to(...) first");
  if (a.dtype() != b.dtype())
    throw DTypeError(std::string(op) + ": the " + what_a + " is " + std::string(dtype_name(a.dtype())) + " and the " +
                     what_b + " " + std::string(dtype_name(b.dtype())) + "; convert one with astype first");
  detail::reject_grad({&a, &b}, op, "use nn::conv2d / nn::batch_norm2d / nn::max_pool2d, which record gradients");
}

void require_shape(const Array& a, const Shape& want, const char* op, const char* what) {
  if (!(a.shape() == want))
    throw ShapeError(std::string(op) + ": the " + what + " must have shape " + shape_str(want) + ", got " +
                     shape_str(a.shape()));
}

/// Channels-last and not also NCHW-contiguous (a 1-channel or 1x1 array is both: it counts as NCHW).
bool strictly_channels_last(const Array& a) { return is_channels_last(a) && !a.is_contiguous(); }

Array in_layout(const Array& a, bool channels_last) { return channels_last ? to_channels_last(a) : a.contiguous(); }

Array empty_in_layout(const Shape& s, DType dtype, Device device, bool channels_last) {
  if (!channels_last) return detail::make_array(s, dtype, device);
  return detail::make_array({s[0], s[2], s[3], s[1]}, dtype, device).permute({0, 3, 1, 2});
}

/// x padded with `fill`, NCHW-contiguous.
Array padded(const Array& x, const Geometry& g, double fill) {
  if (g.ph == 0 && g.pw == 0) return x.contiguous();
  Array out = full({g.n, g.c, g.hp(), g.wp()}, fill, x.dtype(), x.device());
  out.slice(2, g.ph, g.ph + g.h).slice(3, g.pw, g.pw + g.w).assign(x);
  return out;
}

/// The (N, C, KH, KW, OH, OW) view of every output's window in a padded, contiguous input.
Array windows(const Array& xp, const Geometry& g) {
  const Shape& s = xp.strides();
  return as_strided(xp, {g.n, g.c, g.kh, g.kw, g.oh, g.ow},
                    {s[0], s[1], s[2] * g.dh, s[3] * g.dw, s[2] * g.sh, s[3] * g.sw}, xp.offset());
}

/// col2im: the gradient of the input from the gradient of its windows (N, C, KH, KW, OH, OW), cropped.
Array from_windows(const Array& dwin, const Geometry& g) {
  Array dxp = zeros({g.n, g.c, g.hp(), g.wp()}, dwin.dtype(), dwin.device());
  const Shape s = dxp.strides();
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j) {
      Array target = as_strided(dxp, {g.n, g.c, g.oh, g.ow}, {s[0], s[1], s[2] * g.sh, s[3] * g.sw},
                                dxp.offset() + i * g.dh * s[2] + j * g.dw * s[3]);
      target += dwin.index({Slice(), Slice(), i, j});
    }
  return dxp.slice(2, g.ph, g.ph + g.h).slice(3, g.pw, g.pw + g.w);
}

/// The input's windows as (N, G, C/G * KH * KW, OH * OW) columns.
Array columns(const Array& x, const Geometry& g, int64_t groups) {
  return windows(padded(x, g, 0.0), g).reshape({g.n, groups, g.c / groups * g.kh * g.kw, g.oh * g.ow});
}

detail::ConvCall conv_call(detail::ConvKind kind, const ConvParams& p) {
  detail::ConvCall call;
  call.kind = kind;
  call.stride[0] = p.stride.first, call.stride[1] = p.stride.second;
  call.padding[0] = p.padding.first, call.padding[1] = p.padding.second;
  call.dilation[0] = p.dilation.first, call.dilation[1] = p.dilation.second;
  call.groups = p.groups;
  return call;
}

/// Runs `call` (its operands set) in the backend's engine; false when it has none for it or a size is zero.
bool run_engine(detail::ConvCall& call, const Shape& out_shape, DType dtype, Device device, bool channels_last,
                bool any_empty) {
  if (any_empty) return false;
  call.channels_last = channels_last;
  call.out = empty_in_layout(out_shape, dtype, device, channels_last);
  return detail::backend_for(device).convolution(call);
}

}  // namespace

namespace detail {
Array make_array_following(const Shape& shape, DType dtype, Device device, std::initializer_list<const Array*> inputs) {
  bool cl = false;
  if (shape.size() == 4)
    for (const Array* a : inputs) cl = cl || (a && a->defined() && a->shape() == shape && strictly_channels_last(*a));
  return empty_in_layout(shape, dtype, device, cl);
}
}  // namespace detail

bool is_channels_last(const Array& x) {
  if (x.ndim() != 4) return false;
  const Shape& s = x.shape();
  const Shape& st = x.strides();
  // Expected strides of (N, H, W, C) memory; axes of size 1 may have any stride.
  const int64_t want_c = 1, want_w = s[1], want_h = s[3] * s[1], want_n = s[2] * s[3] * s[1];
  return (s[1] == 1 || st[1] == want_c) && (s[3] == 1 || st[3] == want_w) && (s[2] == 1 || st[2] == want_h) &&
         (s[0] == 1 || st[0] == want_n);
}

Array to_channels_last(const Array& x) {
  if (x.ndim() != 4)
    throw ShapeError("to_channels_last: the array must be (N, C, H, W), got shape " + shape_str(x.shape()));
  if (is_channels_last(x)) return x;
  return x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
}

Shape conv2d_output_shape(const Shape& input, const Shape& weight, const ConvParams& params) {
  const Geometry g = conv_geometry(input, weight, params, "conv2d");
  return {g.n, weight[0], g.oh, g.ow};
}

Array conv2d_forward(const Array& x, const Array& weight, const ConvParams& p) {
  const char* op = "conv2d_forward";
  require_pair(x, weight, op, "input", "weight");
  const Geometry g = conv_geometry(x.shape(), weight.shape(), p, op);
  const int64_t out_c = weight.shape(0), ckk = g.c / p.groups * g.kh * g.kw;
  const bool cl = strictly_channels_last(x) || strictly_channels_last(weight);
  const Array xs = in_layout(x, cl), ws = in_layout(weight, cl);
  detail::ConvCall call = conv_call(detail::ConvKind::Forward, p);
  call.x = &xs, call.w = &ws;
  const Shape out_shape{g.n, out_c, g.oh, g.ow};
  if (run_engine(call, out_shape, x.dtype(), x.device(), cl, x.size() == 0 || weight.size() == 0)) return call.out;
  const Array out = matmul(ws.reshape({p.groups, out_c / p.groups, ckk}), columns(xs, g, p.groups)).reshape(out_shape);
  return cl ? to_channels_last(out) : out;
}

Array conv2d_backward_input(const Array& grad_out, const Array& weight, const Shape& input_shape, const ConvParams& p) {
  const char* op = "conv2d_backward_input";
  require_pair(grad_out, weight, op, "output gradient", "weight");
  const Geometry g = conv_geometry(input_shape, weight.shape(), p, op);
  const int64_t out_c = weight.shape(0), ckk = g.c / p.groups * g.kh * g.kw;
  require_shape(grad_out, {g.n, out_c, g.oh, g.ow}, op, "output gradient");
  const bool cl = strictly_channels_last(grad_out) || strictly_channels_last(weight);
  const Array dys = in_layout(grad_out, cl), ws = in_layout(weight, cl);
  detail::ConvCall call = conv_call(detail::ConvKind::BackwardInput, p);
  call.dy = &dys, call.w = &ws;
  if (run_engine(call, input_shape, weight.dtype(), weight.device(), cl, grad_out.size() == 0 || weight.size() == 0))
    return call.out;
  if (grad_out.size() == 0 || weight.size() == 0) return zeros(input_shape, weight.dtype(), weight.device());
  const Array dcols = matmul(swapaxes(ws.reshape({p.groups, out_c / p.groups, ckk}), -1, -2),
                             dys.reshape({g.n, p.groups, out_c / p.groups, g.oh * g.ow}));
  const Array dx = from_windows(dcols.reshape({g.n, g.c, g.kh, g.kw, g.oh, g.ow}), g);
  return cl ? to_channels_last(dx) : dx.contiguous();
}

Array conv2d_backward_weight(const Array& grad_out, const Array& x, const Shape& weight_shape, const ConvParams& p) {
  const char* op = "conv2d_backward_weight";
  require_pair(grad_out, x, op, "output gradient", "input");
  const Geometry g = conv_geometry(x.shape(), weight_shape, p, op);
  const int64_t out_c = weight_shape[0];
  require_shape(grad_out, {g.n, out_c, g.oh, g.ow}, op, "output gradient");
  const bool cl = strictly_channels_last(grad_out) || strictly_channels_last(x);
  const Array dys = in_layout(grad_out, cl), xs = in_layout(x, cl);
  detail::ConvCall call = conv_call(detail::ConvKind::BackwardWeight, p);
  call.dy = &dys, call.x = &xs;
  if (run_engine(call, weight_shape, x.dtype(), x.device(), cl, x.size() == 0 || grad_out.size() == 0)) return call.out;
  if (x.size() == 0 || grad_out.size() == 0) return zeros(weight_shape, x.dtype(), x.device());
  const Array g4 = dys.reshape({g.n, p.groups, out_c / p.groups, g.oh * g.ow});
  const Array dw = sum(matmul(g4, swapaxes(columns(xs, g, p.groups), -1, -2)), 0).reshape(weight_shape);
  return cl ? to_channels_last(dw) : dw;
}

// ---------------------------------------------------------------- pooling
namespace {

detail::PoolCall pool_call(detail::PoolKind kind, const PoolParams& p, bool channels_last) {
  detail::PoolCall call;
  call.kind = kind;
  call.kernel[0] = p.kernel.first, call.kernel[1] = p.kernel.second;
  call.stride[0] = p.stride.first, call.stride[1] = p.stride.second;
  call.padding[0] = p.padding.first, call.padding[1] = p.padding.second;
  call.dilation[0] = p.dilation.first, call.dilation[1] = p.dilation.second;
  call.channels_last = channels_last;
  return call;
}

/// Runs `call` (operands set) into a new array of `shape` in the backend's engine; undefined when it has none.
Array run_pool(detail::PoolCall& call, const Shape& shape, DType dtype, Device device, bool empty) {
  if (empty) return Array();
  call.out = empty_in_layout(shape, dtype, device, call.channels_last);
  return detail::backend_for(device).pooling(call) ? call.out : Array();
}

/// A pooling forward's checks, layout and engine attempt (y defined when the backend's engine ran).
struct PoolForward {
  Geometry g;
  bool cl;
  Array xs, y;
};
PoolForward pool_forward(const Array& x, const PoolParams& p, detail::PoolKind kind, const char* op,
                         const char* layer) {
  require_floating(x, op, "input");
  detail::reject_grad({&x}, op, (std::string("use ") + layer + ", which records the gradient").c_str());
  PoolForward f{pool_geometry(x.shape(), p, op), strictly_channels_last(x), Array(), Array()};
  f.xs = in_layout(x, f.cl);
  detail::PoolCall call = pool_call(kind, p, f.cl);
  call.x = &f.xs;
  f.y = run_pool(call, {f.g.n, f.g.c, f.g.oh, f.g.ow}, x.dtype(), x.device(), x.size() == 0);
  return f;
}

/// The reference max pooling: the windows of x padded with -inf, their first maxima and the values there.
MaxPoolOutput max_pool_reference(const Array& x, const Geometry& g) {
  const int64_t k = g.kh * g.kw;
  const Array win =
      windows(padded(x, g, -std::numeric_limits<double>::infinity()), g).reshape({g.n, g.c, k, g.oh, g.ow});
  Array where_max = argmax(win, 2, true);  // the first maximum of each window, as PyTorch
  Array y = take_along_axis(win, where_max, 2).reshape({g.n, g.c, g.oh, g.ow});
  return {std::move(y), where_max.reshape({g.n, g.c, g.oh, g.ow})};
}

}  // namespace

MaxPoolOutput max_pool2d_forward(const Array& x, const PoolParams& p) {
  const PoolForward f = pool_forward(x, p, detail::PoolKind::MaxForward, "max_pool2d", "nn::max_pool2d");
  if (f.y.defined()) return {f.y, Array()};
  MaxPoolOutput r = max_pool_reference(f.xs, f.g);
  if (f.cl) r.y = to_channels_last(r.y);
  return r;
}

Array max_pool2d_backward(const Array& grad_out, const Array& x, const Array& y, const Array& indices,
                          const PoolParams& p) {
  const char* op = "max_pool2d_backward";
  require_pair(grad_out, x, op, "output gradient", "input");
  const Geometry g = pool_geometry(x.shape(), p, op);
  const Shape out_shape{g.n, g.c, g.oh, g.ow};
  require_shape(grad_out, out_shape, op, "output gradient");
  const bool cl = strictly_channels_last(x);
  if (y.defined()) {
    require_shape(y, out_shape, op, "forward's output");
    const Array xs = in_layout(x, cl), ys = in_layout(y, cl), dys = in_layout(grad_out, cl);
    detail::PoolCall call = pool_call(detail::PoolKind::MaxBackward, p, cl);
    call.x = &xs, call.y = &ys, call.dy = &dys;
    const Array dx = run_pool(call, x.shape(), x.dtype(), x.device(), x.size() == 0);
    if (dx.defined()) return dx;
  }
  const Array where_max = indices.defined() ? indices : max_pool_reference(x, g).indices;
  require_shape(where_max, out_shape, op, "indices");
  const int64_t k = g.kh * g.kw;
  const Array dwin =
      scatter_add(zeros({g.n, g.c, k, g.oh, g.ow}, grad_out.dtype(), grad_out.device()), 2,
                  where_max.reshape({g.n, g.c, 1, g.oh, g.ow}), grad_out.reshape({g.n, g.c, 1, g.oh, g.ow}));
  const Array dx = from_windows(dwin.reshape({g.n, g.c, g.kh, g.kw, g.oh, g.ow}), g);
  return cl ? to_channels_last(dx) : dx.contiguous();
}

Array avg_pool2d_forward(const Array& x, const PoolParams& p) {
  const PoolForward f = pool_forward(x, p, detail::PoolKind::AvgForward, "avg_pool2d", "nn::avg_pool2d");
  if (f.y.defined()) return f.y;
  const Geometry& g = f.g;
  const Array out = windows(padded(f.xs, g, 0.0), g).reshape({g.n, g.c, g.kh * g.kw, g.oh, g.ow}).mean(2);
  return f.cl ? to_channels_last(out) : out;
}

Array avg_pool2d_backward(const Array& grad_out, const Shape& input_shape, const PoolParams& p) {
  const char* op = "avg_pool2d_backward";
  require_floating(grad_out, op, "output gradient");
  const Geometry g = pool_geometry(input_shape, p, op);
  require_shape(grad_out, {g.n, g.c, g.oh, g.ow}, op, "output gradient");
  const bool cl = strictly_channels_last(grad_out);
  const Array dys = in_layout(grad_out, cl);
  detail::PoolCall call = pool_call(detail::PoolKind::AvgBackward, p, cl);
  call.dy = &dys;
  const Array dx = run_pool(call, input_shape, grad_out.dtype(), grad_out.device(), grad_out.size() == 0);
  if (dx.defined()) return dx;
  const double scale = 1.0 / static_cast<double>(g.kh * g.kw);  // padding counts (count_include_pad)
  const Array dwin =
      broadcast_to((dys * scale).reshape({g.n, g.c, 1, 1, g.oh, g.ow}), {g.n, g.c, g.kh, g.kw, g.oh, g.ow});
  const Array out = from_windows(dwin, g);
  return cl ? to_channels_last(out) : out.contiguous();
}

// ---------------------------------------------------------------- batch normalisation
namespace {

DType stats_dtype(DType x) { return x == DType::Float16 || x == DType::BFloat16 ? DType::Float32 : x; }

/// A per-channel operand in the statistics dtype, contiguous; `fill` when undefined.
Array per_channel(const Array& a, int64_t c, DType dtype, Device device, double fill, const char* op,
                  const char* what) {
  if (!a.defined()) return full({c}, fill, dtype, device);
  require_shape(a, {c}, op, what);
  if (a.device() != device)
    throw DeviceError(std::string(op) + ": the " + what + " is on " + a.device().str() + ", the input on " +
                      device.str() + "; move it with .to(" + device.str() + ")");
  return a.astype(dtype).contiguous();
}

void check_running(const Array& a, int64_t c, DType dtype, Device device, const char* op, const char* what) {
  if (!a.defined()) return;
  require_shape(a, {c}, op, what);
  if (a.device() != device || a.dtype() != dtype || !a.is_contiguous())
    throw DTypeError(std::string(op) + ": the " + what + " must be a contiguous " + std::string(dtype_name(dtype)) +
                     " array on " + device.str() + " (it is updated in place), got " +
                     std::string(dtype_name(a.dtype())) + " on " + a.device().str());
}

Array channel_view(const Array& a) { return a.reshape({1, a.shape(0), 1, 1}); }

/// y in x's dtype and layout.
Array like_input(const Array& y, const Array& x) {
  Array out = y.astype(x.dtype());
  return strictly_channels_last(x) ? to_channels_last(out) : out.contiguous();
}

}  // namespace

BatchNormOutput batch_norm_forward(const Array& x, const Array& weight, const Array& bias, const Array& running_mean,
                                   const Array& running_var, bool training, double momentum, double eps, bool relu) {
  const char* op = relu ? "batch_norm_relu" : "batch_norm";
  require_floating(x, op, "input");
  detail::reject_grad({&x, &weight, &bias}, op, "use nn::batch_norm2d, which records the gradient");
  if (x.ndim() != 4) throw ShapeError("batch_norm: the input must be (N, C, H, W), got shape " + shape_str(x.shape()));
  if (!(eps > 0.0)) throw ValueError("batch_norm: eps must be positive, got " + std::to_string(eps));
  const int64_t c = x.shape(1), count = x.shape(0) * x.shape(2) * x.shape(3);
  const DType sd = stats_dtype(x.dtype());
  const Array w = per_channel(weight, c, sd, x.device(), 1.0, op, "weight");
  const Array b = per_channel(bias, c, sd, x.device(), 0.0, op, "bias");
  check_running(running_mean, c, sd, x.device(), op, "running mean");
  check_running(running_var, c, sd, x.device(), op, "running variance");
  if (running_mean.defined() != running_var.defined())
    throw ValueError("batch_norm: give both running statistics or neither");
  if (training && count <= 1)
    throw ValueError("batch_norm: training needs more than one value per channel, got input shape " +
                     shape_str(x.shape()));
  if (!training && !running_mean.defined())
    throw ValueError("batch_norm: evaluation needs running statistics (track_running_stats)");
  if (training && running_mean.defined()) {
    detail::note_inplace_write(running_mean, op);
    detail::note_inplace_write(running_var, op);
  }
  const bool cl = strictly_channels_last(x);
  const Array xs = in_layout(x, cl);
  detail::BatchNormCall call;
  call.kind = training ? detail::BatchNormKind::Training : detail::BatchNormKind::Evaluation;
  call.x = &xs, call.weight = &w, call.bias = &b, call.running_mean = &running_mean, call.running_var = &running_var;
  call.momentum = momentum, call.eps = eps, call.channels_last = cl, call.relu = relu;
  if (x.size() > 0) {
    call.y = empty_in_layout(x.shape(), x.dtype(), x.device(), cl);
    if (training)
      call.mean = detail::make_array({c}, sd, x.device()), call.invstd = detail::make_array({c}, sd, x.device());
    if (training && relu) call.scale_shift = detail::make_array({2 * c}, sd, x.device());
    if (detail::backend_for(x.device()).batch_norm(call)) {
      if (!relu) return {call.y, call.mean, call.invstd, Array()};
      if (!call.relu_done) kiln::relu(call.y, call.y);  // y is this call's own array
      return {call.y, call.mean, call.invstd, call.relu_done && training ? call.scale_shift : Array()};
    }
  }
  // The reference, in the statistics dtype; ReLU on the result in x's dtype, as relu() after it.
  const auto finish = [relu](Array y) {
    if (relu) kiln::relu(y, y);
    return y;
  };
  const Array xf = xs.astype(sd);
  if (!training) {
    const Array scale = w / sqrt(running_var + eps);
    const Array shift = b - running_mean * scale;
    return {finish(like_input(xf * channel_view(scale) + channel_view(shift), x)), Array(), Array(), Array()};
  }
  const Array mean_c = mean(xf, {0, 2, 3});
  const Array centred = xf - channel_view(mean_c);
  const Array var_c = mean(square(centred), {0, 2, 3});  // biased, for normalising (as PyTorch)
  const Array invstd = 1.0 / sqrt(var_c + eps);
  if (running_mean.defined()) {
    const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
    Array rm = running_mean, rv = running_var;  // handles on the same storage, written in place
    rm.assign(running_mean * (1.0 - momentum) + mean_c * momentum);
    rv.assign(running_var * (1.0 - momentum) + var_c * (momentum * unbias));
  }
  const Array y = centred * channel_view(invstd * w) + channel_view(b);
  return {finish(like_input(y, x)), mean_c, invstd, Array()};
}

namespace {

/// batch_norm_backward, or with `mask` (a ReLU's (scale, shift) from batch_norm_forward) the masked backward of
/// batch_norm_relu_backward: nullopt when no backend masks it.
std::optional<BatchNormGrads> batch_norm_backward_impl(const char* op, const Array& grad_y, const Array& x,
                                                       const Array& weight, const Array& mean_c, const Array& invstd,
                                                       double eps, const Array& mask) {
  require_pair(grad_y, x, op, "output gradient", "input");
  if (x.ndim() != 4)
    throw ShapeError(std::string(op) + ": the input must be (N, C, H, W), got " + shape_str(x.shape()));
  require_shape(grad_y, x.shape(), op, "output gradient");
  const int64_t c = x.shape(1), count = x.shape(0) * x.shape(2) * x.shape(3);
  const DType sd = stats_dtype(x.dtype());
  const Array w = per_channel(weight, c, sd, x.device(), 1.0, op, "weight");
  const Array m = per_channel(mean_c, c, sd, x.device(), 0.0, op, "saved mean");
  const Array is = per_channel(invstd, c, sd, x.device(), 1.0, op, "saved invstd");
  const bool cl = strictly_channels_last(x);
  const Array xs = in_layout(x, cl), dys = in_layout(grad_y, cl);
  detail::BatchNormCall call;
  call.kind = detail::BatchNormKind::Backward;
  call.x = &xs, call.dy = &dys, call.weight = &w, call.mean = m, call.invstd = is, call.eps = eps;
  call.channels_last = cl;
  call.relu = mask.defined(), call.scale_shift = mask;
  const Array none;
  call.running_mean = &none, call.running_var = &none, call.bias = &none;
  if (x.size() > 0) {
    call.dx = empty_in_layout(x.shape(), x.dtype(), x.device(), cl);
    call.dweight = detail::make_array({c}, sd, x.device());
    call.dbias = detail::make_array({c}, sd, x.device());
    if (detail::backend_for(x.device()).batch_norm(call)) return BatchNormGrads{call.dx, call.dweight, call.dbias};
  }
  if (mask.defined()) return std::nullopt;
  const Array dy = dys.astype(sd);
  const Array xhat = (xs.astype(sd) - channel_view(m)) * channel_view(is);
  const Array db = sum(dy, {0, 2, 3});
  const Array dw = sum(dy * xhat, {0, 2, 3});
  const double inv_count = 1.0 / static_cast<double>(count);
  const Array dx = (dy - channel_view(db * inv_count) - xhat * channel_view(dw * inv_count)) * channel_view(w * is);
  return BatchNormGrads{like_input(dx, x), dw, db};
}

}  // namespace

BatchNormGrads batch_norm_backward(const Array& grad_y, const Array& x, const Array& weight, const Array& mean_c,
                                   const Array& invstd, double eps) {
  return *batch_norm_backward_impl("batch_norm_backward", grad_y, x, weight, mean_c, invstd, eps, Array());
}

BatchNormGrads batch_norm_relu_backward(const Array& grad_y, const Array& x, const Array& y, const Array& weight,
                                        const Array& mean_c, const Array& invstd, const Array& scale_shift,
                                        double eps) {
  const char* op = "batch_norm_relu_backward";
  require_pair(y, x, op, "output", "input");
  require_shape(y, x.shape(), op, "output");
  if (scale_shift.defined() && x.ndim() == 4) {
    const DType sd = stats_dtype(x.dtype());
    if (scale_shift.shape() != Shape{2 * x.shape(1)} || scale_shift.dtype() != sd ||
        scale_shift.device() != x.device() || !scale_shift.is_contiguous())
      throw ValueError(std::string(op) + ": scale_shift must be the contiguous (" + std::to_string(2 * x.shape(1)) +
                       ",) " + std::string(dtype_name(sd)) + " array on " + x.device().str() +
                       " that batch_norm_forward(..., relu=true) returned, got shape " +
                       shape_str(scale_shift.shape()) + ", " + std::string(dtype_name(scale_shift.dtype())) + " on " +
                       scale_shift.device().str() + "; pass an undefined array to mask by the output instead");
    if (auto g = batch_norm_backward_impl(op, grad_y, x, weight, mean_c, invstd, eps, scale_shift)) return *g;
  }
  // The ReLU's gradient first (where the output is positive), then the plain backward.
  require_pair(grad_y, y, op, "output gradient", "output");
  require_shape(grad_y, y.shape(), op, "output gradient");
  return *batch_norm_backward_impl(op, relu_backward(y, grad_y), x, weight, mean_c, invstd, eps, Array());
}

LayerNormGrads layer_norm_backward(const Array& grad_y, const Array& x, const Array& weight, const Array& mean_r,
                                   const Array& rstd, LayerNormWanted wanted) {
  const char* op = "layer_norm_backward";
  require_floating(grad_y, op, "output gradient");
  require_floating(x, op, "input");
  if (x.ndim() != 2)
    throw ShapeError(std::string(op) + ": the input must be rows (M, D), got shape " + shape_str(x.shape()) +
                     "; reshape it to (-1, D)");
  const int64_t m = x.shape(0), d = x.shape(1);
  require_shape(grad_y, x.shape(), op, "output gradient");
  require_shape(mean_r, {m, 1}, op, "saved mean");
  require_shape(rstd, {m, 1}, op, "saved rstd");
  if (weight.defined()) require_shape(weight, {d}, op, "weight");
  for (const Array* a : {&grad_y, &weight, &mean_r, &rstd})
    if (a->defined() && a->device() != x.device())
      throw DeviceError(std::string(op) + ": the operands must be on one device; the input is on " +
                        x.device().str() + ", another on " + a->device().str() + "; move it with .to(...) first");
  if (!weight.defined() && (wanted.weight || wanted.bias))
    throw ValueError(std::string(op) + ": the weight's and bias's gradients need the weight; pass it, or ask for "
                                       "the input's gradient only (LayerNormWanted{.weight = false, .bias = false})");
  detail::reject_grad({&grad_y, &x, &weight, &mean_r, &rstd}, op, "use nn::LayerNorm, which records the gradient");
  // The CPU has no one-pass engine (its fused kernels below are one blocked pass each): no outputs to allocate.
  if (!x.device().is_cpu() && x.size() > 0 && (wanted.input || wanted.weight || wanted.bias)) {
    detail::LayerNormBackwardCall call;
    call.x = &x, call.dy = &grad_y, call.weight = &weight, call.mean = &mean_r, call.rstd = &rstd;
    if (wanted.input) call.dx = detail::make_array(x.shape(), x.dtype(), x.device());
    if (wanted.weight) call.dweight = detail::make_array({d}, x.dtype(), x.device());
    if (wanted.bias) call.dbias = detail::make_array({d}, x.dtype(), x.device());
    if (detail::backend_for(x.device()).layer_norm_backward(call)) return {call.dx, call.dweight, call.dbias};
  }
  // dx = rstd * (g w - mean(g w) - xhat * mean(g w xhat)), xhat = (x - mu) * rstd, per row: one rows kernel.
  static const auto backward_x = fuse(
      [](auto x, auto mu, auto rstd, auto w, auto g) {
        auto xhat = (x - mu) * rstd;
        auto gw = g * w;
        return (gw - mean(gw, 1, true) - xhat * mean(gw * xhat, 1, true)) * rstd;
      },
      "layer_norm_backward");
  static const auto backward_w = fuse(
      [](auto x, auto mu, auto rstd, auto g) { return sum((x - mu) * rstd * g, 0); }, "layer_norm_backward_weight");
  LayerNormGrads grads;
  if (wanted.input)
    grads.input =
        weight.defined() ? backward_x(x, mean_r, rstd, weight, grad_y) : backward_x(x, mean_r, rstd, 1.0, grad_y);
  if (wanted.weight) grads.weight = backward_w(x, mean_r, rstd, grad_y);
  if (wanted.bias) grads.bias = sum(grad_y, 0);
  return grads;
}

Array relu_backward(const Array& out, const Array& grad) {
  static const auto kernel = fuse([](auto o, auto g) { return where(o > 0, g, 0.0); }, "relu_backward");
  return kernel(out, grad);
}

}  // namespace kiln
