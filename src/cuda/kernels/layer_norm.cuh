// Layer-norm backward kernels over float32 rows (M, D) (src/cuda/layer_norm.cpp tells the design and launches
// them): ln_backward_rows and ln_backward_finish. After the prelude, layer_norm_source() defines LN_V (floats a
// lane loads at once: 4, or 1 where D or an operand is not aligned to 16 bytes), LN_CHUNKS (the LN_V-runs a lane
// holds of one row: D <= LN_CHUNKS * 32 * LN_V) and LN_KEEP (1: a row's x and dy stay in registers between the
// row sums and dx; 0: dx reads them again, from the L1 cache, so wide rows do not spill registers).
#define LN_WARPS 8
#define LN_COLUMNS (LN_CHUNKS * 32 * LN_V)

struct alignas(LN_V * 4) LnRun {
  float v[LN_V];
};
__device__ __forceinline__ LnRun ln_load(const float* __restrict__ p, long long at) {
  return *reinterpret_cast<const LnRun*>(p + at);
}
// A butterfly leaves the same bits in every lane (each step adds the same two values, in either order).
__device__ __forceinline__ float ln_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One row's x and dy as a lane reads them, run k at column c: kept in registers from one load of all the runs
// (every load issued before any is used) or read again at each use.
struct LnRow {
  const float* __restrict__ x;
  const float* __restrict__ dy;
#if LN_KEEP
  LnRun xs[LN_CHUNKS], gs[LN_CHUNKS];
#endif
  __device__ __forceinline__ void prefetch(int k, long long c) {
#if LN_KEEP
    xs[k] = ln_load(x, c), gs[k] = ln_load(dy, c);
#endif
  }
  __device__ __forceinline__ void run(int k, long long c, LnRun& xv, LnRun& gv) const {
#if LN_KEEP
    xv = xs[k], gv = gs[k];
#else
    xv = ln_load(x, c), gv = ln_load(dy, c);
#endif
  }
};

// One warp per row at a time (rows warp, warp + all warps, ...): the row's sums of dy*w and dy*w*xhat by a lane
// sum and a butterfly, then dx = (dy*w - mean(dy*w) - xhat * mean(dy*w*xhat)) * rstd, written in LN_V-runs.
// Each lane always holds the same columns, so it adds dy*xhat and dy of its rows into registers (no atomics);
// at the end the block's eight warps add theirs in shared memory in warp order and the block writes its partial
// sums, part[block][0][:] (for dweight) and part[block][1][:] (dbias), which ln_backward_finish adds in block
// order: the same bits on every run. w null: 1 (no affine weight); dx null: no dx; part null: no column sums.
extern "C" __global__ void __launch_bounds__(LN_WARPS * 32)
    ln_backward_rows(const float* __restrict__ x, const float* __restrict__ dy, const float* __restrict__ w,
                     const float* __restrict__ mean, const float* __restrict__ rstd, float* __restrict__ dx,
                     float* __restrict__ part, long long M, long long D) {
  __shared__ float shared_sums[2][LN_COLUMNS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float sum_w[LN_CHUNKS][LN_V], sum_b[LN_CHUNKS][LN_V];
#pragma unroll
  for (int k = 0; k < LN_CHUNKS; ++k)
#pragma unroll
    for (int j = 0; j < LN_V; ++j) sum_w[k][j] = sum_b[k][j] = 0.0f;
  const float inv_d = 1.0f / (float)D;
  for (long long r = (long long)blockIdx.x * LN_WARPS + warp; r < M; r += (long long)gridDim.x * LN_WARPS) {
    const float mu = mean[r], s = rstd[r];
    LnRow row{x + r * D, dy + r * D};
#pragma unroll
    for (int k = 0; k < LN_CHUNKS; ++k) {
      const long long c = ((long long)k * 32 + lane) * LN_V;
      if (c < D) row.prefetch(k, c);
    }
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int k = 0; k < LN_CHUNKS; ++k) {
      const long long c = ((long long)k * 32 + lane) * LN_V;
      if (c >= D) continue;
      LnRun xv, gv;
      row.run(k, c, xv, gv);
#pragma unroll
      for (int j = 0; j < LN_V; ++j) {
        const float xhat = (xv.v[j] - mu) * s;
        const float gw = w != nullptr ? gv.v[j] * w[c + j] : gv.v[j];
        a += gw;
        b += gw * xhat;
        sum_w[k][j] += gv.v[j] * xhat;
        sum_b[k][j] += gv.v[j];
      }
    }
    if (dx == nullptr) continue;
    const float mean_gw = ln_warp_sum(a) * inv_d, mean_gwx = ln_warp_sum(b) * inv_d;
#pragma unroll
    for (int k = 0; k < LN_CHUNKS; ++k) {
      const long long c = ((long long)k * 32 + lane) * LN_V;
      if (c >= D) continue;
      LnRun xv, gv, out;
      row.run(k, c, xv, gv);
#pragma unroll
      for (int j = 0; j < LN_V; ++j) {
        const float gw = w != nullptr ? gv.v[j] * w[c + j] : gv.v[j];
        out.v[j] = (gw - mean_gw - (xv.v[j] - mu) * s * mean_gwx) * s;
      }
      *reinterpret_cast<LnRun*>(dx + r * D + c) = out;
    }
  }
  if (part == nullptr) return;
  // The warps' column sums, added in warp order (eight barriers, once per block).
  for (int turn = 0; turn < LN_WARPS; ++turn) {
    if (warp == turn) {
#pragma unroll
      for (int k = 0; k < LN_CHUNKS; ++k)
#pragma unroll
        for (int j = 0; j < LN_V; ++j) {
          const int c = (k * 32 + lane) * LN_V + j;
          shared_sums[0][c] = turn == 0 ? sum_w[k][j] : shared_sums[0][c] + sum_w[k][j];
          shared_sums[1][c] = turn == 0 ? sum_b[k][j] : shared_sums[1][c] + sum_b[k][j];
        }
    }
    __syncthreads();
  }
  float* __restrict__ out = part + (long long)blockIdx.x * 2 * D;
  for (long long c = threadIdx.x; c < D; c += LN_WARPS * 32) {
    out[c] = shared_sums[0][c];
    out[D + c] = shared_sums[1][c];
  }
}

// dweight (blockIdx.y 0) or dbias (1) of 32 columns a block: its 8 thread rows add the partial sums of blocks
// ty, ty + 8, ... in float64, then thread row 0 adds the eight in order and rounds once. Either output may be null.
extern "C" __global__ void __launch_bounds__(256)
    ln_backward_finish(const float* __restrict__ part, int blocks, long long D, float* __restrict__ dweight,
                       float* __restrict__ dbias) {
  __shared__ double acc[8][33];
  float* __restrict__ out = blockIdx.y == 0 ? dweight : dbias;
  if (out == nullptr) return;  // uniform over the block: no barrier is skipped by part of it
  const long long c = (long long)blockIdx.x * 32 + threadIdx.x;
  double v = 0.0;
  if (c < D)
    for (int p = threadIdx.y; p < blocks; p += 8) v += (double)part[((long long)p * 2 + blockIdx.y) * D + c];
  acc[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y != 0 || c >= D) return;
  for (int k = 1; k < 8; ++k) v += acc[k][threadIdx.x];
  out[c] = (float)v;
}
