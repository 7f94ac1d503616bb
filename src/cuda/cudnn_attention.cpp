// Fused attention on the GPU (Backend::attention): cuDNN's flash attention, built through NVIDIA's cudnn-frontend
// graph API (header only; `make deps` puts it in .deps/cudnn-frontend). One cuDNN graph per problem (dtype,
// sizes, strides, causal, scale, forward or backward), built once per thread and device and cached with its
// workspace size, as the convolutions' plans are (cudnn_plans.cpp). A problem cuDNN does not support (a head
// size it has no kernel for, a GPU before Ampere) is remembered as refused, with cuDNN's reason, and declined.
// Inside a CUDA graph capture only an already-built graph runs (building may load modules); otherwise the
// caller's fallback (the blocked attention) is captured.
// Dropout runs inside the kernels, as PyTorch's cuDNN attention does: cuDNN draws its mask from Philox with a
// seed and offset it reads from device memory (the call's `rng`), so the probability is part of the graph but
// the seed is not. The forward writes them with a one-thread kernel whose arguments are the default generator's
// reserved state, or, inside a capture, which copies the graph's random word (written before each replay) plus
// the capture's relative offset: a captured step draws a new mask at every replay instead of the capture's.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "cuda/cudnn_common.hpp"
#include "cuda/ops.hpp"
#include "cuda/random.hpp"
#include "kiln/random.hpp"

#if KILN_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

namespace kiln::cuda_impl {

#if KILN_HAVE_CUDNN_FRONTEND

namespace {

namespace fe = cudnn_frontend;

struct AttentionKey {
  int device = 0;
  detail::AttentionKind kind = detail::AttentionKind::Forward;
  DType dtype = DType::Float16;
  bool causal = false;
  double scale = 1.0;
  double dropout = 0.0;
  // Shapes (B, H, S, D) and strides of q, k, v, o, and (backward) dout, dq, dk, dv.
  std::array<int64_t, 4> q{}, k{};
  std::array<std::array<int64_t, 4>, 8> strides{};
  bool operator==(const AttentionKey&) const = default;
};

}  // namespace
}  // namespace kiln::cuda_impl

KILN_HASH_EVERY_FIELD(kiln::cuda_impl::AttentionKey, device, kind, dtype, causal, scale, dropout, q, k, strides);

namespace kiln::cuda_impl {
namespace {

// The tensors' uids in the graphs' variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDout, kDq, kDk, kDv, kSeed, kOffset };

struct AttentionPlan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: refused
  int64_t workspace = 0;
  std::string refusal;
};

std::array<int64_t, 4> dims(const Array& a) { return {a.shape(0), a.shape(1), a.shape(2), a.shape(3)}; }
std::array<int64_t, 4> strides(const Array& a) {
  return {a.strides()[0], a.strides()[1], a.strides()[2], a.strides()[3]};
}
std::vector<int64_t> vec(const std::array<int64_t, 4>& a) { return {a.begin(), a.end()}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, Uid uid,
                                                    const std::array<int64_t, 4>& dim,
                                                    const std::array<int64_t, 4>& stride) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(vec(dim)).set_stride(vec(stride)));
}

std::shared_ptr<AttentionPlan> build(const AttentionKey& key, cudnnHandle_t handle) {
  auto plan = std::make_shared<AttentionPlan>();
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(key.dtype == DType::BFloat16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::array<int64_t, 4> kv = key.k;
  const std::array<int64_t, 4> stats_dim{key.q[0], key.q[1], key.q[2], 1};
  const std::array<int64_t, 4> stats_stride{key.q[1] * key.q[2], key.q[2], 1, 1};
  auto q = input(*g, "q", kQ, key.q, key.strides[0]);
  auto k = input(*g, "k", kK, kv, key.strides[1]);
  auto v = input(*g, "v", kV, kv, key.strides[2]);
  const auto scale = static_cast<float>(key.scale);
  // The mask's seed and offset: int64 scalars in device memory (read when the kernels run, so a captured graph
  // sees each replay's values).
  std::shared_ptr<fe::graph::Tensor_attributes> seed, offset;
  if (key.dropout > 0) {
    const auto scalar = [&](const char* name, Uid uid) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({1, 1, 1, 1})
                           .set_stride({1, 1, 1, 1})
                           .set_data_type(fe::DataType_t::INT64));
    };
    seed = scalar("seed", kSeed);
    offset = scalar("offset", kOffset);
  }
  const auto probability = static_cast<float>(key.dropout);
  if (key.kind == detail::AttentionKind::Forward) {
    auto options = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_attn_scale(scale);
    if (key.causal)
      options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
    if (seed) options.set_dropout(probability, seed, offset);
    auto [o, stats] = g->sdpa(q, k, v, options);
    o->set_output(true).set_uid(kO).set_dim(vec(key.q)).set_stride(vec(key.strides[3]));
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(vec(stats_dim))
        .set_stride(vec(stats_stride));
  } else {
    auto o = input(*g, "o", kO, key.q, key.strides[3]);
    auto dout = input(*g, "dout", kDout, key.q, key.strides[4]);
    auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("stats").set_uid(kStats)
                               .set_dim(vec(stats_dim)).set_stride(vec(stats_stride))
                               .set_data_type(fe::DataType_t::FLOAT));
    auto options = fe::graph::SDPA_backward_attributes().set_name("attention_backward").set_attn_scale(scale);
    if (key.causal)
      options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
    if (seed) options.set_dropout(probability, seed, offset);
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, options);
    dq->set_output(true).set_uid(kDq).set_dim(vec(key.q)).set_stride(vec(key.strides[5]));
    dk->set_output(true).set_uid(kDk).set_dim(vec(kv)).set_stride(vec(key.strides[6]));
    dv->set_output(true).set_uid(kDv).set_dim(vec(kv)).set_stride(vec(key.strides[7]));
  }
  fe::error_t status = g->validate();
  if (status.is_good()) status = g->build_operation_graph(handle);
  if (status.is_good()) status = g->create_execution_plans({fe::HeurMode_t::A});
  if (status.is_good()) status = g->check_support(handle);
  if (status.is_good()) status = g->build_plans(handle);
  if (status.is_good()) status = g->get_workspace_size(plan->workspace);
  if (!status.is_good()) {
    plan->refusal = "cuDNN has no fused attention for this problem: " + status.get_message();
    return plan;
  }
  plan->graph = std::move(g);
  return plan;
}

thread_local std::unordered_map<AttentionKey, std::shared_ptr<AttentionPlan>> t_plans;

/// Writes the forward's dropout (seed, offset) into call.rng on `stream`, reserving one Philox block per attention
/// weight: cuDNN does not say in which unit it counts the offset (PyTorch advances its generator by one number
/// per weight), and a block per weight is at least as much as any unit needs, so two calls' streams never
/// overlap. The blocks come from the default generator, or, while `stream` is capturing, from the graph's random
/// word at each replay (counted in the capture, as a captured random draw's are).
void write_dropout_state(const detail::AttentionCall& call, int device, cudaStream_t stream) {
  const Array& q = *call.q;
  const auto blocks = static_cast<uint64_t>(q.shape(0) * q.shape(1) * q.shape(2) * call.k->shape(2));
  void* rng = const_cast<void*>(call.rng.data_ptr());
  if (detail::GraphRandom* graph = capture_random(device, stream)) {
    write_graph_random_state(device, rng, graph->state, 0, graph->blocks, stream);
    graph->blocks += blocks;
  } else {
    const random::GeneratorState state = detail::reserve_random_blocks(blocks);
    write_graph_random_state(device, rng, nullptr, state.seed, state.offset, stream);
  }
}

}  // namespace

bool cuda_attention(detail::AttentionCall& call) {
  const Array& q = *call.q;
  const DType dtype = q.dtype();
  if (dtype != DType::Float16 && dtype != DType::BFloat16) {
    call.refusal = "cuDNN's fused attention takes float16 and bfloat16, not " + std::string(dtype_name(dtype));
    return false;
  }
  const int64_t d = q.shape(3);
  if (d % 8 != 0 || d > 256) {
    call.refusal = "cuDNN's fused attention needs a head size that is a multiple of 8, at most 256; got " +
                   std::to_string(d);
    return false;
  }
  const int device = q.device().index;
  const bool forward = call.kind == detail::AttentionKind::Forward;
  AttentionKey key;
  key.device = device, key.kind = call.kind, key.dtype = dtype, key.causal = call.causal, key.scale = call.scale;
  key.dropout = call.dropout;
  key.q = dims(q), key.k = dims(*call.k);
  key.strides[0] = strides(q), key.strides[1] = strides(*call.k), key.strides[2] = strides(*call.v);
  key.strides[3] = strides(forward ? call.o : *call.out);
  if (!forward) {
    key.strides[4] = strides(*call.dout);
    key.strides[5] = strides(call.dq), key.strides[6] = strides(call.dk), key.strides[7] = strides(call.dv);
  }
  const cudaStream_t stream = current_stream(device);
  CudnnState* state = bound_state(device, stream);
  auto it = t_plans.find(key);
  if (it == t_plans.end()) {
    if (thread_captures() > 0) {
      call.refusal = "a CUDA graph capture builds no cuDNN attention graph; run the step once before capturing";
      return false;
    }
    it = t_plans.emplace(key, build(key, state->handle)).first;
  }
  const AttentionPlan& plan = *it->second;
  if (!plan.graph) {
    call.refusal = plan.refusal;
    return false;
  }
  std::shared_ptr<Storage> workspace = try_workspace(device, static_cast<size_t>(plan.workspace), stream);
  if (plan.workspace > 0 && !workspace)
    throw OutOfMemoryError("scaled_dot_product_attention: cuDNN's fused attention needs " +
                           std::to_string(plan.workspace) +
                           " bytes of workspace and the GPU has no room; free memory or use a smaller batch");
  const auto ptr = [](const Array& a) { return const_cast<void*>(a.data_ptr()); };
  std::unordered_map<int64_t, void*> pack{{kQ, ptr(q)}, {kK, ptr(*call.k)}, {kV, ptr(*call.v)}};
  if (call.dropout > 0) {
    if (forward) write_dropout_state(call, device, stream);
    pack[kSeed] = ptr(call.rng);
    pack[kOffset] = static_cast<int64_t*>(ptr(call.rng)) + 1;
  }
  if (forward) {
    pack[kO] = ptr(call.o);
    pack[kStats] = ptr(call.lse);
  } else {
    pack[kO] = ptr(*call.out);
    pack[kDout] = ptr(*call.dout);
    pack[kStats] = ptr(call.lse);
    pack[kDq] = ptr(call.dq), pack[kDk] = ptr(call.dk), pack[kDv] = ptr(call.dv);
  }
  fe::error_t status = plan.graph->execute(state->handle, pack, workspace ? workspace->data() : nullptr);
  if (!status.is_good())
    throw DeviceError("scaled_dot_product_attention: cuDNN's fused attention failed to run: " +
                      status.get_message());
  return true;
}

#else

bool cuda_attention(detail::AttentionCall& call) {
  call.refusal = "this build has no cudnn-frontend headers (make deps installs them into .deps/cudnn-frontend)";
  return false;
}

#endif

}  // namespace kiln::cuda_impl
