// The backend interface (internal). Every device type — the CPU included —
// implements this one small interface: execution of op descriptions (elementwise,
// reduce, matmul, random). Memory, copies, streams and events are the device's
// runtime (core/device_runtime.hpp). The core does all the checking, broadcasting
// and type promotion before it calls a backend, so a backend only computes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/array.hpp"
#include "kiln/random.hpp"
#include "kiln/rnn.hpp"
#include "core/iteration.hpp"
#include "core/op_table.hpp"

namespace kiln::detail {

class RawKernelBackend;      // core/raw_kernel_backend.hpp
struct UserElementwiseCall;  // core/user_kernel.hpp
struct UserReductionCall;    // core/user_kernel.hpp
struct FusionCall;           // core/fusion.hpp
struct MultiTensorCall;      // core/multi_tensor.hpp

/// Array operands of a built-in elementwise op, the output included.
inline constexpr int kMaxElementwiseOperands = 4;

/// One operand of an elementwise call: an array already broadcast to the output's
/// shape (stride 0 on broadcast axes), or a scalar already converted to the call's
/// compute dtype semantics (its value is exact in Scalar's int64/double).
struct ElementwiseArg {
  const Array* array = nullptr;
  Scalar scalar;
  bool is_scalar() const { return array == nullptr; }
};

/// out[i] = op(in0[i], in1[i], in2[i]) computed in `compute`; inputs are converted
/// from their own dtype to `compute` and the result to out's dtype. For nullary ops
/// (Fill, Arange, Linspace) the values come from `params`.
struct ElementwiseCall {
  OpCode op;
  int num_inputs = 0;
  std::array<ElementwiseArg, 3> inputs;
  Array out;
  DType compute = DType::Float32;
  std::array<Scalar, 4> params;
  /// The iteration over the array operands (out, then the array inputs in order; scalars are not operands),
  /// filled by the core (plan_call); not filled for the sequence ops (Arange, Linspace: out is contiguous).
  ElementwiseIteration<kMaxElementwiseOperands> plan;
};

/// Fills call.plan from call.out and the call's array inputs; throws ShapeError naming `op` (default: the op
/// table's name of call.op) past kMaxRank.
void plan_call(ElementwiseCall& call, const char* op = nullptr);

/// Reduces `in` over `axes` (sorted, non-negative, at least one) into `out`, whose shape is
/// in's shape with the reduced axes set to 1 (keepdims form) and whose dtype the core chose
/// (NumPy's rules); the backend picks its accumulator (float64 for float sums on the CPU).
struct ReduceCall {
  ReduceOp op;
  const Array* in = nullptr;
  Array out;
  Shape axes;
  /// The iteration over (in, out): negative input strides flipped (on reduced axes only for ops without an
  /// index result), kept and reduced axes each sorted by input stride and merged; filled by the core.
  ReductionIteration<2> plan;
};

/// Fills call.plan from call.in, call.out and call.axes; throws ShapeError naming the op past kMaxRank.
void plan_reduce_call(ReduceCall& call);

/// Dense solvers on the device (linalg::solve and lstsq). Every matrix is float64, C-contiguous, 2-d, on the
/// backend's device; the work is ordered on the device's current stream.
/// solve: x (n, k) with a (n, n) @ x = b (n, k), by LU with partial pivoting.
struct SolveCall {
  const Array* a = nullptr;
  const Array* b = nullptr;
  Array x;  ///< (n, k), allocated by the core, written by the backend
};
/// svd: a (m, n) = u (m, r) @ diag(s (r,)) @ vt (r, n), r = min(m, n), s descending.
struct SvdCall {
  const Array* a = nullptr;
  Array u, s, vt;  ///< allocated by the core, written by the backend
};

/// A factorisation of linalg on the device (linalg_factor.cpp), matrix by matrix over a batch: `a` is float64,
/// C-contiguous, (batch, m, n), every extent > 0; the outputs are allocated by the core (float64, C-contiguous,
/// batch first, kiln's row-major matrices) and written by the backend; `infos` gets LAPACK's info per matrix
/// (> 0: singular, not positive-definite, no convergence), read with one synchronisation.
///   Inverse  (n, n):  outputs {inv (n, n)}
///   Cholesky (n, n):  outputs {factor (n, n)}: lower (upper when `upper`), read from that triangle of a
///   Qr       (m, n):  outputs {Q (m, q), R (r, n)}, q = r = min(m, n), or m when `complete`; Q undefined:
///                     R only
///   Svd      (m, n):  outputs {S (k)} or {S (k), U (m, u), Vh (v, n)}, k = min(m, n); u = v = k, or m and n
///                     when `complete`
///   Eigh     (n, n):  outputs {w (n)} or {w (n), V (n, n)}, reading a's upper triangle when `upper`
enum class FactorOp { Inverse, Cholesky, Qr, Svd, Eigh };
struct FactorCall {
  FactorOp op = FactorOp::Inverse;
  const Array* a = nullptr;
  std::vector<Array> outputs;
  bool upper = false;
  bool complete = false;
  std::vector<int> infos;  ///< one per matrix, filled by the backend
};

/// sort/argsort of every row of a C-contiguous 2-d `in` (rows, n) on the device, stable, NaN last (NumPy's
/// kind="stable"): `indices` (int64, (rows, n)) gets each row's argsort and `values` (when defined) the sorted
/// values. Both are allocated by the core.
struct SortCall {
  const Array* in = nullptr;
  Array indices, values;
};

/// An inclusive scan (op: ReduceOp::CumSum or CumProd) along axis 1 of a C-contiguous 3-d `in` (outer, n,
/// inner) into `out` of the same shape (C-contiguous, allocated by the core): int64 for bool and integer
/// inputs (wrapping, as NumPy), else in's dtype. Every backend accumulates in int64 or float64 and rounds each
/// element once.
struct ScanCall {
  ReduceOp op = ReduceOp::CumSum;
  const Array* in = nullptr;
  Array out;
};

/// An unnormalised discrete Fourier transform (kiln::fft) of `in` into `out` along `axes` (distinct, in [0, ndim),
/// in the order given), exp(-2 pi i jk/n) when `forward`, exp(+2 pi i jk/n) otherwise; the core scales afterwards.
///   C2C: in and out of one complex dtype and one shape; every axis of `axes` transformed.
///   R2C: in real (float32/float64), out of its complex type, one axis of length n in `in` and n/2 + 1 in `out`.
///   C2R: in complex, out of its real type, one axis of length n/2 + 1 in `in` and n in `out`. `in` is the core's
///        scratch copy: the backend may overwrite it (FFTW's and cuFFT's c2r do).
/// `in` may have any non-negative strides; `out` is C-contiguous, allocated by the core, and no array is empty.
/// A backend returns false when it cannot take this layout: the core then passes C-contiguous operands with the
/// transformed axes last, at most three of them, which every FFT backend takes.
enum class FftKind { C2C, R2C, C2R };
struct FftCall {
  FftKind kind = FftKind::C2C;
  bool forward = true;
  const Array* in = nullptr;
  Array out;
  std::vector<int64_t> axes;
};

/// out[b] = a[b] @ b[b] for 3-d operands (batch, m, k) x (batch, k, n) -> (batch, m, n), all of one
/// dtype. Batch strides may be 0 (broadcast). a and b may be transposed within each matrix
/// (either the last or the second-to-last stride is 1); out is C-contiguous.
/// With `bias` (addmm: a contiguous 1-d array of n elements of the same floating dtype, batch 1) the backend
/// folds it into the product, out = a @ b + bias on every row with the sum rounded once (cuBLASLt's bias
/// epilogue; the CPU adds it to its float accumulator), and sets `bias_added`; a backend that cannot fold it
/// computes nothing and leaves it false (the core then computes the same sum its own way).
/// With `bias` and `pre_gelu` (addmm_gelu: a contiguous array of out's shape and dtype) the backend also applies
/// GELU's tanh form to that sum before the one rounding, out = gelu_tanh(a @ b + bias), and stores the sum itself
/// (rounded) into *pre_gelu (cuBLASLt's GELU_AUX_BIAS epilogue) and sets `gelu_applied`; or it only folds the
/// bias (the core then applies the GELU), or computes nothing.
struct MatmulCall {
  const Array* a = nullptr;
  const Array* b = nullptr;
  Array out;
  const Array* bias = nullptr;
  Array* pre_gelu = nullptr;
  mutable bool bias_added = false;  ///< set by the backend (matmul takes the call as const)
  mutable bool gelu_applied = false;
  /// Without bias: out = (a @ b) * gelu_tanh'(*gelu_grad_of), the product multiplied before its one rounding
  /// (cuBLASLt's DGELU epilogue: gelu_tanh's gradient folded into the product that makes the gradient it
  /// multiplies; kiln::compile's fusion pass asks for it where Backend::folds_gelu_grad says yes). *gelu_grad_of
  /// is the forward's pre-activation as GELU_AUX_BIAS stored it: out's shape, dtype and layout. The backend sets
  /// `gelu_grad_applied`; one that cannot fold it computes nothing.
  const Array* gelu_grad_of = nullptr;
  mutable bool gelu_grad_applied = false;
};

/// A 2-d convolution step on operands of one floating dtype, each NCHW-contiguous or channels-last (all in one
/// of the two layouts; the core lays them out). Forward: out = conv(x, w). BackwardInput: out (x's shape) =
/// the input's gradient from dy and w. BackwardWeight: out (w's shape) = the weight's gradient from dy and x.
/// `out` is allocated by the core in the operands' layout. A backend that cannot run it returns false (the core
/// then runs its reference).
enum class ConvKind { Forward, BackwardInput, BackwardWeight };
struct ConvCall {
  ConvKind kind = ConvKind::Forward;
  const Array* x = nullptr;   ///< Forward, BackwardWeight
  const Array* w = nullptr;   ///< Forward, BackwardInput
  const Array* dy = nullptr;  ///< BackwardInput, BackwardWeight
  Array out;
  int64_t stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  int64_t groups = 1;
  bool channels_last = false;  ///< every operand (the filter too) in NHWC memory, else NCHW
};

/// 2-d pooling of x (N, C, H, W) (NCHW-contiguous or channels-last, every operand in that layout): max or
/// average (padding counted, count_include_pad) forward into `out` (y), or backward: the input's gradient into
/// `out` from dy and, for max, the forward's x and y. A backend that cannot run it returns false.
enum class PoolKind { MaxForward, MaxBackward, AvgForward, AvgBackward };
struct PoolCall {
  PoolKind kind = PoolKind::MaxForward;
  const Array* x = nullptr;   ///< forwards, MaxBackward
  const Array* y = nullptr;   ///< MaxBackward
  const Array* dy = nullptr;  ///< backwards
  Array out;
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  bool channels_last = false;
};

/// Batch normalisation of x (N, C, H, W) (NCHW-contiguous or channels-last; y and dx in x's layout), all per-channel
/// operands (C,) contiguous in the statistics dtype (float32 for float16/bfloat16 x, else x's), weight and bias
/// defined (the core fills 1 and 0). Forward training: y, mean, invstd from the batch, and the running statistics
/// (when defined) updated in place. Forward evaluation: y from the running statistics. Backward: dx, dweight,
/// dbias from dy and the saved mean and invstd. A backend that cannot run it returns false.
/// relu (Training, Evaluation): y = max(batch norm, 0); a backend that applies it sets relu_done (else the core
/// applies it to y), and a training forward that does writes its per-channel (scale, shift) into scale_shift
/// (2C, the statistics dtype) when that is defined. relu (Backward): dy is the gradient of that ReLU's result,
/// zero where x * scale + shift (from scale_shift, as the forward computed it) was not positive; a backend that
/// cannot mask returns false.
enum class BatchNormKind { Training, Evaluation, Backward };
struct BatchNormCall {
  BatchNormKind kind = BatchNormKind::Training;
  const Array* x = nullptr;
  const Array* weight = nullptr;
  const Array* bias = nullptr;
  const Array* running_mean = nullptr;  ///< may be undefined in training
  const Array* running_var = nullptr;
  const Array* dy = nullptr;  ///< Backward
  double momentum = 0.1, eps = 1e-5;
  bool channels_last = false;  ///< x, dy, y and dx in NHWC memory, else NCHW
  bool relu = false;
  bool relu_done = false;    ///< set by a backend that applied relu
  Array scale_shift;         ///< see relu
  Array y, mean, invstd;     ///< Training (Evaluation: y only); mean and invstd are inputs of Backward
  Array dx, dweight, dbias;  ///< Backward
};

/// Cross entropy of C-contiguous (N, C) `logits` (float32, or float16/bfloat16 widened: every value computed in
/// float32) against contiguous int64 `labels` (N,), each in [0, C), with label smoothing `ls` in [0, 1]
/// (kiln/cross_entropy.hpp). Forward: per row lse = log(sum(exp(x))) (max-shifted) and loss = lse - (1 - ls) *
/// x[label] - ls * mean(x), into `loss` and `lse` (N,) float32 contiguous (allocated by the core). Backward: `dx`
/// (the logits' shape and dtype, contiguous, allocated by the core) = (exp(x - lse) - (1 - ls) * onehot(label) -
/// ls / C) * grad, from the forward's `lse` and `grad` (N,) float32 (any stride: 0 for a broadcast gradient).
/// A backend without such kernels returns false (the caller then runs its fused graph).
enum class CrossEntropyKind { Forward, Backward };
struct CrossEntropyCall {
  CrossEntropyKind kind = CrossEntropyKind::Forward;
  const Array* logits = nullptr;
  const Array* labels = nullptr;
  const Array* grad = nullptr;  ///< Backward
  double ls = 0.0;
  Array loss;  ///< Forward
  Array lse;   ///< Forward writes it, Backward reads it
  Array dx;    ///< Backward
};

/// The gradients of a layer norm over the rows of x (M, D) (kiln::layer_norm_backward) from dy (M, D), the
/// weight (D,) (undefined: 1) and each row's mean and rstd (M, 1). dx (M, D), dweight and dbias (D,) are allocated
/// by the core when wanted, else undefined. A backend without a kernel for the problem returns false (the core's
/// composed reference runs).
struct LayerNormBackwardCall {
  const Array* x = nullptr;
  const Array* dy = nullptr;
  const Array* weight = nullptr;  ///< may be undefined
  const Array* mean = nullptr;
  const Array* rstd = nullptr;
  Array dx, dweight, dbias;
};

/// Fused scaled dot-product attention (FlashAttention's algorithm: no score matrix in memory) over q (B, H, Sq, D)
/// and k, v (B, Hk, Skv, D), H a multiple of Hk (grouped-query attention), of one half dtype, the last axis of each
/// operand contiguous (other strides as they come). Forward: out (q's shape, preallocated by the core) and lse
/// (B, H, Sq) float32 contiguous, each query row's log-sum-exp of its scaled, masked scores. Backward: dq, dk, dv
/// (preallocated like q, k, v) from out, dout and lse. causal: query i sees keys j <= i (top-left, as PyTorch's
/// is_causal). dropout > 0 drops attention weights with the engine's own mask (scaled by 1 / (1 - dropout)): the
/// core allocates `rng`, int64 (2,) on the device; a Forward that runs writes the mask's (seed, offset) there,
/// taken from the default generator (or, inside a CUDA graph capture, from the graph's random state at each
/// replay), and its Backward reads them to regenerate the same mask. A Forward that declines takes nothing from
/// the generator. A backend that cannot run the problem returns false and sets `refusal` (the caller falls back).
enum class AttentionKind { Forward, Backward };
struct AttentionCall {
  AttentionKind kind = AttentionKind::Forward;
  const Array* q = nullptr;
  const Array* k = nullptr;
  const Array* v = nullptr;
  const Array* out = nullptr;   ///< Backward (Forward writes `o`)
  const Array* dout = nullptr;  ///< Backward
  Array o, lse;                 ///< Forward writes both; Backward reads lse
  Array dq, dk, dv;             ///< Backward
  double scale = 1.0;
  bool causal = false;
  double dropout = 0.0;
  Array rng;  ///< with dropout: (seed, offset) of the mask; Forward writes it, Backward reads it
  std::string refusal;
};

/// A recurrent network over x (T, N, in), every layer and direction in one call (kiln/rnn.hpp's primitives; the
/// weights in PyTorch's order; every operand contiguous). Forward: y, hy, cy (LSTM; all allocated by the core) and,
/// in training, reserve (bytes the backend sizes and allocates). Backward: dx, dhx, dcx (allocated by the core) and
/// dweights (the backend's: views of one weight-gradient space where the layout allows) from dy, dhy, dcy (dhy/dcy
/// may be undefined: zero). Layout: no operands but `device`, `dtype` and `input`; the backend fills
/// `layout_size` and `layout_offsets` (kiln/rnn.hpp's RnnWeightLayout). `weight_space`, when defined, is the flat
/// array the weights may be views of (rnn_weight_layout): the backend uses it as it is when every weight is its
/// view at the layout's offset, else packs as without. A backend that cannot run the problem returns false and
/// sets `refusal`.
enum class RnnKind { Forward, Backward, Layout };
struct RnnCall {
  RnnKind kind = RnnKind::Forward;
  RnnMode mode = RnnMode::Lstm;
  int64_t hidden = 0, layers = 1;
  bool bidirectional = false, bias = true, training = false;
  Device device;
  DType dtype = DType::Float32;
  int64_t input = 0;  ///< x's features (Layout, where there is no x)
  const Array* x = nullptr;
  const Array* hx = nullptr;
  const Array* cx = nullptr;  ///< LSTM
  const std::vector<Array>* weights = nullptr;
  Array y, hy, cy, reserve;          ///< Forward writes; Backward reads y and reserve
  const Array* dy = nullptr;         ///< Backward
  const Array* dhy = nullptr;        ///< Backward, may be undefined
  const Array* dcy = nullptr;        ///< Backward, may be undefined
  Array dx, dhx, dcx;                ///< Backward
  std::vector<Array> dweights;       ///< Backward (the backend allocates them)
  const Array* weight_space = nullptr;  ///< Forward, Backward: may be null or undefined
  bool packed = false;                  ///< Forward, Backward: the backend copied the weights into a space
  int64_t layout_size = 0;              ///< Layout: the weight space's elements
  std::vector<int64_t> layout_offsets;  ///< Layout: each weight's first element in it
  std::string refusal;
};

/// Fills `out` (contiguous) from the Philox stream described in include/kiln/random.hpp.
struct RandomCall {
  RandomDistribution distribution;
  Array out;
  uint64_t seed = 0;
  uint64_t offset = 0;  ///< in 128-bit Philox blocks
  uint64_t blocks = 0;  ///< blocks the draw takes (reserved from its generator by the core)
  double a = 0.0, b = 1.0;  ///< low/high for uniform, mean/stddev for normal
  int64_t low = 0, high = 0;  ///< randint range [low, high)
  /// Set when the draw is captured in a CUDA graph: the device address of the capture's (seed, base offset)
  /// pair of uint64, written before each replay; the kernel then draws at (state[0], state[1] + offset).
  const void* graph_state = nullptr;
};

/// The random bookkeeping of one CUDA graph capture (like PyTorch's CUDAGeneratorImpl capture state): draws
/// captured into the graph take their blocks at `blocks` past a base offset read from `state` at run time,
/// and each replay advances the default generator by the final `blocks`.
struct GraphRandom {
  const void* state = nullptr;  ///< device address of the (seed, base offset) pair written before each replay
  uint64_t blocks = 0;          ///< Philox blocks used by the draws captured so far
};

/// Reserves `blocks` Philox blocks of the default generator (core/random.cpp): returns the state to draw
/// from and advances its offset past them, under the generator's lock. Graph replays use it.
random::GeneratorState reserve_random_blocks(uint64_t blocks);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual void elementwise(const ElementwiseCall& call) = 0;
  virtual void reduce(const ReduceCall& call) = 0;
  virtual void scan(const ScanCall& call) = 0;
  virtual void matmul(const MatmulCall& call) = 0;
  /// Whether matmul may fold gelu_tanh's gradient into products of `dtype` (MatmulCall::gelu_grad_of): the
  /// step compiler's fusion pass asks before it merges the two calls.
  virtual bool folds_gelu_grad(DType /*dtype*/) const { return false; }
  virtual void random(const RandomCall& call) = 0;
  /// linalg::solve / the SVD of linalg::lstsq on the device. Return LAPACK's info (0: done; > 0: singular
  /// matrix / no convergence), synchronising to read it; -1 when this backend has no solver (the front-end then
  /// computes on the host, as the CPU does).
  virtual int linalg_solve(const SolveCall& /*call*/) { return -1; }
  virtual int linalg_svd(const SvdCall& /*call*/) { return -1; }
  /// A factorisation of linalg on the device (synchronises to read the infos); false when this backend has
  /// none (the front-end then computes on the host).
  virtual bool linalg_factor(FactorCall& /*call*/) { return false; }
  /// sort/argsort on the device (asynchronous); false when this backend has none (the front-end then sorts on
  /// the host).
  virtual bool sort(const SortCall& /*call*/) { return false; }
  /// A discrete Fourier transform (FftCall); false when this layout needs the core's canonical one. The default
  /// throws DeviceError: the device type has no FFT engine.
  virtual bool fft(const FftCall& call);
  /// The graph capture that a random draw on `device`'s current stream of this thread would join, or nullptr
  /// (the draw is eager). Random front-ends ask before they reserve blocks of the generator.
  virtual GraphRandom* graph_random(Device /*device*/) { return nullptr; }
  /// Runs a fused function (kiln::fuse) as generated code into call.outs; returns false when this backend
  /// has no fused kernels (the core then runs the graph op by op, as the CPU does).
  virtual bool fused(const FusionCall& /*call*/) { return false; }
  /// Runs a traced elementwise graph over every group of `call` (Fused::each: multi-tensor apply), writing the
  /// groups' outputs in place; asynchronous on a GPU.
  virtual void multi_tensor(const MultiTensorCall& call) = 0;
  /// Runs a user ElementwiseKernel / ReductionKernel (include/kiln/kernels.hpp): generates, compiles
  /// (cached) and launches it. Only GPU backends compile user kernels; the default throws DeviceError.
  virtual void user_elementwise(const UserElementwiseCall& call);
  virtual void user_reduction(const UserReductionCall& call);
  /// Convolution and batch normalisation engines (cuDNN); false: the core runs its reference.
  virtual bool convolution(const ConvCall& /*call*/) { return false; }
  virtual bool batch_norm(BatchNormCall& /*call*/) { return false; }
  /// A layer norm's backward in one pass (LayerNormBackwardCall); false: the core runs its composed reference.
  virtual bool layer_norm_backward(LayerNormBackwardCall& /*call*/) { return false; }
  virtual bool pooling(const PoolCall& /*call*/) { return false; }
  /// Cross entropy's rows (CrossEntropyCall); false: the caller runs its fused graph.
  virtual bool cross_entropy(CrossEntropyCall& /*call*/) { return false; }
  /// Fused attention; false (with call.refusal) when this backend has no engine for the problem.
  virtual bool attention(AttentionCall& /*call*/) { return false; }
  /// A recurrent network; false (with call.refusal) when this backend has no engine for the problem.
  virtual bool rnn(RnnCall& /*call*/) { return false; }

  /// Compiler and launcher of user modules (RawModule), or nullptr when this backend runs none.
  virtual RawKernelBackend* raw_kernels() { return nullptr; }
  /// Queues a check that every value of contiguous int64 `values` lies in [lo, hi); a failure is thrown
  /// (message `code` of core/device_check.hpp) at the next synchronisation with the device. False when the
  /// backend has no check kernels (the caller then reads the values back).
  virtual bool check_range(const Array& /*values*/, int64_t /*lo*/, int64_t /*hi*/, int32_t /*code*/) {
    return false;
  }
};

/// The backend that runs ops for `device`; throws DeviceError when none is built in.
Backend& backend_for(Device device);
/// Throws DeviceError "<op>: cuda:<index> does not exist; this machine has N usable GPU(s)...; use try_gpu(i)"
/// unless GPU `index` is usable (device.cpp; gpu(i) uses it with op "gpu(i)").
void require_gpu(int index, const std::string& op);
/// "this machine has N usable GPU(s)" (plus " (this build has no CUDA backend)" when so).
std::string gpu_count_str();
/// The built-in backend of a device type, or nullptr when this build has none
/// (defined in src/backends.cpp, the one place that knows which backends exist).
Backend* builtin_backend(DeviceType type);

/// Allocates a new C-contiguous array.
Array make_array(const Shape& shape, DType dtype, Device device, const ArrayOptions& options = {});
/// Allocates a new array of a 4-d `shape` laid out channels-last when one of `inputs` of that shape is (and not
/// also C-contiguous), else C-contiguous: results of elementwise ops and casts keep torch.channels_last, as
/// PyTorch's memory-format propagation does (conv.cpp).
Array make_array_following(const Shape& shape, DType dtype, Device device,
                           std::initializer_list<const Array*> inputs);

}  // namespace kiln::detail
