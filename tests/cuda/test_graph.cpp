// CUDA graphs (src/cuda/graph.cpp, kiln/cuda.hpp). Without a GPU: the API's
// argument checks and error messages, and the capture registry the synchronising
// paths consult. On cuda:0 (skipped without a GPU): captured elementwise ops,
// reductions and matmul replay the CPU's results and follow in-place input
// changes; the private pool keeps its blocks from other work and is released with
// the graph; synchronising during a capture throws the clear ValueError and
// leaves the capture usable; pinned asynchronous copies and raw kernels compiled
// during the capture are captured; pools shared between graphs; replay on another
// stream; capture on a GPU that is not the current device. The allocator's
// private-pool bookkeeping is tested without a GPU in test_allocator_graph_pool.cpp.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/compiler.hpp"
#include "cuda/launch.hpp"
#include "cuda/runtime.hpp"
#include "kiln/cuda.hpp"
#include "gpu_test_util.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using kiln_test::expect_error;

namespace {

std::vector<float> host_values(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// ---------------------------------------------------------------- without a GPU

TEST(CudaGraphApi, an_empty_graph_refuses_replay_and_has_no_stream_or_pool) {
  cuda::Graph g;
  EXPECT_FALSE(g.is_ready());
  EXPECT_FALSE(g.is_capturing());
  EXPECT_EQ(g.num_nodes(), 0u);
  expect_error<ValueError>([&] { g.replay(); }, {"Graph::replay", "nothing was captured", "GraphCapture"});
  expect_error<ValueError>([&] { (void)g.stream(); }, {"Graph::stream", "capture_begin"});
  expect_error<ValueError>([&] { (void)g.pool(); }, {"Graph::pool", "capture first"});
  expect_error<ValueError>([&] { g.capture_end(); }, {"Graph::capture_end", "no capture is under way"});
  g.reset();  // nothing to release: a no-op
  cuda::GraphPool pool;
  EXPECT_FALSE(pool.defined());
  expect_error<ValueError>([&] { (void)pool.device(); }, {"GraphPool::device", "Graph::pool()"});
  cuda::Graph moved = std::move(g);
  EXPECT_FALSE(moved.is_ready());
  expect_error<ValueError>([&] { g.replay(); }, {"moved from"});  // NOLINT(bugprone-use-after-move)
}

TEST(CudaGraphApi, capture_needs_a_created_stream_of_an_existing_gpu) {
  cuda::Graph g;
  expect_error<DeviceError>([&] { cuda::GraphCapture capture(g, Stream::create(cpu())); },
                            {"Graph::capture_begin", "CPU stream", "Stream::create(gpu(0))"});
  Stream legacy(Device{DeviceType::CUDA, 0}, nullptr, nullptr);  // what Stream::default_stream(gpu(0)) is
  expect_error<ValueError>([&] { cuda::GraphCapture capture(g, legacy); },
                           {"default (legacy) stream of cuda:0 cannot be captured", "Stream::create(cuda:0)"});
  if (num_gpus() == 0) {
    Stream missing(Device{DeviceType::CUDA, 0}, reinterpret_cast<void*>(0x10), nullptr);
    expect_error<DeviceError>([&] { cuda::GraphCapture capture(g, missing); },
                              {"Graph::capture_begin", "cuda:0 does not exist"});
  }
  EXPECT_FALSE(g.is_capturing());
  EXPECT_EQ(cuda_impl::thread_captures(), 0);
  EXPECT_FALSE(cuda_impl::any_capture());
}

TEST(CudaGraphApi, the_capture_registry_names_the_capturing_stream) {
  auto s = reinterpret_cast<cudaStream_t>(0x10);
  expect_error<ValueError>(
      [&] { cuda_impl::throw_during_capture("Stream::synchronize cannot synchronise", 3, s); },
      {"Stream::synchronize cannot synchronise while Stream(cuda:3, 0x10) is capturing a CUDA graph; move it after "
       "the capture"});
  EXPECT_FALSE(cuda_impl::any_capture());
  EXPECT_EQ(cuda_impl::capturing_stream(3), nullptr);
  std::vector<std::shared_ptr<Storage>> kept;
  cuda_impl::register_capture(3, s, &kept);
  EXPECT_TRUE(cuda_impl::any_capture());
  EXPECT_EQ(cuda_impl::capturing_stream(3), s);
  EXPECT_EQ(cuda_impl::capturing_stream(2), nullptr);
  EXPECT_EQ(cuda_impl::thread_capturing_stream(3), nullptr);  // this thread is not counted as capturing
  {
    cuda_impl::ThreadCaptureScope capturing;
    EXPECT_EQ(cuda_impl::thread_captures(), 1);
    EXPECT_EQ(cuda_impl::thread_capturing_stream(3), s);
  }
  EXPECT_EQ(cuda_impl::thread_captures(), 0);
  static char buffer[16];
  cuda_impl::keep_for_capture(3, s, std::make_shared<Storage>(buffer, sizeof buffer, cpu(), nullptr, nullptr));
  cuda_impl::keep_for_capture(2, s, std::make_shared<Storage>(buffer, 1, cpu(), nullptr, nullptr));  // no capture
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0]->nbytes(), sizeof buffer);
  // A stream forked into this thread's capture on cuda:3: kept by that capture.
  cuda_impl::keep_for_capture(3, reinterpret_cast<cudaStream_t>(0x20),
                              std::make_shared<Storage>(buffer, 2, cpu(), nullptr, nullptr));
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[1]->nbytes(), 2u);
  cuda_impl::unregister_capture(3, s);
  EXPECT_FALSE(cuda_impl::any_capture());
}

// ---------------------------------------------------------------- on a GPU

TEST(CudaGraph, elementwise_ops_replay_the_cpu_results_and_follow_in_place_input_changes) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  const int64_t n = 3000;
  std::vector<float> hx = host_values(n, 1), hy = host_values(n, 2);
  Array x = from_data(hx, Shape{n}, d), y = from_data(hy, Shape{n}, d);
  Stream s = Stream::create(d);
  cuda::Graph g;
  Array z, w;
  {
    cuda::GraphCapture capture(g, s);
    EXPECT_TRUE(g.is_capturing());
    Array t = x * 1.5f + 0.25f;  // a temporary freed inside the capture
    z = tanh(t) - y;
    w = maximum(z, x) * y;
  }
  EXPECT_TRUE(g.is_ready());
  EXPECT_GE(g.num_nodes(), 4u);
  auto check = [&](const std::vector<float>& ax, const std::vector<float>& ay) {
    std::vector<float> gz = z.to_vector<float>(), gw = w.to_vector<float>();
    for (size_t i = 0; i < ax.size(); ++i) {
      double rz = std::tanh(static_cast<double>(ax[i]) * 1.5 + 0.25) - ay[i];
      double rw = std::max(rz, static_cast<double>(ax[i])) * ay[i];
      ASSERT_NEAR(gz[i], rz, 1e-5) << i;
      ASSERT_NEAR(gw[i], rw, 1e-5) << i;
    }
  };
  g.replay();
  s.synchronize();
  check(hx, hy);
  // New inputs in place (the graph reads x's and y's addresses): the next replay follows them.
  std::vector<float> hx2 = host_values(n, 3);
  x.copy_from(from_data(hx2, Shape{n}, cpu()));
  {
    StreamGuard guard(s);
    y *= 2.0f;
  }
  for (float& v : hy) v *= 2.0f;
  g.replay();
  s.synchronize();
  check(hx2, hy);
}

TEST(CudaGraph, reductions_and_matmul_replay_like_the_cpu) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array hx = random::normal({256, 300}, 0.0, 1.0, float32, cpu());
  Array ha = random::normal({64, 48}, 0.0, 1.0, float32, cpu()),
        hb = random::normal({48, 32}, 0.0, 1.0, float32, cpu());
  Array x = hx.to(d), a = ha.to(d), b = hb.to(d);
  Stream s = Stream::create(d);
  cuda::Graph g;
  Array total, columns, rows_max, product;
  {
    cuda::GraphCapture capture(g, s);
    total = x.sum();
    columns = sum(x, {0});
    rows_max = max(x, {1});
    product = matmul(a, b);
  }
  auto expect_close = [](const Array& gpu_result, const Array& cpu_result, double tolerance) {
    std::vector<double> got = gpu_result.astype(float64).to_vector<double>();
    std::vector<double> want = cpu_result.astype(float64).to_vector<double>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tolerance) << i;
  };
  for (int round = 0; round < 2; ++round) {
    g.replay();
    s.synchronize();
    Array cx = hx.astype(float64), ca = ha.astype(float64), cb = hb.astype(float64);
    expect_close(total, cx.sum(), 1e-2);
    expect_close(columns, sum(cx, {0}), 1e-4);
    expect_close(rows_max, max(cx, {1}), 0.0);
    expect_close(product, matmul(ca, cb), 1e-4);
    // Round 2: new data in the same arrays.
    hx = random::normal({256, 300}, 0.0, 1.0, float32, cpu());
    ha = random::normal({64, 48}, 0.0, 1.0, float32, cpu());
    x.copy_from(hx);
    a.copy_from(ha);
  }
}

TEST(CudaGraph, a_hundred_in_place_adds_are_recorded_not_run_and_replay_as_one_graph) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array x = arange(1000, float32, d), y = full({1000}, 0.5f, float32, d);
  Stream s = Stream::create(d);
  cuda::Graph g;
  {
    cuda::GraphCapture capture(g, s);
    for (int i = 0; i < 100; ++i) x += y;
  }
  EXPECT_EQ(g.num_nodes(), 100u);
  std::vector<float> before = x.to_vector<float>();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(before[static_cast<size_t>(i)], static_cast<float>(i)) << "capture ran work";
  g.replay();
  g.replay();
  s.synchronize();
  std::vector<float> after = x.to_vector<float>();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(after[static_cast<size_t>(i)], static_cast<float>(i) + 100.0f) << i;
}

TEST(CudaGraph, the_private_pool_keeps_its_blocks_from_other_allocations) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  const int64_t n = 4096;
  std::vector<float> hx = host_values(n, 5);
  Array x = from_data(hx, Shape{n}, d);
  Stream s = Stream::create(d);
  cuda::Graph g;
  Array z;
  const void* temporary = nullptr;
  {
    cuda::GraphCapture capture(g, s);
    Array t = x + 1.0f;
    temporary = t.data_ptr();
    z = t * 2.0f;
  }  // t was freed during the capture: its block stays in the graph's pool
  const void* z_address = z.data_ptr();
  std::vector<Array> eager;
  {
    StreamGuard guard(s);
    for (int i = 0; i < 64; ++i) {
      eager.push_back(full({n}, 7.0f, float32, d));
      ASSERT_NE(eager.back().data_ptr(), temporary) << "an eager array got the graph's temporary";
      ASSERT_NE(eager.back().data_ptr(), z_address);
    }
  }
  for (int r = 0; r < 3; ++r) g.replay();  // each replay writes the temporary's address again
  s.synchronize();
  EXPECT_EQ(z.data_ptr(), z_address);
  for (const Array& e : eager)
    for (float v : e.to_vector<float>()) ASSERT_EQ(v, 7.0f) << "a replay overwrote an eager array";
  std::vector<float> gz = z.to_vector<float>();
  for (size_t i = 0; i < hx.size(); ++i) ASSERT_NEAR(gz[i], (hx[i] + 1.0f) * 2.0f, 1e-6) << i;
}

TEST(CudaGraph, destroying_the_graph_releases_its_pool) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array x = full({1 << 20}, 3.0f, float32, d);  // 4 MiB: a large-pool segment
  Stream s = Stream::create(d);
  s.synchronize();
  cuda::empty_cache(d);
  const cuda::MemoryStats before = cuda::memory_stats(d);
  {
    cuda::Graph g;
    Array out;
    {
      cuda::GraphCapture capture(g, s);
      Array t = x * 2.0f;
      out = t + 1.0f;
    }
    const cuda::MemoryStats during = cuda::memory_stats(d);
    EXPECT_EQ(during.graph_pools, before.graph_pools + 1);
    EXPECT_GE(during.graph_reserved, before.graph_reserved + 8u * 1024 * 1024);
    EXPECT_GE(during.reserved, before.reserved + 8u * 1024 * 1024);
    g.replay();
    EXPECT_EQ(out.to_vector<float>()[12345], 7.0f);
    out = Array();
  }  // the graph goes: its pool is released
  s.synchronize();
  const cuda::MemoryStats after = cuda::memory_stats(d);
  EXPECT_EQ(after.graph_pools, before.graph_pools);
  EXPECT_EQ(after.graph_reserved, before.graph_reserved);
  cuda::empty_cache(d);
  EXPECT_LE(cuda::memory_stats(d).reserved, before.reserved);
}

TEST(CudaGraph, synchronising_during_a_capture_throws_a_clear_error_and_the_capture_goes_on) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array x = full({256}, 2.0f, float32, d);
  Array host = full({256}, 1.0f, float32, cpu());
  Stream s = Stream::create(d);
  Event e = Event::create(d);
  cuda::Graph g;
  Array y;
  {
    cuda::GraphCapture capture(g, s);
    y = x * 3.0f;
    const std::string capturing = "is capturing a CUDA graph; move it after the capture";
    expect_error<ValueError>([&] { (void)y.sum().item<float>(); }, {"item()", "cannot synchronise", capturing});
    expect_error<ValueError>([&] { (void)y.to_vector<float>(); }, {"cannot synchronise", capturing});
    expect_error<ValueError>(
        [&] {
          std::ostringstream os;
          os << y;
        },
        {"printing", capturing});
    expect_error<ValueError>([&] { (void)y.to(cpu()); }, {"to(cpu())", capturing});
    expect_error<ValueError>([&] { s.synchronize(); }, {"Stream::synchronize cannot synchronise", capturing});
    expect_error<ValueError>([&] { synchronize(d); }, {"synchronize(cuda:0)", capturing});
    expect_error<ValueError>([&] { e.synchronize(); }, {"Event::synchronize", capturing});
    expect_error<ValueError>([&] { x.copy_from(host); }, {"pageable host memory", "pinned", "non_blocking"});
    expect_error<ValueError>([&] { cuda::empty_cache(d); }, {"empty_cache", "after the capture"});
    expect_error<ValueError>([&] { cuda::empty_host_cache(); }, {"empty_host_cache", "after the capture"});
    y += 1.0f;  // still capturing: the refused calls touched nothing
  }
  g.replay();
  s.synchronize();
  for (float v : y.to_vector<float>()) ASSERT_EQ(v, 7.0f);
}

TEST(CudaGraph, the_default_stream_cannot_be_captured) {
  KILN_REQUIRE_GPU();
  cuda::Graph g;
  expect_error<ValueError>([&] { cuda::GraphCapture capture(g, Stream::default_stream(gpu(0))); },
                           {"default (legacy) stream", "cannot be captured", "Stream::create"});
  EXPECT_FALSE(g.is_capturing());
}

TEST(CudaGraph, capture_makes_the_streams_gpu_current_and_restores_the_thread_state) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  ASSERT_EQ(current_device(), cpu());
  Stream s = Stream::create(d);
  cuda::Graph g;
  Array z;
  {
    cuda::GraphCapture capture(g, s);
    EXPECT_EQ(current_device(), d);
    EXPECT_EQ(Stream::current(d), s);
    z = ones({8}) * 5.0f;  // created on the capturing GPU
  }
  EXPECT_EQ(current_device(), cpu());
  EXPECT_EQ(Stream::current(d).handle(), nullptr);
  EXPECT_EQ(cuda_impl::thread_captures(), 0);
  EXPECT_EQ(z.device(), d);
  g.replay();
  s.synchronize();
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 5.0f);
  expect_error<ValueError>([&] { cuda::GraphCapture again(g, s); }, {"already holds a captured graph", "reset()"});
  g.reset();
  EXPECT_FALSE(g.is_ready());
  {
    cuda::GraphCapture again(g, s);
    z += 1.0f;
  }  // a reset graph captures again
  g.replay();
  s.synchronize();
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 6.0f);
}

TEST(CudaGraph, capture_on_a_gpu_that_is_not_the_current_device) {
  KILN_REQUIRE_GPU();
  if (num_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  Device d0 = gpu(0), d1 = gpu(1);
  DeviceGuard current(d0);
  Array x = arange(100, float32, d1);
  Stream s = Stream::create(d1);
  cuda::Graph g;
  Array y;
  {
    cuda::GraphCapture capture(g, s);
    y = x * 2.0f + zeros({100});  // zeros lands on cuda:1, the capture's device
  }
  EXPECT_EQ(current_device(), d0);
  EXPECT_EQ(y.device(), d1);
  g.replay();
  s.synchronize();
  std::vector<float> v = y.to_vector<float>();
  for (int i = 0; i < 100; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], 2.0f * static_cast<float>(i));
  expect_error<DeviceError>([&] { g.replay(Stream::create(d0)); }, {"captured on cuda:1", "cuda:0"});
}

TEST(CudaGraph, an_exception_in_the_capture_scope_discards_the_capture) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array x = ones({64}, float32, d);
  Stream s = Stream::create(d);
  const size_t pools = cuda::memory_stats(d).graph_pools;
  cuda::Graph g;
  EXPECT_THROW(
      {
        cuda::GraphCapture capture(g, s);
        Array t = x + 1.0f;
        (void)(t + ones({3}, float32, d));  // ShapeError inside the capture
      },
      ShapeError);
  EXPECT_FALSE(g.is_capturing());
  EXPECT_FALSE(g.is_ready());
  EXPECT_EQ(cuda_impl::thread_captures(), 0);
  EXPECT_EQ(Stream::current(d).handle(), nullptr);
  s.synchronize();  // no longer capturing
  EXPECT_EQ(cuda::memory_stats(d).graph_pools, pools);
  expect_error<ValueError>([&] { g.replay(); }, {"nothing was captured"});
}

TEST(CudaGraph, pinned_asynchronous_copies_are_captured) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  const int64_t n = 5000;
  Array in = empty({n}, float32, cpu(), {.pinned = true}), out = empty({n}, float32, cpu(), {.pinned = true});
  auto* pin = static_cast<float*>(in.data_ptr());
  for (int64_t i = 0; i < n; ++i) pin[i] = static_cast<float>(i);
  Array dev = empty({n}, float32, d);
  Stream s = Stream::create(d);
  cuda::Graph g;
  {
    cuda::GraphCapture capture(g, s);
    dev.copy_from(in, {.non_blocking = true});
    Array r = dev * 2.0f;
    out.copy_from(r, {.non_blocking = true});
    expect_error<ValueError>([&] { out.copy_from(r); }, {"cannot synchronise", "non_blocking"});
  }
  g.replay();
  s.synchronize();
  const auto* pout = static_cast<const float*>(out.data_ptr());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(pout[i], 2.0f * static_cast<float>(i)) << i;
  for (int64_t i = 0; i < n; ++i) pin[i] = -static_cast<float>(i);  // new host input, same buffer
  g.replay();
  s.synchronize();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(pout[i], -2.0f * static_cast<float>(i)) << i;
}

TEST(CudaGraph, raw_kernels_compiled_during_the_capture_are_captured) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array x = arange(1000, float32, d);
  Stream s = Stream::create(d);
  // A source no cache has seen: NVRTC compiles it and the driver loads it during the capture.
  const std::string tag = std::to_string(std::random_device{}());
  const std::string source = "// " + tag +
                             "\nextern \"C\" __global__ void triple_plus_one(float* x, int n) {\n"
                             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                             "  if (i < n) x[i] = 3.0f * x[i] + 1.0f;\n}\n";
  const uint64_t compiles = cuda_impl::cache_stats().nvrtc_compiles;
  cuda::Graph g;
  {
    cuda::GraphCapture capture(g, s);
    auto module = cuda_impl::load_module(source, "triple_plus_one", 0);
    cudaKernel_t kernel = module->function("triple_plus_one");
    void* data = x.data_ptr();
    int n = 1000;
    void* args[] = {&data, &n};
    cuda_impl::launch(kernel, dim3(4), dim3(256), 0, static_cast<cudaStream_t>(s.handle()), args, "triple_plus_one");
  }
  EXPECT_GE(cuda_impl::cache_stats().nvrtc_compiles, compiles + 1);
  EXPECT_EQ(g.num_nodes(), 1u);
  g.replay();
  g.replay();
  s.synchronize();
  std::vector<float> v = x.to_vector<float>();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], 9.0f * static_cast<float>(i) + 4.0f) << i;
}

TEST(CudaGraph, graphs_sharing_a_pool_replay_in_capture_order) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array x = full({512}, 1.0f, float32, d);
  Stream s = Stream::create(d);
  const size_t pools = cuda::memory_stats(d).graph_pools;
  cuda::Graph first, second;
  Array a, b;
  {
    cuda::GraphCapture capture(first, s);
    a = x + 1.0f;
  }
  {
    cuda::GraphCapture capture(second, s, first.pool());
    b = a * 2.0f;
  }
  EXPECT_EQ(cuda::memory_stats(d).graph_pools, pools + 1);
  EXPECT_EQ(first.pool().device(), d);
  {
    StreamGuard guard(s);
    x.fill(5.0f);
  }
  first.replay();
  second.replay();
  s.synchronize();
  for (float v : b.to_vector<float>()) ASSERT_EQ(v, 12.0f);
}

TEST(CudaGraph, a_stream_forked_into_the_capture_with_events_is_captured_too) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array x = arange(300, float32, d);
  Stream s = Stream::create(d), side = Stream::create(d);
  const size_t graph_reserved = cuda::memory_stats(d).graph_reserved;
  cuda::Graph g;
  Array a, b, c;
  {
    cuda::GraphCapture capture(g, s);
    Event fork = Event::create(d, false), join = Event::create(d, false);
    fork.record(s);
    fork.wait(side);  // side joins the capture
    {
      StreamGuard on_side(side);
      b = x * 3.0f;  // allocated on the side stream: from the graph's pool too
    }
    a = x + 1.0f;  // concurrently on s
    join.record(side);
    join.wait(s);
    c = a + b;
  }
  EXPECT_GT(cuda::memory_stats(d).graph_reserved, graph_reserved);
  g.replay();
  s.synchronize();
  std::vector<float> v = c.to_vector<float>();
  for (int i = 0; i < 300; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], 4.0f * static_cast<float>(i) + 1.0f) << i;
}

TEST(CudaGraph, replay_on_another_stream_of_the_same_gpu) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array x = full({2048}, 4.0f, float32, d);
  // Both streams non-blocking: neither waits for the other nor for the legacy default stream.
  Stream capture_stream = Stream::create(d, {.non_blocking = true}), other = Stream::create(d, {.non_blocking = true});
  cuda::Graph g;
  Array y;
  {
    cuda::GraphCapture capture(g, capture_stream);
    y = sqrt(x);
  }
  EXPECT_EQ(g.stream(), capture_stream);
  synchronize(d);  // x is ready for the non-blocking streams
  // The capture stream stays busy for 200 ms: a replay wrongly queued on it would not have run when `other`
  // is synchronised, and y (never written by the capture itself) would not hold the square roots yet.
  kiln_test::spin(capture_stream, 0.2);
  g.replay(other);
  other.synchronize();
  for (float v : y.to(cpu(), other).to_vector<float>()) ASSERT_EQ(v, 2.0f);  // read on other, not behind the spin
  EXPECT_FALSE(capture_stream.query()) << "the capture stream finished its 200 ms spin: the check proves nothing";
  capture_stream.synchronize();  // the next test starts on an idle GPU
  expect_error<DeviceError>([&] { g.replay(Stream::create(cpu())); }, {"Graph::replay", "cpu"});
}

Array gpu_ints(const std::vector<int64_t>& v, Device d) {
  return from_data(v, Shape{static_cast<int64_t>(v.size())}, d);
}

TEST(CudaGraph, index_checks_run_at_every_replay_and_report_at_the_next_synchronisation) {
  KILN_REQUIRE_GPU();
  {
    const Device d = gpu(0);
    const Array a = arange(10, float32, d);
    Array idx = gpu_ints({1, 2}, d);
    (void)take(a, idx);  // compile outside the capture
    const Stream s = Stream::create(d);
    synchronize(d);  // the capture stream reads what the current stream wrote
    cuda::Graph g;
    Array out;
    {
      cuda::GraphCapture capture(g, s);
      out = take(a, idx);
    }
    g.replay();
    s.synchronize();
    EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2}));
    idx.copy_from(gpu_ints({4, 10}, d));
    Stream::current(d).synchronize();
    g.replay();
    expect_error<ShapeError>([&] { s.synchronize(); }, {"take", "index 10", "size 10"});
    idx.copy_from(gpu_ints({-1, 3}, d));
    Stream::current(d).synchronize();
    g.replay();
    s.synchronize();
    EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{9, 3})) << "a replay after the error works";
  }
}

}  // namespace

#endif  // KILN_WITH_CUDA
