// sort/argsort kernels (src/cuda/sort.cpp tells the design and launches them). After the prelude, sort_source()
// defines T (the element type) and the macros KILN_SORT_FLOAT and KILN_SORT_SIGNED in front of this file.
typedef unsigned long long u64;
__device__ __forceinline__ u64 key_of(T x) {
#if KILN_SORT_FLOAT
  double v = (double)kd::widen(x);
  if (v != v) return 0xffffffffffffffffull;  // NaN last, all NaNs equal (their order is kept)
  if (v == 0.0) v = 0.0;                     // -0.0 == +0.0, as NumPy compares them
  const u64 b = (u64)__double_as_longlong(v);
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
#elif KILN_SORT_SIGNED
  return (u64)(long long)x ^ 0x8000000000000000ull;
#else
  return (u64)x;
#endif
}
__device__ __forceinline__ bool before(u64 ka, int ia, u64 kb, int ib) { return ka < kb || (ka == kb && ia < ib); }

extern "C" __global__ void __launch_bounds__(512)
    sort_block(const T* __restrict__ in, u64* __restrict__ keys, int* __restrict__ idx, long long n, long long chunks) {
  __shared__ u64 sk[2048];
  __shared__ int si[2048];
  const long long row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const long long begin = chunk * 2048;
  const int len = (int)(n - begin < 2048 ? n - begin : 2048);
  int size = 1;
  while (size < len) size <<= 1;
  const T* rin = in + row * n + begin;
  for (int i = threadIdx.x; i < size; i += blockDim.x) {
    if (i < len) {
      sk[i] = key_of(rin[i]);
      si[i] = (int)begin + i;
    } else {
      sk[i] = 0xffffffffffffffffull;  // padding sorts after everything (its index is larger than any real one)
      si[i] = 0x7fffffff;
    }
  }
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += blockDim.x) {
        const int p = i ^ j;
        if (p > i) {
          const bool ascending = (i & k) == 0;
          const bool swap = ascending ? before(sk[p], si[p], sk[i], si[i]) : before(sk[i], si[i], sk[p], si[p]);
          if (swap) {
            const u64 tk = sk[i];
            sk[i] = sk[p];
            sk[p] = tk;
            const int ti = si[i];
            si[i] = si[p];
            si[p] = ti;
          }
        }
      }
      __syncthreads();
    }
  }
  u64* rk = keys + row * n + begin;
  int* ri = idx + row * n + begin;
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    rk[i] = sk[i];
    ri[i] = si[i];
  }
}

extern "C" __global__ void __launch_bounds__(512)
    sort_merge(const u64* __restrict__ keys, const int* __restrict__ idx, u64* __restrict__ keys_out,
               int* __restrict__ idx_out, long long n, long long width, long long total) {
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {
    const long long row = t / n, j = t % n;
    const long long start = j / (2 * width) * (2 * width);
    const long long mid = start + width < n ? start + width : n;
    const long long end = start + 2 * width < n ? start + 2 * width : n;
    const bool first = j < mid;
    const long long other_begin = first ? mid : start, other_end = first ? end : mid;
    const u64* rk = keys + row * n;
    const int* ri = idx + row * n;
    const u64 k = rk[j];
    const int i = ri[j];
    long long lo = other_begin, hi = other_end;  // elements of the other run that come before (k, i)
    while (lo < hi) {
      const long long m = (lo + hi) >> 1;
      if (before(rk[m], ri[m], k, i))
        lo = m + 1;
      else
        hi = m;
    }
    const long long pos = start + (j - (first ? start : mid)) + (lo - other_begin);
    keys_out[row * n + pos] = k;
    idx_out[row * n + pos] = i;
  }
}

extern "C" __global__ void __launch_bounds__(512)
    sort_gather(const T* __restrict__ in, const int* __restrict__ idx, T* __restrict__ values,
                long long* __restrict__ indices, long long n, long long total) {
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {
    const long long row = t / n;
    const int i = idx[t];
    if (values) values[t] = in[row * n + i];
    if (indices) indices[t] = i;
  }
}
