// Recurrent networks on the GPU (Backend::rnn): cuDNN's RNN API (cudnnRNNForward, cudnnRNNBackwardData_v8,
// cudnnRNNBackwardWeights_v8) over every layer, direction and time step in one call each. One plan per problem
// (mode, dtype, sizes, layers, directions, bias, TF32), built once per thread and device: its descriptors, the
// device array of sequence lengths, the sizes of the weight space, workspace and reserve, and where each of
// PyTorch's weight blocks (one gate's rows of weight_ih / weight_hh / the biases) lives in cuDNN's packed weight
// space. Where each weight's blocks follow each other there (cuDNN's layout does), the weight is one contiguous
// range of the space: RnnKind::Layout reports those ranges, nn's layers keep their parameters as views of one
// such space (PyTorch's flatten_parameters), and a call given that space reads it as it is. Otherwise a call
// packs the weights into a scratch space with device copies. The weight gradients come back as views of one
// gradient space where the layout allows. Inside a CUDA graph capture only an already-built plan runs.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/cudnn_common.hpp"
#include "cuda/ops.hpp"
#include "kiln/conv.hpp"

namespace kiln::cuda_impl {

namespace {

struct RnnKey {
  int device = 0;
  RnnMode mode = RnnMode::Lstm;
  DType dtype = DType::Float32;
  int64_t input = 0, hidden = 0, layers = 1, steps = 0, batch = 0;
  bool bidirectional = false, bias = true, tf32 = false;
  bool operator==(const RnnKey&) const = default;
};

}  // namespace
}  // namespace kiln::cuda_impl

KILN_HASH_EVERY_FIELD(kiln::cuda_impl::RnnKey, device, mode, dtype, input, hidden, layers, steps, batch, bidirectional,
                      bias, tf32);

namespace kiln::cuda_impl {
namespace {

using TensorDesc = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using RnnDesc = Descriptor<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using DataDesc = Descriptor<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor>;

/// One weight block's copy between PyTorch's parameter `param` (at element `offset`) and the weight space (at byte
/// `space_bytes`), `count` elements.
struct Block {
  size_t param = 0;
  int64_t offset = 0, count = 0;
  size_t space_bytes = 0;
};

struct RnnPlan {
  RnnDesc rnn;
  DataDesc x, y;
  TensorDesc h;
  std::shared_ptr<Storage> lengths;  // int32 per batch element, on the device
  size_t weight_bytes = 0, work_train = 0, work_infer = 0, reserve = 0;
  std::vector<Block> blocks;
  /// Per weight (PyTorch's order): its first element in the weight space when its blocks lie there one after
  /// the other in its own order (the weight is one range of the space), else -1.
  std::vector<int64_t> whole;
  bool all_whole = false;
  int64_t space_elements = 0;  // weight_bytes in elements, rounded up
};

/// Fills plan.whole from plan.blocks: a weight is whole when its block at element e sits at the byte where its
/// first block sits plus e elements.
void find_whole_weights(RnnPlan& plan, size_t weights, size_t elem) {
  constexpr int64_t kUnset = -2;
  std::vector<int64_t> start(weights, kUnset);
  for (const Block& b : plan.blocks)
    if (b.offset == 0) start[b.param] = static_cast<int64_t>(b.space_bytes);
  plan.whole.assign(weights, -1);
  std::vector<bool> ok(weights, true);
  for (const Block& b : plan.blocks)
    ok[b.param] = ok[b.param] && start[b.param] != kUnset &&
                  b.space_bytes == static_cast<size_t>(start[b.param]) + static_cast<size_t>(b.offset) * elem;
  plan.all_whole = true;
  for (size_t i = 0; i < weights; ++i) {
    if (ok[i] && start[i] >= 0 && static_cast<size_t>(start[i]) % elem == 0)
      plan.whole[i] = start[i] / static_cast<int64_t>(elem);
    plan.all_whole = plan.all_whole && plan.whole[i] >= 0;
  }
  plan.space_elements = static_cast<int64_t>((plan.weight_bytes + elem - 1) / elem);
}

std::shared_ptr<Storage> need(int device, size_t bytes, cudaStream_t stream, const char* what) {
  if (bytes == 0) return nullptr;
  std::shared_ptr<Storage> s = try_workspace(device, bytes, stream);
  if (!s)
    throw OutOfMemoryError(std::string("rnn: cuDNN needs ") + std::to_string(bytes) + " bytes of " + what +
                           " and the GPU has no room; free memory or use a smaller batch or sequence");
  return s;
}

cudnnRNNMode_t cell(RnnMode mode) {
  switch (mode) {
    case RnnMode::RnnTanh:
      return CUDNN_RNN_TANH;
    case RnnMode::RnnRelu:
      return CUDNN_RNN_RELU;
    case RnnMode::Lstm:
      return CUDNN_LSTM;
    case RnnMode::Gru:
      return CUDNN_GRU;
  }
  return CUDNN_LSTM;
}

std::unique_ptr<RnnPlan> build(const RnnKey& key, cudnnDataType_t type, cudnnHandle_t handle, cudaStream_t stream) {
  auto plan = std::make_unique<RnnPlan>();
  const int32_t dirs = key.bidirectional ? 2 : 1;
  const cudnnDataType_t math = key.dtype == DType::Float16 ? CUDNN_DATA_FLOAT : type;
  const cudnnMathType_t math_type = key.dtype == DType::Float16 ? CUDNN_TENSOR_OP_MATH
                                    : key.dtype == DType::Float32 && !key.tf32 ? CUDNN_FMA_MATH
                                                                               : CUDNN_DEFAULT_MATH;
  KILN_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
      plan->rnn, CUDNN_RNN_ALGO_STANDARD, cell(key.mode), key.bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS,
      key.bidirectional ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, type, math, math_type,
      static_cast<int32_t>(key.input), static_cast<int32_t>(key.hidden), static_cast<int32_t>(key.hidden),
      static_cast<int32_t>(key.layers), nullptr, CUDNN_RNN_PADDED_IO_DISABLED));
  const std::vector<int> lengths(static_cast<size_t>(key.batch), static_cast<int>(key.steps));
  KILN_CUDNN_CHECK(cudnnSetRNNDataDescriptor(plan->x, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED,
                                             static_cast<int>(key.steps), static_cast<int>(key.batch),
                                             static_cast<int>(key.input), lengths.data(), nullptr));
  KILN_CUDNN_CHECK(cudnnSetRNNDataDescriptor(plan->y, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED,
                                             static_cast<int>(key.steps), static_cast<int>(key.batch),
                                             static_cast<int>(key.hidden * dirs), lengths.data(), nullptr));
  const int hdims[3] = {static_cast<int>(key.layers * dirs), static_cast<int>(key.batch), static_cast<int>(key.hidden)};
  const int hstrides[3] = {hdims[1] * hdims[2], hdims[2], 1};
  KILN_CUDNN_CHECK(cudnnSetTensorNdDescriptor(plan->h, type, 3, hdims, hstrides));
  plan->lengths = device_alloc(key.device, lengths.size() * sizeof(int32_t), stream, false);
  KILN_CUDA_CHECK(cudaMemcpyAsync(plan->lengths->data(), lengths.data(), lengths.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream));  // `lengths` is a host vector about to go
  KILN_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, plan->rnn, &plan->weight_bytes));
  KILN_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(handle, plan->rnn, CUDNN_FWD_MODE_TRAINING, plan->x, &plan->work_train,
                                             &plan->reserve));
  size_t unused = 0;
  KILN_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(handle, plan->rnn, CUDNN_FWD_MODE_INFERENCE, plan->x, &plan->work_infer,
                                             &unused));
  // Where each gate's block of PyTorch's parameters lives: cudnnGetRNNWeightParams gives addresses within a weight
  // space; ask about a scratch one and keep the offsets.
  std::shared_ptr<Storage> scratch = need(key.device, plan->weight_bytes, stream, "weight space");
  const auto origin = reinterpret_cast<uintptr_t>(scratch->data());
  const int64_t gates = rnn_gates(key.mode), h = key.hidden;
  const size_t per = key.bias ? 4 : 2, elem = static_cast<size_t>(itemsize(key.dtype));
  TensorDesc mdesc, bdesc;
  for (int64_t layer = 0; layer < key.layers; ++layer) {
    const int64_t in = layer == 0 ? key.input : h * dirs;
    for (int64_t d = 0; d < dirs; ++d) {
      const int32_t pseudo = static_cast<int32_t>(layer * dirs + d);
      const size_t base = per * static_cast<size_t>(pseudo);
      for (int64_t id = 0; id < 2 * gates; ++id) {
        void* m = nullptr;
        void* b = nullptr;
        KILN_CUDNN_CHECK(cudnnGetRNNWeightParams(handle, plan->rnn, pseudo, plan->weight_bytes, scratch->data(),
                                                 static_cast<int32_t>(id), mdesc, &m,
                                                 key.bias ? static_cast<cudnnTensorDescriptor_t>(bdesc) : nullptr,
                                                 key.bias ? &b : nullptr));
        const bool recurrent = id >= gates;
        const int64_t gate = recurrent ? id - gates : id, cols = recurrent ? h : in;
        plan->blocks.push_back(Block{base + (recurrent ? 1 : 0), gate * h * cols, h * cols,
                                     static_cast<size_t>(reinterpret_cast<uintptr_t>(m) - origin)});
        if (key.bias)
          plan->blocks.push_back(Block{base + (recurrent ? 3 : 2), gate * h, h,
                                       static_cast<size_t>(reinterpret_cast<uintptr_t>(b) - origin)});
      }
    }
  }
  for (const Block& blk : plan->blocks)
    if (blk.space_bytes + static_cast<size_t>(blk.count) * elem > plan->weight_bytes)
      throw DeviceError("rnn: cuDNN's weight space layout was not understood (a block past its end); please report it");
  find_whole_weights(*plan, per * static_cast<size_t>(key.layers * dirs), elem);
  return plan;
}

thread_local std::unordered_map<RnnKey, std::unique_ptr<RnnPlan>> t_plans;

void* ptr(const Array& a) { return a.defined() ? const_cast<void*>(a.data_ptr()) : nullptr; }

/// Whether every weight is the view of `space` at its place in the plan's layout: the space then serves as it is.
bool weights_in_space(const RnnPlan& plan, const std::vector<Array>& weights, const Array* space, size_t elem) {
  if (!space || !space->defined() || !plan.all_whole || space->nbytes() < static_cast<int64_t>(plan.weight_bytes))
    return false;
  const auto* base = static_cast<const char*>(space->data_ptr());
  for (size_t i = 0; i < weights.size(); ++i)
    if (weights[i].data_ptr() != base + static_cast<size_t>(plan.whole[i]) * elem) return false;
  return true;
}

/// A device array of `elements` elements of `dtype` (the caching allocator's memory).
Array device_array(int device, int64_t elements, DType dtype, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(elements, 1)) * static_cast<size_t>(itemsize(dtype));
  return Array(device_alloc(device, bytes, stream), {elements}, {1}, 0, dtype);
}

}  // namespace

bool cuda_rnn(detail::RnnCall& call) {
  const DType dtype = call.dtype;
  if (dtype != DType::Float32 && dtype != DType::Float64 && dtype != DType::Float16) {
    call.refusal = "cuDNN's RNN takes float32, float64 and float16, not " + std::string(dtype_name(dtype));
    return false;
  }
  const int device = call.device.index;
  const bool layout = call.kind == detail::RnnKind::Layout;
  RnnKey key;
  key.device = device, key.mode = call.mode, key.dtype = dtype, key.input = call.input, key.hidden = call.hidden;
  // The weight layout does not depend on the sequence: a layout query shares the plan of a (1, 1) problem.
  key.layers = call.layers, key.steps = layout ? 1 : call.x->shape(0), key.batch = layout ? 1 : call.x->shape(1);
  key.bidirectional = call.bidirectional, key.bias = call.bias;
  key.tf32 = dtype == DType::Float32 && kiln::cudnn::allow_tf32();
  const cudaStream_t stream = current_stream(device);
  CudnnState* state = bound_state(device, stream);
  auto it = t_plans.find(key);
  if (it == t_plans.end()) {
    if (thread_captures() > 0) {
      call.refusal = "a CUDA graph capture builds no cuDNN RNN plan; run the step once before capturing";
      return false;
    }
    it = t_plans.emplace(key, build(key, *data_type(dtype), state->handle, stream)).first;
  }
  const RnnPlan& plan = *it->second;
  if (layout) {
    if (!plan.all_whole) {
      call.refusal = "cuDNN's weight space holds a weight in pieces; the weights are packed on each call";
      return false;
    }
    call.layout_size = plan.space_elements;
    call.layout_offsets = plan.whole;
    return true;
  }
  const Array& x = *call.x;
  const std::vector<Array>& weights = *call.weights;
  const size_t elem = static_cast<size_t>(itemsize(dtype));
  // The weights as they are where they are views of the space passed in; else packed into a scratch space.
  std::shared_ptr<Storage> scratch;
  void* base = nullptr;
  if (weights_in_space(plan, weights, call.weight_space, elem)) {
    base = const_cast<void*>(call.weight_space->data_ptr());
  } else {
    scratch = need(device, plan.weight_bytes, stream, "weight space");
    base = scratch->data();
    for (const Block& b : plan.blocks)
      KILN_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(base) + b.space_bytes,
                                      static_cast<const char*>(weights[b.param].data_ptr()) + b.offset * elem,
                                      static_cast<size_t>(b.count) * elem, cudaMemcpyDeviceToDevice, stream));
    call.packed = true;
  }
  const int32_t* lengths = static_cast<const int32_t*>(plan.lengths->data());
  const bool lstm = call.mode == RnnMode::Lstm;
  if (call.kind == detail::RnnKind::Forward) {
    const size_t work_bytes = call.training ? plan.work_train : plan.work_infer;
    std::shared_ptr<Storage> work = need(device, work_bytes, stream, "workspace");
    if (call.training) {
      const size_t bytes = std::max<size_t>(plan.reserve, 1);
      call.reserve = Array(device_alloc(device, bytes, stream), {static_cast<int64_t>(bytes)}, {1}, 0, DType::UInt8);
    }
    KILN_CUDNN_CHECK(cudnnRNNForward(
        state->handle, plan.rnn, call.training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE, lengths, plan.x,
        ptr(x), plan.y, ptr(call.y), plan.h, ptr(*call.hx), ptr(call.hy),
        lstm ? static_cast<cudnnTensorDescriptor_t>(plan.h) : nullptr, lstm ? ptr(*call.cx) : nullptr,
        lstm ? ptr(call.cy) : nullptr, plan.weight_bytes, base, work_bytes, work ? work->data() : nullptr,
        call.training ? plan.reserve : 0, call.training ? ptr(call.reserve) : nullptr));
    return true;
  }
  if (call.reserve.nbytes() < static_cast<int64_t>(plan.reserve))
    throw ValueError("rnn_backward: the reserve is smaller than cuDNN's for this problem; pass the reserve of a "
                     "training rnn_forward of the same shapes");
  std::shared_ptr<Storage> work = need(device, plan.work_train, stream, "workspace");
  KILN_CUDNN_CHECK(cudnnRNNBackwardData_v8(
      state->handle, plan.rnn, lengths, plan.y, ptr(call.y), ptr(*call.dy), plan.x, ptr(call.dx), plan.h,
      ptr(*call.hx), ptr(*call.dhy), ptr(call.dhx), lstm ? static_cast<cudnnTensorDescriptor_t>(plan.h) : nullptr,
      lstm ? ptr(*call.cx) : nullptr, lstm ? ptr(*call.dcy) : nullptr, lstm ? ptr(call.dcx) : nullptr,
      plan.weight_bytes, base, plan.work_train, work ? work->data() : nullptr, plan.reserve, ptr(call.reserve)));
  // The weight gradients accumulate (cuDNN's only mode) into a zeroed space; each weight's gradient is then its
  // view there when the weight is whole in the layout, else a copy of its blocks.
  const Array dspace = device_array(device, plan.space_elements, dtype, stream);
  KILN_CUDA_CHECK(cudaMemsetAsync(dspace.data_ptr(), 0, plan.weight_bytes, stream));
  KILN_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(state->handle, plan.rnn, CUDNN_WGRAD_MODE_ADD, lengths, plan.x, ptr(x),
                                              plan.h, ptr(*call.hx), plan.y, ptr(call.y), plan.weight_bytes,
                                              dspace.data_ptr(), plan.work_train, work ? work->data() : nullptr,
                                              plan.reserve, ptr(call.reserve)));
  call.dweights.clear();
  for (size_t i = 0; i < weights.size(); ++i) {
    const Shape& shape = weights[i].shape();
    const int64_t count = weights[i].size();
    if (plan.whole[i] >= 0)
      call.dweights.push_back(dspace.slice(0, plan.whole[i], plan.whole[i] + count).reshape(shape));
    else
      call.dweights.push_back(device_array(device, count, dtype, stream).reshape(shape));
  }
  const auto* dbase = static_cast<const char*>(dspace.data_ptr());
  for (const Block& b : plan.blocks)
    if (plan.whole[b.param] < 0)
      KILN_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(call.dweights[b.param].data_ptr()) + b.offset * elem,
                                      dbase + b.space_bytes, static_cast<size_t>(b.count) * elem,
                                      cudaMemcpyDeviceToDevice, stream));
  return true;
}

}  // namespace kiln::cuda_impl
