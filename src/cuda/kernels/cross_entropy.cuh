// Cross-entropy kernels over contiguous (N, C) logits (src/cuda/cross_entropy.cpp tells the design and launches
// them): ce_forward_{warp,block} write each row's loss and log-sum-exp, ce_backward_{warp,block} the logits'
// gradient. "warp": 32 threads per row, 8 rows per 256-thread block (short rows); "block": 256 threads per row.
// After the prelude, cross_entropy_source() defines IN (the logits' storage type: float, kd::half_t or
// kd::bf16_t) in front of this file. Every value is computed in float32 (IN widened exactly).
namespace ce {

constexpr int kThreads = 256;
constexpr int kVec = 16 / (int)sizeof(IN);  // elements of one 16-byte load
constexpr int kUnroll = 4;                  // 16-byte loads a thread has in flight: enough bytes to cover latency

struct alignas(16) Vec {
  IN v[kVec];
};

// Elements of a row before its first 16-byte boundary (rows of C elements need not start at one), at most C.
__device__ __forceinline__ long long head_of(const void* row, long long C) {
  const long long mis = (long long)((unsigned long long)row % 16) / (long long)sizeof(IN);
  const long long head = mis == 0 ? 0 : kVec - mis;
  return head < C ? head : C;
}

// The shift of a sum of exponentials: the running max where it is finite, else 0, as the fused kernel's
// where(isfinite(m), m, 0) (an all -inf row sums exp(-inf) = 0: lse -inf; a row holding +inf sums +inf).
__device__ __forceinline__ float shift_of(float m) { return kd::ops::isfinite(m) ? m : 0.f; }

// One thread's (or a combined group's) part of a row, online: m the max of its values (fmaxf: a NaN leaves m
// alone and reaches s through its exponential instead), s the sum of exp(x - shift_of(m)), t the sum of x.
struct Part {
  float m, s, t;
};

// s, summed under shift_of(m), moved to shift `to` (>= it, or 0 when the max became +inf). Zero stays zero: an
// empty or all -inf part has shift 0, and exp(0 - to) overflows for very negative rows (0 * inf is NaN).
__device__ __forceinline__ float rescaled(float s, float m, float to) {
  return s == 0.f ? 0.f : s * expf(shift_of(m) - to);
}

__device__ __forceinline__ Part combine(Part a, Part b) {
  const float m = fmaxf(a.m, b.m), to = shift_of(m);
  // a + b == b + a: both lanes of a butterfly exchange get the same bits.
  return Part{m, rescaled(a.s, a.m, to) + rescaled(b.s, b.m, to), a.t + b.t};
}

// Adds K values: one max and (at most) one rescale per chunk, then one exponential per value.
template <int K>
__device__ __forceinline__ void add(Part& p, const float (&v)[K]) {
  float m = p.m;
#pragma unroll
  for (int k = 0; k < K; ++k) m = fmaxf(m, v[k]);
  const float to = shift_of(m);
  if (to != shift_of(p.m)) p.s = rescaled(p.s, p.m, to);
  p.m = m;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    p.s += expf(v[k] - to);
    p.t += v[k];
  }
}

template <int U>
__device__ __forceinline__ void add_vectors(Part& p, const Vec (&buf)[U]) {
  float v[U * kVec];
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[u * kVec + k] = (float)kd::widen(buf[u].v[k]);
  add(p, v);
}

__device__ __forceinline__ void add_one(Part& p, IN x) {
  const float v[1] = {(float)kd::widen(x)};
  add(p, v);
}

__device__ __forceinline__ Part shfl_xor(Part p, int lane_mask) {
  return Part{__shfl_xor_sync(0xffffffffu, p.m, lane_mask), __shfl_xor_sync(0xffffffffu, p.s, lane_mask),
              __shfl_xor_sync(0xffffffffu, p.t, lane_mask)};
}

__device__ __forceinline__ Part warp_combine(Part p) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) p = combine(p, shfl_xor(p, o));
  return p;
}

// The row's part over G threads (32: its warp; 256: the block), complete in the group's thread 0. A fixed
// assignment of elements to threads and a fixed combining tree: the same bits on every run.
template <int G>
__device__ __forceinline__ Part row_part(const IN* __restrict__ xr, long long C, int lane) {
  Part p{-kd::infinity<float>(), 0.f, 0.f};
  const long long head = head_of(xr, C);
  const long long nv = (C - head) / kVec;
  for (long long j = lane; j < head; j += G) add_one(p, xr[j]);
  const Vec* __restrict__ xv = reinterpret_cast<const Vec*>(xr + head);
  long long v = lane;
  for (; v + (long long)(kUnroll - 1) * G < nv; v += (long long)kUnroll * G) {
    Vec buf[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) buf[u] = xv[v + (long long)u * G];
    add_vectors(p, buf);
  }
  for (; v < nv; v += G) {
    const Vec buf[1] = {xv[v]};
    add_vectors(p, buf);
  }
  for (long long j = head + nv * kVec + lane; j < C; j += G) add_one(p, xr[j]);
  return p;
}

template <int G>
__device__ __forceinline__ void forward_rows(const IN* __restrict__ x, const long long* __restrict__ labels,
                                             float* __restrict__ loss, float* __restrict__ lse, long long N,
                                             long long C, float keep, float ls, int smooth) {
  const int lane = threadIdx.x % G;
  const long long row = (long long)blockIdx.x * (kThreads / G) + threadIdx.x / G;
  // G == 32: a warp past the last row still takes part in its own shuffles only; G == 256: row < N always.
  const IN* __restrict__ xr = x + (row < N ? row : 0) * C;
  Part p = row < N ? row_part<G>(xr, C, lane) : Part{-kd::infinity<float>(), 0.f, 0.f};
  p = warp_combine(p);
  if constexpr (G > 32) {
    __shared__ Part parts[kThreads / 32];
    if (threadIdx.x % 32 == 0) parts[threadIdx.x / 32] = p;
    __syncthreads();
    if (threadIdx.x >= 32) return;
    p = threadIdx.x < kThreads / 32 ? parts[threadIdx.x] : Part{-kd::infinity<float>(), 0.f, 0.f};
    p = warp_combine(p);
  }
  if (lane != 0 || row >= N) return;
  const float l = logf(p.s) + shift_of(p.m);
  const long long label = labels[row];
  // Labels are range-checked on the device before this runs (the check's error comes at the next
  // synchronisation); one outside [0, C) gives NaN here instead of a read outside the row.
  const float picked = label >= 0 && label < C ? (float)kd::widen(xr[label]) : __int_as_float(0x7fc00000);
  float r = l - picked * keep;
  if (smooth) r = r - p.t / (float)C * ls;
  loss[row] = r;
  lse[row] = l;
}

// The gradient of one logit: softmax - (1 - ls) * one-hot - ls / C, times the row's upstream gradient, in the
// fused kernel's order of operations.
__device__ __forceinline__ IN grad_of(IN x, long long j, float l, long long label, float keep, float ls_over_c,
                                      float g) {
  const float e = expf((float)kd::widen(x) - l);
  return kd::from_wide<IN>(((j == label ? e - keep : e) - ls_over_c) * g);
}

template <int G>
__device__ __forceinline__ void backward_rows(const IN* __restrict__ x, const float* __restrict__ lse,
                                              const long long* __restrict__ labels, const float* __restrict__ g,
                                              long long g_stride, IN* __restrict__ dx, long long N, long long C,
                                              float keep, float ls_over_c, int vectors) {
  const int lane = threadIdx.x % G;
  const long long row = (long long)blockIdx.x * (kThreads / G) + threadIdx.x / G;
  if (row >= N) return;  // no block-wide synchronisation below
  const float l = lse[row], gr = g[row * g_stride];
  const long long label = labels[row];
  const IN* __restrict__ xr = x + row * C;
  IN* __restrict__ dr = dx + row * C;
  // vectors == 0: x and dx sit at different offsets from a 16-byte boundary, so no load and store pair up.
  const long long head = vectors ? head_of(xr, C) : C;
  const long long nv = (C - head) / kVec;
  for (long long j = lane; j < head; j += G) dr[j] = grad_of(xr[j], j, l, label, keep, ls_over_c, gr);
  const Vec* __restrict__ xv = reinterpret_cast<const Vec*>(xr + head);
  Vec* __restrict__ dv = reinterpret_cast<Vec*>(dr + head);
  long long v = lane;
  for (; v + (long long)(kUnroll - 1) * G < nv; v += (long long)kUnroll * G) {
    Vec buf[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) buf[u] = xv[v + (long long)u * G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long j0 = head + (v + (long long)u * G) * kVec;
      Vec out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out.v[k] = grad_of(buf[u].v[k], j0 + k, l, label, keep, ls_over_c, gr);
      dv[v + (long long)u * G] = out;
    }
  }
  for (; v < nv; v += G) {
    const Vec in = xv[v];
    const long long j0 = head + v * kVec;
    Vec out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) out.v[k] = grad_of(in.v[k], j0 + k, l, label, keep, ls_over_c, gr);
    dv[v] = out;
  }
  for (long long j = head + nv * kVec + lane; j < C; j += G) dr[j] = grad_of(xr[j], j, l, label, keep, ls_over_c, gr);
}

}  // namespace ce

#define KILN_CE_FORWARD_ARGS                                                                                    \
  const IN *__restrict__ x, const long long *__restrict__ labels, float *__restrict__ loss,                     \
      float *__restrict__ lse, long long N, long long C, float keep, float ls, int smooth
#define KILN_CE_BACKWARD_ARGS                                                                                   \
  const IN *__restrict__ x, const float *__restrict__ lse, const long long *__restrict__ labels,                \
      const float *__restrict__ g, long long g_stride, IN *__restrict__ dx, long long N, long long C, float keep, \
      float ls_over_c, int vectors

extern "C" __global__ void __launch_bounds__(256) ce_forward_warp(KILN_CE_FORWARD_ARGS) {
  ce::forward_rows<32>(x, labels, loss, lse, N, C, keep, ls, smooth);
}
extern "C" __global__ void __launch_bounds__(256) ce_forward_block(KILN_CE_FORWARD_ARGS) {
  ce::forward_rows<256>(x, labels, loss, lse, N, C, keep, ls, smooth);
}
extern "C" __global__ void __launch_bounds__(256) ce_backward_warp(KILN_CE_BACKWARD_ARGS) {
  ce::backward_rows<32>(x, lse, labels, g, g_stride, dx, N, C, keep, ls_over_c, vectors);
}
extern "C" __global__ void __launch_bounds__(256) ce_backward_block(KILN_CE_BACKWARD_ARGS) {
  ce::backward_rows<256>(x, lse, labels, g, g_stride, dx, N, C, keep, ls_over_c, vectors);
}
#undef KILN_CE_FORWARD_ARGS
#undef KILN_CE_BACKWARD_ARGS
