// Register segments of the CPU fused executor (Segment in fused_program.hpp, cut by fused_plan.cpp): on a CPU
// running the AVX-512 libmvec rows, a run of float32 steps each reading the value before it is evaluated on
// vectors of 16 lanes, eight vectors at a time, each lane rounded as the step's kernel rounds it (one IEEE
// operation, or the op's libmvec routine); only the run's last value is stored, into its buffer or straight into
// an output. fused.cpp calls evaluate_segment once per segment and block. Empty without KILN_VECTOR_MATH
// (cpu/vector_math.hpp: AVX2 builds with libmvec); the AVX-512 code carries target attributes and runs only
// where plan_segments made segments (a CPU with AVX-512F).
#include <algorithm>
#include <cstring>
#include <iterator>

#include "cpu/fused_program.hpp"

#ifdef KILN_VECTOR_MATH
namespace kiln::cpu_impl::fused {

namespace {

/// One input of a segment's step over the block: contiguous (mask all ones: element i at ptr + i), or 16 copies
/// of one value (mask 0).
struct LaneInput {
  const float* ptr;
  int64_t mask;
};

/// A segment's step over one block.
struct LaneStep {
  LaneOp op;
  bool chain[2];
  LaneInput in[2];
  __m512 (*routine)(__m512);
};

/// Input `k` of step `s` at vector j of the K from element i (masked: the lanes of `mask`, the others zero).
template <bool Masked>
__attribute__((target("avx512f"), always_inline)) inline __m512 lane_load(const LaneStep& s, int k, int64_t i,
                                                                           int j, __mmask16 mask) {
  const float* at = s.in[k].ptr + ((i + 16 * j) & s.in[k].mask);
  return Masked ? _mm512_maskz_loadu_ps(mask, at) : _mm512_loadu_ps(at);
}

// The binary lane ops: one IEEE operation each, as the scalar kernels round.
struct LaneAdd {
  __attribute__((target("avx512f"), always_inline)) __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_add_ps(a, b);
  }
};
struct LaneSubtract {
  __attribute__((target("avx512f"), always_inline)) __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_sub_ps(a, b);
  }
};
struct LaneMultiply {
  __attribute__((target("avx512f"), always_inline)) __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_mul_ps(a, b);
  }
};
struct LaneDivide {
  __attribute__((target("avx512f"), always_inline)) __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_div_ps(a, b);
  }
};

/// v[j] = op(a, b) over the K vectors, a and b the previous values v or loads. Every loop over the K vectors is
/// unrolled in full, so the vectors stay in registers between steps (only a libmvec call spills them).
template <int K, bool Masked, class Op>
__attribute__((target("avx512f"), always_inline)) inline void lane_binary(const LaneStep& s, int64_t i,
                                                                           __mmask16 mask, __m512* v, Op op) {
  if (s.chain[0] && s.chain[1]) {
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) v[j] = op(v[j], v[j]);
  } else if (s.chain[0]) {
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) v[j] = op(v[j], lane_load<Masked>(s, 1, i, j, mask));
  } else if (s.chain[1]) {
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) v[j] = op(lane_load<Masked>(s, 0, i, j, mask), v[j]);
  } else {
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) v[j] = op(lane_load<Masked>(s, 0, i, j, mask), lane_load<Masked>(s, 1, i, j, mask));
  }
}

/// The segment's last value over K vectors from element i, each step applied to all K before the next (its
/// dispatch paid once per K vectors). Masked: K is 1, the lanes of `mask`, the others computed on zeros.
template <int K, bool Masked>
__attribute__((target("avx512f"), always_inline)) inline void lane_chunk(const LaneStep* steps, int count,
                                                                          int64_t i, __mmask16 mask, __m512* v) {
  for (int k = 0; k < count; ++k) {
    const LaneStep& s = steps[k];
    switch (s.op) {
      case LaneOp::Routine:
        if (!s.chain[0]) {
#pragma GCC unroll 16
          for (int j = 0; j < K; ++j) v[j] = lane_load<Masked>(s, 0, i, j, mask);
        }
#pragma GCC unroll 16
        for (int j = 0; j < K; ++j) v[j] = s.routine(v[j]);
        break;
      case LaneOp::Negative: {
        const __m512i sign = _mm512_set1_epi32(INT32_MIN);
        if (!s.chain[0]) {
#pragma GCC unroll 16
          for (int j = 0; j < K; ++j) v[j] = lane_load<Masked>(s, 0, i, j, mask);
        }
#pragma GCC unroll 16
        for (int j = 0; j < K; ++j) v[j] = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v[j]), sign));
        break;
      }
      case LaneOp::Add:
        lane_binary<K, Masked>(s, i, mask, v, LaneAdd{});
        break;
      case LaneOp::Subtract:
        lane_binary<K, Masked>(s, i, mask, v, LaneSubtract{});
        break;
      case LaneOp::Multiply:
        lane_binary<K, Masked>(s, i, mask, v, LaneMultiply{});
        break;
      case LaneOp::Divide:
        lane_binary<K, Masked>(s, i, mask, v, LaneDivide{});
        break;
    }
  }
}

constexpr int kLaneChunk = 8;  ///< vectors a segment's step is applied to at a time

/// dst[0, n) = the segment's last value; non-temporal stores when `stream` (dst 64-byte aligned). The next
/// block's input lines are asked for as the chunks go (PendingPrefetch).
__attribute__((target("avx512f"))) void run_lanes(const LaneStep* steps, int count, float* dst, bool stream,
                                                  int64_t n, PendingPrefetch& q) {
  int64_t i = 0;
  __m512 v[kLaneChunk] = {};
  for (; i + 16 * kLaneChunk <= n; i += 16 * kLaneChunk) {
    lane_chunk<kLaneChunk, false>(steps, count, i, 0xFFFF, v);
    for (int j = 0; j < kLaneChunk; ++j) {
      if (stream)
        _mm512_stream_ps(dst + i + 16 * j, v[j]);
      else
        _mm512_storeu_ps(dst + i + 16 * j, v[j]);
    }
    prefetch_lines(q, kLaneChunk);
  }
  for (; i + 16 <= n; i += 16) {
    lane_chunk<1, false>(steps, count, i, 0xFFFF, v);
    if (stream)
      _mm512_stream_ps(dst + i, v[0]);
    else
      _mm512_storeu_ps(dst + i, v[0]);
  }
  if (i < n) {  // the other lanes compute on zeros, as the libmvec rows' own tails do
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    lane_chunk<1, true>(steps, count, i, mask, v);
    _mm512_mask_storeu_ps(dst + i, mask, v[0]);
  }
}

}  // namespace

bool evaluate_segment(const Program& p, const Segment& seg, char* const* ptrs, const int64_t* steps, int64_t n,
                      char* scratch, Value* values, PendingPrefetch& queue) {
  LaneStep lanes[kMaxSegment];
  alignas(64) float fills[kMaxSegment][2][16];
  for (int i = 0; i < seg.count; ++i) {
    const Step& s = p.steps[static_cast<size_t>(p.all[static_cast<size_t>(seg.first + i)])];
    LaneStep& lane = lanes[i];
    lane.op = seg.ops[i];
    lane.routine = seg.routines[i];
    lane.chain[0] = lane.chain[1] = false;
    for (int k = 0; k < s.num_inputs; ++k) {
      lane.chain[k] = seg.chain[i][k];
      if (lane.chain[k]) continue;
      if (s.slots[k] >= 0) {
        lane.in[k] = {seg.slots[i][k], 0};
        continue;
      }
      const Value& in = values[s.inputs[k]];
      if (in.step == 1) {
        lane.in[k] = {reinterpret_cast<const float*>(in.ptr), -1};
      } else if (in.step == 0) {
        float value;
        std::memcpy(&value, in.ptr, sizeof value);
        std::fill(std::begin(fills[i][k]), std::end(fills[i][k]), value);
        lane.in[k] = {fills[i][k], 0};
      } else {
        return false;
      }
    }
  }
  const Step& last = p.steps[static_cast<size_t>(p.all[static_cast<size_t>(seg.first + seg.count - 1)])];
  if (last.output >= 0 && steps[last.output] != 1) return false;
  float* dst = reinterpret_cast<float*>(scratch + last.buffer);
  bool stream = false;
  if (seg.output >= 0 && steps[seg.output] == 1) {
    char* out = ptrs[seg.output];
    const bool aligned = (reinterpret_cast<uintptr_t>(out) & 63) == 0;
    if (!p.stream || aligned) {
      dst = reinterpret_cast<float*>(out);
      stream = p.stream;
    }
  }
  run_lanes(lanes, seg.count, dst, stream, n, queue);
  values[last.node] = {reinterpret_cast<char*>(dst), 1};
  return true;
}

}  // namespace kiln::cpu_impl::fused
#endif  // KILN_VECTOR_MATH
