// cumsum/cumprod kernels (src/cuda/scan.cpp tells the design and launches them): scan_columns, scan_totals,
// scan_segments. After the prelude, scan_source() defines IN, OUT, ACC (double or long long) and the macros
// KILN_SCAN_PROD (cumprod) and KILN_SCAN_INT (wrapping integer accumulation) in front of this file.
__device__ __forceinline__ ACC identity() { return (ACC)(KILN_SCAN_PROD ? 1 : 0); }
__device__ __forceinline__ ACC combine(ACC a, ACC b) {
#if KILN_SCAN_INT  // wrapping 64-bit arithmetic, as NumPy's int64 accumulation
  return (ACC)(KILN_SCAN_PROD ? (unsigned long long)a * (unsigned long long)b
                              : (unsigned long long)a + (unsigned long long)b);
#else
  return KILN_SCAN_PROD ? a * b : a + b;
#endif
}
__device__ __forceinline__ ACC load(IN x) { return (ACC)kd::widen(x); }

extern "C" __global__ void __launch_bounds__(256)
    scan_columns(const IN* __restrict__ x, OUT* __restrict__ y, long long lines, long long n, long long inner) {
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < lines;
       t += (long long)gridDim.x * blockDim.x) {
    const long long o = t / inner, i = t - o * inner;
    const long long base = o * n * inner + i;
    ACC running = identity();
    for (long long k = 0; k < n; ++k) {
      running = combine(running, load(x[base + k * inner]));
      y[base + k * inner] = kd::cast<OUT>(running);
    }
  }
}

/// The segment [begin, end) of line `line` of the block (blockIdx.x = line * segments + segment).
__device__ __forceinline__ void segment_of(long long n, long long segments, long long segment_length, long long& line,
                                           long long& segment, long long& begin, long long& end) {
  line = blockIdx.x / segments;
  segment = blockIdx.x - line * segments;
  begin = segment * segment_length;
  end = begin + segment_length < n ? begin + segment_length : n;
}

extern "C" __global__ void __launch_bounds__(256)
    scan_totals(const IN* __restrict__ x, ACC* __restrict__ totals, long long n, long long segments,
                long long segment_length) {
  long long line, segment, begin, end;
  segment_of(n, segments, segment_length, line, segment, begin, end);
  const IN* row = x + line * n;
  ACC acc = identity();
  for (long long k = begin + threadIdx.x; k < end; k += blockDim.x) acc = combine(acc, load(row[k]));
  __shared__ ACC warp_totals[8];
  for (int m = 16; m > 0; m /= 2) acc = combine(acc, __shfl_xor_sync(0xffffffffu, acc, m));
  if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    ACC total = identity();
    for (int w = 0; w < 8; ++w) total = combine(total, warp_totals[w]);
    totals[blockIdx.x] = total;
  }
}

extern "C" __global__ void __launch_bounds__(256)
    scan_segments(const IN* __restrict__ x, OUT* __restrict__ y, long long n, long long segments,
                  long long segment_length, const ACC* __restrict__ totals) {
  long long line, segment, begin, end;
  segment_of(n, segments, segment_length, line, segment, begin, end);
  const IN* row = x + line * n;
  OUT* out = y + line * n;
  __shared__ ACC buf[1024];
  __shared__ ACC warp_totals[8];
  __shared__ ACC start;
  if (threadIdx.x == 0) {  // the earlier segments' totals, in order
    ACC c = identity();
    if (totals != 0)
      for (long long s = 0; s < segment; ++s) c = combine(c, totals[line * segments + s]);
    start = c;
  }
  __syncthreads();
  ACC carry = start;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (long long chunk = begin; chunk < end; chunk += 1024) {
    for (int j = threadIdx.x; j < 1024; j += 256) buf[j] = chunk + j < end ? load(row[chunk + j]) : identity();
    __syncthreads();
    ACC local = identity();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      local = combine(local, buf[threadIdx.x * 4 + k]);
      buf[threadIdx.x * 4 + k] = local;
    }
    ACC inclusive = local;  // across the warp
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const ACC u = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive = combine(u, inclusive);
    }
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {  // across the block's warps
      ACC w = lane < 8 ? warp_totals[lane] : identity();
#pragma unroll
      for (int d = 1; d < 8; d *= 2) {
        const ACC u = __shfl_up_sync(0xffffffffu, w, d);
        if (lane >= d) w = combine(u, w);
      }
      if (lane < 8) warp_totals[lane] = w;
    }
    __syncthreads();
    ACC exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
    if (lane == 0) exclusive = identity();
    const ACC prefix = combine(carry, combine(warp > 0 ? warp_totals[warp - 1] : identity(), exclusive));
#pragma unroll
    for (int k = 0; k < 4; ++k) buf[threadIdx.x * 4 + k] = combine(prefix, buf[threadIdx.x * 4 + k]);
    __syncthreads();
    for (int j = threadIdx.x; j < 1024; j += 256)
      if (chunk + j < end) out[chunk + j] = kd::cast<OUT>(buf[j]);
    carry = combine(carry, warp_totals[7]);
    __syncthreads();
  }
}
