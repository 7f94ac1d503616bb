// CPU Fourier transforms with FFTW 3 (Debian's libfftw3-dev: fftw3 for double, fftw3f for float). One guru64 plan
// describes a whole call: the transformed axes as its dims and every other axis as a loop dimension, each with the
// arrays' own strides, so strided and transposed inputs run without a copy. FFTW's planner is not thread-safe
// (its execute is): plans are made and destroyed under one lock, with FFTW_ESTIMATE (no timing runs, arrays left
// untouched), and cached per (kind, precision, direction, dims, loops, alignment); a cached plan runs on new arrays
// through the new-array execute functions, which need the same strides and alignment as the planned ones. Large
// complex transforms over several axes, and large transforms over one strided axis, run axis by axis over
// contiguous rows of copies (run_by_rows).
#include "cpu/fft.hpp"

#include <string>

#include "kiln/error.hpp"
#include "kiln/ops.hpp"

#ifdef KILN_HAVE_FFTW
#include <fftw3.h>

#include <complex>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>
#endif

namespace kiln::cpu_impl {

#ifndef KILN_HAVE_FFTW

bool cpu_fft(const detail::FftCall& /*call*/) {
  throw Error(
      "fft: this kiln was built without FFTW, which runs Fourier transforms on the CPU; install it "
      "(apt-get install libfftw3-dev) and rebuild kiln");
}

#else

namespace {

using detail::FftCall;
using detail::FftKind;

/// The FFTW 3 API of one precision.
template <class Real>
struct Fftw;
template <>
struct Fftw<double> {
  using plan = fftw_plan;
  using complex = fftw_complex;
  static constexpr auto dft = fftw_plan_guru64_dft;
  static constexpr auto r2c = fftw_plan_guru64_dft_r2c;
  static constexpr auto c2r = fftw_plan_guru64_dft_c2r;
  static constexpr auto execute_dft = fftw_execute_dft;
  static constexpr auto execute_r2c = fftw_execute_dft_r2c;
  static constexpr auto execute_c2r = fftw_execute_dft_c2r;
  static constexpr auto destroy = fftw_destroy_plan;
  static int alignment(void* p) { return fftw_alignment_of(static_cast<double*>(p)); }
};
template <>
struct Fftw<float> {
  using plan = fftwf_plan;
  using complex = fftwf_complex;
  static constexpr auto dft = fftwf_plan_guru64_dft;
  static constexpr auto r2c = fftwf_plan_guru64_dft_r2c;
  static constexpr auto c2r = fftwf_plan_guru64_dft_c2r;
  static constexpr auto execute_dft = fftwf_execute_dft;
  static constexpr auto execute_r2c = fftwf_execute_dft_r2c;
  static constexpr auto execute_c2r = fftwf_execute_dft_c2r;
  static constexpr auto destroy = fftwf_destroy_plan;
  static int alignment(void* p) { return fftwf_alignment_of(static_cast<float*>(p)); }
};

/// The one lock of FFTW's planner: plan creation and destruction, and the cache.
std::mutex& planner_mutex() {
  static std::mutex m;
  return m;
}

/// A plan of either precision, destroyed (under the planner's lock) when its last user lets go.
struct Plan {
  void* plan = nullptr;
  bool single = false;
  Plan(void* p, bool s) : plan(p), single(s) {}
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    std::lock_guard<std::mutex> lock(planner_mutex());
    if (single)
      Fftw<float>::destroy(static_cast<fftwf_plan>(plan));
    else
      Fftw<double>::destroy(static_cast<fftw_plan>(plan));
  }
};

/// Plans kept; past this many the cache starts again (the plans in use live on through their shared_ptr).
constexpr size_t kMaxCachedPlans = 256;

std::map<std::vector<int64_t>, std::shared_ptr<Plan> >& plan_cache() {
  static auto* cache = new std::map<std::vector<int64_t>, std::shared_ptr<Plan> >();  // outlives static plans' users
  return *cache;
}

template <class Real>
std::shared_ptr<Plan> plan_for(const FftCall& call) {
  using F = Fftw<Real>;
  const Array& in = *call.in;
  const Array& out = call.out;
  // Dims: the transformed axes (the logical length n: out's for c2r, in's otherwise); loops: every other axis
  // longer than 1, with out's extent (equal to in's there).
  std::vector<fftw_iodim64> dims, loops;
  std::vector<bool> transformed(static_cast<size_t>(out.ndim()), false);
  for (int64_t axis : call.axes) {
    transformed[static_cast<size_t>(axis)] = true;
    const int64_t n = call.kind == FftKind::C2R ? out.shape(axis) : in.shape(axis);
    dims.push_back({n, in.strides()[static_cast<size_t>(axis)], out.strides()[static_cast<size_t>(axis)]});
  }
  for (int64_t axis = 0; axis < out.ndim(); ++axis)
    if (!transformed[static_cast<size_t>(axis)] && out.shape(axis) > 1)
      loops.push_back(
          {out.shape(axis), in.strides()[static_cast<size_t>(axis)], out.strides()[static_cast<size_t>(axis)]});

  std::vector<int64_t> key = {
      static_cast<int64_t>(call.kind), std::is_same_v<Real, float>,  call.forward,
      F::alignment(in.data_ptr()),     F::alignment(out.data_ptr()), static_cast<int64_t>(dims.size())};
  for (const auto* list : {&dims, &loops})
    for (const fftw_iodim64& d : *list) key.insert(key.end(), {d.n, d.is, d.os});

  std::vector<std::shared_ptr<Plan> > evicted;  // destroyed after the lock is released (~Plan takes it)
  std::lock_guard<std::mutex> lock(planner_mutex());
  auto& cache = plan_cache();
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= kMaxCachedPlans) {
    for (auto& entry : cache) evicted.push_back(std::move(entry.second));
    cache.clear();
  }
  const int rank = static_cast<int>(dims.size());
  const int loop_rank = static_cast<int>(loops.size());
  void* plan = nullptr;
  if (call.kind == FftKind::C2C) {
    plan = F::dft(rank, dims.data(), loop_rank, loops.data(), static_cast<typename F::complex*>(in.data_ptr()),
                  static_cast<typename F::complex*>(out.data_ptr()), call.forward ? FFTW_FORWARD : FFTW_BACKWARD,
                  FFTW_ESTIMATE | FFTW_PRESERVE_INPUT);
  } else if (call.kind == FftKind::R2C) {
    plan = F::r2c(rank, dims.data(), loop_rank, loops.data(), static_cast<Real*>(in.data_ptr()),
                  static_cast<typename F::complex*>(out.data_ptr()), FFTW_ESTIMATE | FFTW_PRESERVE_INPUT);
  } else {
    plan = F::c2r(rank, dims.data(), loop_rank, loops.data(), static_cast<typename F::complex*>(in.data_ptr()),
                  static_cast<Real*>(out.data_ptr()), FFTW_ESTIMATE | FFTW_DESTROY_INPUT);
  }
  if (!plan) return nullptr;  // FFTW has no plan for this layout: the core's canonical one follows
  auto entry = std::make_shared<Plan>(plan, std::is_same_v<Real, float>);
  cache.emplace(std::move(key), entry);
  return entry;
}

template <class Real>
bool run(const FftCall& call) {
  using F = Fftw<Real>;
  const std::shared_ptr<Plan> plan = plan_for<Real>(call);
  if (!plan) return false;
  auto p = static_cast<typename F::plan>(plan->plan);
  void* in = call.in->data_ptr();
  void* out = call.out.data_ptr();
  if (call.kind == FftKind::C2C)
    F::execute_dft(p, static_cast<typename F::complex*>(in), static_cast<typename F::complex*>(out));
  else if (call.kind == FftKind::R2C)
    F::execute_r2c(p, static_cast<Real*>(in), static_cast<typename F::complex*>(out));
  else
    F::execute_c2r(p, static_cast<typename F::complex*>(in), static_cast<Real*>(out));
  return true;
}

/// Whether a transform runs as rows of copies (run_by_rows): a complex one over several axes, or any over one axis
/// whose elements are not adjacent, of an array large enough for the copies to pay.
bool by_rows(const FftCall& call) {
  if (call.out.size() < (int64_t{1} << 16)) return false;
  if (call.axes.size() > 1) return call.kind == FftKind::C2C;
  const size_t axis = static_cast<size_t>(call.axes[0]);
  return call.in->strides()[axis] != 1 || call.out.strides()[axis] != 1;
}

/// A transform axis by axis (real-to-complex and complex-to-real have one), each as rows of a copy in which that
/// axis is the last, contiguous one, and the result copied into out once. FFTW_ESTIMATE plans transforms over
/// far-apart elements poorly (1024 x 1024 complex64 on one core: the columns 23 ms, the rows 1.7 ms, the 2-d plan
/// 26 ms; FFTW_MEASURE finds a 6.5 ms plan after 470 ms of timing runs); kiln's copies move the data at memory
/// speed on every core.
template <class Real>
bool run_by_rows(const FftCall& call) {
  const int64_t last = call.out.ndim() - 1;
  Array current = *call.in;
  for (int64_t axis : call.axes) {
    const Array rows = moveaxis(current, axis, last).contiguous();
    Array result = empty(moveaxis(call.out, axis, last).shape(), call.out.dtype(), call.out.device());
    if (!run<Real>(FftCall{call.kind, call.forward, &rows, result, {last}})) return false;
    current = moveaxis(result, last, axis);
  }
  Array out = call.out;
  out.assign(current);
  return true;
}

}  // namespace

bool cpu_fft(const FftCall& call) {
  const DType real = call.kind == FftKind::C2R ? call.out.dtype() : real_dtype(call.in->dtype());
  if (by_rows(call)) return real == DType::Float32 ? run_by_rows<float>(call) : run_by_rows<double>(call);
  return real == DType::Float32 ? run<float>(call) : run<double>(call);
}

#endif

}  // namespace kiln::cpu_impl
