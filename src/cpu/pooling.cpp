// 2-d pooling on the CPU (CpuBackend::pooling): direct loops over NCHW-contiguous float32/float64 planes,
// one (n, c) plane per task on the CPU's threads. Max pooling takes the first maximum of each window in row-major
// window order, NaN winning (as the core's reference and PyTorch), padding never; its backward finds that
// position again from x and adds dy there (a plane's windows are walked by one thread, so overlapping windows
// never race). Average pooling counts padding (count_include_pad). Channels-last operands and other dtypes
// return false: the core's reference runs them. Also batch-norm evaluation (CpuBackend::batch_norm) in one
// pass per plane or row of channels, with the reference's scale, shift and roundings.
#include "cpu/pooling.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/backend.hpp"
#include "cpu/parallel.hpp"

namespace kiln::cpu_impl {
namespace {

struct Window {
  int64_t h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
};

/// The input offset (within a plane) of window (i, j)'s maximum, or -1 when the window holds no input.
template <class T>
int64_t argmax_at(const T* x, const Window& g, int64_t i, int64_t j) {
  int64_t best = -1;
  T value = T(0);
  for (int64_t p = 0; p < g.kh; ++p) {
    const int64_t r = i * g.sh - g.ph + p * g.dh;
    if (r < 0 || r >= g.h) continue;
    for (int64_t q = 0; q < g.kw; ++q) {
      const int64_t s = j * g.sw - g.pw + q * g.dw;
      if (s < 0 || s >= g.w) continue;
      const T v = x[r * g.w + s];
      if (best < 0 || (!std::isnan(value) && (v > value || std::isnan(v)))) best = r * g.w + s, value = v;
    }
  }
  return best;
}

/// Max pooling forward of one plane by value: the windows that lie inside the plane's columns take every
/// element unchecked, a row of outputs at a time (the loop over outputs vectorises), combined in row-major window
/// order as argmax_at would pick them (the first maximum; the first NaN wins); the edge columns use argmax_at.
template <class T>
void max_plane(const T* xp, T* yp, const Window& g) {
  // Interior output columns [j0, j1): every window column in [0, w).
  const int64_t j0 = std::min(g.ow, (g.pw + g.sw - 1) / g.sw);
  const int64_t last = g.w - 1 - (g.kw - 1) * g.dw + g.pw;  // j * sw <= last
  const int64_t j1 = last < 0 ? j0 : std::max(j0, std::min(g.ow, last / g.sw + 1));
  for (int64_t i = 0; i < g.oh; ++i) {
    T* yr = yp + i * g.ow;
    for (int64_t j = 0; j < g.ow; ++j) {
      if (j == j0) j = j1;
      if (j >= g.ow) break;
      const int64_t at = argmax_at(xp, g, i, j);
      yr[j] = at < 0 ? -INFINITY : xp[at];
    }
    if (j1 <= j0) continue;
    bool first = true;
    for (int64_t p = 0; p < g.kh; ++p) {
      const int64_t r = i * g.sh - g.ph + p * g.dh;
      if (r < 0 || r >= g.h) continue;
      for (int64_t q = 0; q < g.kw; ++q) {
        const T* src = xp + r * g.w + (j0 * g.sw - g.pw + q * g.dw);
        const int64_t sw = g.sw;
        if (first) {
          for (int64_t j = j0; j < j1; ++j) yr[j] = src[(j - j0) * sw];
          first = false;
          continue;
        }
        for (int64_t j = j0; j < j1; ++j) {
          const T v = src[(j - j0) * sw], m = yr[j];
          yr[j] = (m != m) ? m : (v > m || v != v) ? v : m;
        }
      }
    }
    if (first)  // every window row in the padding: no input
      for (int64_t j = j0; j < j1; ++j) yr[j] = -INFINITY;
  }
}

template <class T>
void pool(const detail::PoolCall& call, const Window& g, int64_t planes) {
  const bool max = call.kind == detail::PoolKind::MaxForward || call.kind == detail::PoolKind::MaxBackward;
  const bool forward = call.kind == detail::PoolKind::MaxForward || call.kind == detail::PoolKind::AvgForward;
  const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
  const T* x = call.x ? static_cast<const T*>(call.x->data_ptr()) : nullptr;
  const T* dy = call.dy ? static_cast<const T*>(call.dy->data_ptr()) : nullptr;
  T* out = static_cast<T*>(call.out.data_ptr());
  const T scale = T(1) / static_cast<T>(g.kh * g.kw);
  parallel_for(
      planes,
      [&](int64_t begin, int64_t end) {
        for (int64_t pl = begin; pl < end; ++pl) {
          const T* xp = x ? x + pl * in_plane : nullptr;
          if (forward && max) {
            max_plane(xp, out + pl * out_plane, g);
          } else if (forward) {
            T* yp = out + pl * out_plane;
            for (int64_t i = 0; i < g.oh; ++i)
              for (int64_t j = 0; j < g.ow; ++j) {
                T total = T(0);
                for (int64_t p = 0; p < g.kh; ++p) {
                  const int64_t r = i * g.sh - g.ph + p;
                  if (r < 0 || r >= g.h) continue;
                  for (int64_t q = 0; q < g.kw; ++q) {
                    const int64_t s = j * g.sw - g.pw + q;
                    if (s >= 0 && s < g.w) total += xp[r * g.w + s];
                  }
                }
                yp[i * g.ow + j] = total * scale;
              }
          } else {
            T* dxp = out + pl * in_plane;
            const T* dyp = dy + pl * out_plane;
            for (int64_t k = 0; k < in_plane; ++k) dxp[k] = T(0);
            for (int64_t i = 0; i < g.oh; ++i)
              for (int64_t j = 0; j < g.ow; ++j) {
                const T grad = dyp[i * g.ow + j];
                if (max) {
                  const int64_t at = argmax_at(xp, g, i, j);
                  if (at >= 0) dxp[at] += grad;
                  continue;
                }
                for (int64_t p = 0; p < g.kh; ++p) {
                  const int64_t r = i * g.sh - g.ph + p;
                  if (r < 0 || r >= g.h) continue;
                  for (int64_t q = 0; q < g.kw; ++q) {
                    const int64_t s = j * g.sw - g.pw + q;
                    if (s >= 0 && s < g.w) dxp[r * g.w + s] += grad * scale;
                  }
                }
              }
          }
        }
      },
      1);
}

/// scale = w / sqrt(var + eps), shift = b - mean * scale, rounded to T at each step as the core's reference
/// (kiln's elementwise ops, eps a weak scalar) computes them; then y = x * scale + shift, two roundings
/// (-ffp-contract=off: no fused multiply-add); then ReLU when call.relu.
template <class T>
void batch_norm_eval(detail::BatchNormCall& call) {
  const Array& x = *call.x;
  const int64_t n = x.shape(0), c = x.shape(1), hw = x.shape(2) * x.shape(3);
  std::vector<T> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
  const T* w = static_cast<const T*>(call.weight->data_ptr());
  const T* b = static_cast<const T*>(call.bias->data_ptr());
  const T* mean = static_cast<const T*>(call.running_mean->data_ptr());
  const T* var = static_cast<const T*>(call.running_var->data_ptr());
  const T eps = static_cast<T>(call.eps);
  for (int64_t k = 0; k < c; ++k) {
    const T s = w[k] / std::sqrt(var[k] + eps);
    const T m = mean[k] * s;
    scale[static_cast<size_t>(k)] = s;
    shift[static_cast<size_t>(k)] = b[k] - m;
  }
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = static_cast<T*>(call.y.data_ptr());
  const T* sp = scale.data();
  const T* hp = shift.data();
  // A fused ReLU as kiln's relu computes it (a < 0 ? 0 : a, NaN kept), on the rounded result.
  const bool relu = call.relu;
  const auto out = [relu](T v) { return relu && v < T(0) ? T(0) : v; };
  call.relu_done = relu;
  if (call.channels_last) {  // rows of c channels
    parallel_for(
        n * hw,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const T* xr = xp + r * c;
            T* yr = yp + r * c;
            for (int64_t k = 0; k < c; ++k) {
              const T v = xr[k] * sp[k];
              yr[k] = out(v + hp[k]);
            }
          }
        },
        std::max<int64_t>(1, kParallelThreshold / std::max<int64_t>(c, 1)));
    return;
  }
  parallel_for(
      n * c,
      [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          const T s = sp[p % c], h = hp[p % c];
          const T* xr = xp + p * hw;
          T* yr = yp + p * hw;
          for (int64_t i = 0; i < hw; ++i) {
            const T v = xr[i] * s;
            yr[i] = out(v + h);
          }
        }
      },
      std::max<int64_t>(1, kParallelThreshold / std::max<int64_t>(hw, 1)));
}

}  // namespace

bool cpu_batch_norm(detail::BatchNormCall& call) {
  if (call.kind != detail::BatchNormKind::Evaluation) return false;
  const DType t = call.x->dtype();
  if (t != DType::Float32 && t != DType::Float64) return false;
  for (const Array* a : {call.x, call.weight, call.bias, call.running_mean, call.running_var})
    if (!a || !a->defined() || a->dtype() != t) return false;
  if (!call.weight->is_contiguous() || !call.bias->is_contiguous()) return false;
  if (!call.channels_last && !call.x->is_contiguous()) return false;
  if (t == DType::Float32)
    batch_norm_eval<float>(call);
  else
    batch_norm_eval<double>(call);
  return true;
}

bool cpu_pooling(const detail::PoolCall& call) {
  const bool forward = call.kind == detail::PoolKind::MaxForward || call.kind == detail::PoolKind::AvgForward;
  const Array& in = forward ? *call.x : call.out;    // (N, C, H, W) input side
  const Array& out = forward ? call.out : *call.dy;  // output side
  const DType t = call.out.dtype();
  if (call.channels_last || (t != DType::Float32 && t != DType::Float64)) return false;
  const Window g{in.shape(2),    in.shape(3),    out.shape(2),    out.shape(3),    call.kernel[0],   call.kernel[1],
                 call.stride[0], call.stride[1], call.padding[0], call.padding[1], call.dilation[0], call.dilation[1]};
  const int64_t planes = in.shape(0) * in.shape(1);
  if (t == DType::Float32)
    pool<float>(call, g, planes);
  else
    pool<double>(call, g, planes);
  return true;
}

}  // namespace kiln::cpu_impl
