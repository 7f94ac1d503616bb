// Helpers every user ElementwiseKernel/ReductionKernel gets after the prelude (src/cuda/codegen_user.cpp):
// kd::raw_array (a raw parameter) and float views of 16-bit elements.
namespace kd {
// A float16/bfloat16 array element seen as a float: reads widen, writes round to nearest even.
template <class H>
struct ref16 {
  H* p;
  __device__ __forceinline__ operator float() const { return widen(*p); }
  __device__ __forceinline__ ref16& operator=(float v) {
    *p = cast<H>(v);
    return *this;
  }
  __device__ __forceinline__ ref16& operator=(const ref16& o) { return *this = (float)o; }
  __device__ __forceinline__ ref16& operator+=(float v) { return *this = (float)*this + v; }
  __device__ __forceinline__ ref16& operator-=(float v) { return *this = (float)*this - v; }
  __device__ __forceinline__ ref16& operator*=(float v) { return *this = (float)*this * v; }
  __device__ __forceinline__ ref16& operator/=(float v) { return *this = (float)*this / v; }
};
template <class S>
struct elem {
  typedef S& ref;
  static __device__ __forceinline__ S& at(S* p) { return *p; }
};
template <>
struct elem<half_t> {
  typedef ref16<half_t> ref;
  static __device__ __forceinline__ ref at(half_t* p) {
    ref r;
    r.p = p;
    return r;
  }
};
template <>
struct elem<bf16_t> {
  typedef ref16<bf16_t> ref;
  static __device__ __forceinline__ ref at(bf16_t* p) {
    ref r;
    r.p = p;
    return r;
  }
};
// A raw parameter: the whole array; a[j] is flat element j in C order, whatever the strides.
template <class S, int ND, bool CONTIGUOUS>
struct raw_array {
  S* data_;
  long long size_;
  long long shape_[ND > 0 ? ND : 1];
  long long strides_[ND > 0 ? ND : 1];
  __device__ __forceinline__ long long size() const { return size_; }
  __device__ __forceinline__ const long long* shape() const { return shape_; }
  __device__ __forceinline__ const long long* strides() const { return strides_; }
  __device__ __forceinline__ typename elem<S>::ref operator[](long long j) const {
    if constexpr (CONTIGUOUS || ND == 0) {
      return elem<S>::at(data_ + j);
    } else {
      long long off = 0;
#pragma unroll
      for (int d = ND - 1; d >= 1; --d) {
        const long long q = j / shape_[d];
        off += (j - q * shape_[d]) * strides_[d];
        j = q;
      }
      return elem<S>::at(data_ + off + j * strides_[0]);
    }
  }
};
}  // namespace kd
