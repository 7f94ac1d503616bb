// Random numbers in CUDA graphs (src/cuda/graph.cpp, src/cuda/random.cpp, core/random.cpp): draws captured
// in a graph are fresh at each replay, and replay k gives what the k-th eager run would have given. The
// reference is the CPU backend drawing the same calls from the generator state each replay started at
// (uniform and randint bit for bit, normal within 4 ulp). Without a GPU: the generated kernels that read the
// graph's state word compile to PTX (tests/core/test_random.cpp checks the generator's block reservation).
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/random.hpp"
#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;

namespace {

std::vector<unsigned char> bytes_of(const Array& x) {
  const Array host = x.to(kiln::cpu()).contiguous();
  std::vector<unsigned char> bytes(static_cast<size_t>(host.nbytes()));
  if (!bytes.empty()) std::memcpy(bytes.data(), host.data_ptr(), bytes.size());
  return bytes;
}

/// float64 normal draws (stddev 2) agree within 4 ulp of max(|x|, stddev) (log/sin/cos differ between math
/// libraries), as in test_random_gpu.cpp.
void expect_normal_close(const Array& gpu_values, const Array& cpu_values, const std::string& what) {
  const std::vector<double> g = gpu_values.to_vector<double>(), c = cpu_values.to_vector<double>();
  ASSERT_EQ(g.size(), c.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_LE(std::fabs(g[i] - c[i]), 4 * std::numeric_limits<double>::epsilon() * std::max(std::fabs(c[i]), 2.0))
        << what << " element " << i << ": " << g[i] << " vs " << c[i];
}

/// The draws of the training-step-like graph below: uniform, normal, randint and a dropout mask applied to x.
struct Draws {
  Array u, n, r, dropped;
};
// Blocks per run, hand-computed: uniform f32 1001 -> 251, normal f64 37 -> 19, randint (span 105) 10 -> 3,
// uniform f32 1000 (the mask) -> 250.
constexpr uint64_t kStepBlocks = 251 + 19 + 3 + 250;

Draws step(const Array& x, Device d) {
  Draws out;
  out.u = random::uniform({1001}, -1.0, 3.0, float32, d);
  out.n = random::normal({37}, 0.5, 2.0, float64, d);
  out.r = random::randint(-5, 100, {10}, int32, d);
  const Array keep = random::uniform({1000}, float32, d) >= 0.25f;  // dropout with p = 0.25
  out.dropped = x * keep.astype(float32) * (1.0f / 0.75f);
  return out;
}

/// Expects the GPU draws (of a replay or an eager run) to equal the CPU's from `state`.
void expect_like_cpu(const Draws& gpu_draws, const Array& x_cpu, const random::GeneratorState& state,
                     const std::string& what) {
  const random::GeneratorState saved = random::get_state();
  random::set_state(state);
  const Draws ref = step(x_cpu, kiln::cpu());
  random::set_state(saved);
  EXPECT_EQ(bytes_of(gpu_draws.u), bytes_of(ref.u)) << what << ": uniform";
  expect_normal_close(gpu_draws.n, ref.n, what + ": normal");
  EXPECT_EQ(bytes_of(gpu_draws.r), bytes_of(ref.r)) << what << ": randint";
  EXPECT_EQ(bytes_of(gpu_draws.dropped), bytes_of(ref.dropped)) << what << ": dropout";
}

/// Captures one float32 uniform draw of n elements on `stream` into `graph`: the array each replay fills.
Array capture_uniform(cuda::Graph& graph, const Stream& stream, int64_t n) {
  cuda::GraphCapture capture(graph, stream);
  return random::uniform({n}, float32, stream.device());
}

/// Expects `draws` (float32 uniform draws in [0, 1) of any device) to be the CPU's draws of the same sizes made
/// one after the other from `state`.
void expect_cpu_uniforms(const random::GeneratorState& state, const std::vector<Array>& draws) {
  const random::GeneratorState saved = random::get_state();
  random::set_state(state);
  for (size_t i = 0; i < draws.size(); ++i)
    EXPECT_EQ(bytes_of(draws[i]), bytes_of(random::uniform({draws[i].size()}, float32, kiln::cpu()))) << "draw " << i;
  random::set_state(saved);
}

}  // namespace

TEST(GraphRandomCodegen, kernels_read_the_graph_state_word_and_compile_to_ptx) {
  cuda_impl::CompileOptions options;
  options.options = cuda_impl::builtin_kernel_options();
  const std::string source = cuda_impl::random_source({detail::RandomDistribution::Uniform, DType::Float32, false});
  EXPECT_NE(source.find("const unsigned long long* __restrict__ state"), std::string::npos);
  EXPECT_NE(source.find("offset += state[1]"), std::string::npos);
  const std::string ptx =
      cuda_impl::compile_ptx(cuda_impl::graph_state_source(), "kiln_random_graph_state", 90, options);
  EXPECT_NE(ptx.find(".entry kiln_random_graph_state("), std::string::npos);
}

TEST(GraphRandom, each_replay_draws_fresh_numbers_equal_to_the_cpu_at_the_generators_offset) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const Array x_cpu = arange(1000, float32, kiln::cpu()) + 1.0f;
  const Array x = x_cpu.to(d);
  Stream s = Stream::create(d);
  s.synchronize();
  random::set_state({1234, 10});
  cuda::Graph g;
  Draws captured;
  {
    cuda::GraphCapture capture(g, s);
    captured = step(x, d);
  }
  EXPECT_EQ(random::get_state().offset, 10u) << "a capture must not consume the generator";
  std::vector<unsigned char> previous;
  for (int k = 0; k < 3; ++k) {
    const random::GeneratorState before = random::get_state();
    g.replay();
    EXPECT_EQ(random::get_state().offset, before.offset + kStepBlocks) << "replay " << k;
    s.synchronize();
    expect_like_cpu(captured, x_cpu, before, "replay " + std::to_string(k));
    const std::vector<unsigned char> now = bytes_of(captured.u);
    EXPECT_NE(now, previous) << "replay " << k << " repeated the previous numbers";
    previous = now;
    // An eager draw in between takes the next blocks; the following replay starts after them.
    const random::GeneratorState eager_state = random::get_state();
    const Draws eager = step(x, d);
    expect_like_cpu(eager, x_cpu, eager_state, "eager run after replay " + std::to_string(k));
  }
  // seed() between replays takes effect at the next replay.
  random::seed(99);
  g.replay();
  s.synchronize();
  expect_like_cpu(captured, x_cpu, {99, 0}, "replay after seed(99)");
  EXPECT_EQ(random::get_state().offset, kStepBlocks);
}

TEST(GraphRandom, two_graphs_and_eager_draws_interleave_on_the_default_generator) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  Stream sa = Stream::create(d), sb = Stream::create(d);
  cuda::Graph a, b;
  const Array ua = capture_uniform(a, sa, 9);  // 3 blocks
  Array nb;
  {
    cuda::GraphCapture capture(b, sb);
    nb = random::randint(0, int64_t{1} << 40, {5}, int64, d);  // wide: 3 blocks
  }
  random::set_state({7, 0});
  // The order: a, b, eager, a (on another stream), b; each read before the next replay overwrites it.
  std::vector<std::vector<unsigned char>> gpu_bytes;
  a.replay();
  sa.synchronize();
  gpu_bytes.push_back(bytes_of(ua));
  b.replay();
  sb.synchronize();
  gpu_bytes.push_back(bytes_of(nb));
  gpu_bytes.push_back(bytes_of(random::uniform({6}, float64, d)));
  a.replay(sb);  // on b's stream: the state write goes there too
  sb.synchronize();
  gpu_bytes.push_back(bytes_of(ua));
  b.replay();
  sb.synchronize();
  gpu_bytes.push_back(bytes_of(nb));
  const random::GeneratorState after_gpu = random::get_state();

  random::set_state({7, 0});
  std::vector<std::vector<unsigned char>> cpu_bytes;
  cpu_bytes.push_back(bytes_of(random::uniform({9}, float32, kiln::cpu())));
  cpu_bytes.push_back(bytes_of(random::randint(0, int64_t{1} << 40, {5}, int64, kiln::cpu())));
  cpu_bytes.push_back(bytes_of(random::uniform({6}, float64, kiln::cpu())));
  cpu_bytes.push_back(bytes_of(random::uniform({9}, float32, kiln::cpu())));
  cpu_bytes.push_back(bytes_of(random::randint(0, int64_t{1} << 40, {5}, int64, kiln::cpu())));
  EXPECT_EQ(after_gpu.offset, random::get_state().offset);
  EXPECT_EQ(after_gpu.offset, 3u + 3u + 3u + 3u + 3u);
  ASSERT_EQ(gpu_bytes.size(), cpu_bytes.size());
  for (size_t i = 0; i < gpu_bytes.size(); ++i) EXPECT_EQ(gpu_bytes[i], cpu_bytes[i]) << "draw " << i;
}

TEST(GraphRandom, cpu_draws_and_draws_on_other_streams_during_a_capture_stay_eager) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  Stream s = Stream::create(d), other = Stream::create(d);
  random::set_state({3, 5});
  cuda::Graph g;
  Array captured, on_cpu, on_other;
  {
    cuda::GraphCapture capture(g, s);
    captured = random::uniform({4}, float32, d);          // relative block 0 of the graph
    on_cpu = random::uniform({8}, float32, kiln::cpu());  // eager: blocks 5, 6
    StreamGuard guard(other);
    on_other = random::uniform({4}, float32, d);  // not captured: block 7, run now
  }
  other.synchronize();
  EXPECT_EQ(random::get_state().offset, 8u);
  g.replay();
  s.synchronize();
  EXPECT_EQ(random::get_state().offset, 9u);
  expect_cpu_uniforms({3, 5}, {on_cpu, on_other, captured});
}

TEST(GraphRandom, a_stream_forked_into_the_capture_draws_from_the_graphs_state) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  Stream s = Stream::create(d), side = Stream::create(d);
  cuda::Graph g;
  Array first, second;
  {
    cuda::GraphCapture capture(g, s);
    Event fork = Event::create(d, false), join = Event::create(d, false);
    first = random::uniform({5}, float32, d);  // 2 blocks
    fork.record(s);
    fork.wait(side);
    {
      StreamGuard on_side(side);
      second = random::randint(0, 10, {3}, int8, d);  // 1 block, on the forked stream
    }
    join.record(side);
    join.wait(s);
  }
  for (uint64_t seed : {11u, 12u}) {
    random::set_state({seed, 1});
    g.replay();
    s.synchronize();
    random::set_state({seed, 1});
    EXPECT_EQ(bytes_of(first), bytes_of(random::uniform({5}, float32, kiln::cpu()))) << "seed " << seed;
    EXPECT_EQ(bytes_of(second), bytes_of(random::randint(0, 10, {3}, int8, kiln::cpu()))) << "seed " << seed;
  }
}

TEST(GraphRandom, a_replay_during_another_capture_is_eager_and_reserves_its_blocks_then) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  Stream sa = Stream::create(d), sb = Stream::create(d);
  cuda::Graph a, b;
  const Array ua = capture_uniform(a, sa, 4);  // 1 block
  Array ub;
  random::set_state({8, 0});
  {
    cuda::GraphCapture capture(b, sb);
    ub = random::uniform({6}, float32, d);  // 2 blocks, relative to b's state
    a.replay();                             // on sa, not captured: block 0 now
  }
  sa.synchronize();
  EXPECT_EQ(random::get_state().offset, 1u);
  b.replay();  // blocks 1, 2
  sb.synchronize();
  expect_cpu_uniforms({8, 0}, {ua, ub});
}

TEST(GraphRandom, a_replay_captured_into_another_graph_draws_from_the_outer_graphs_state) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  Stream s_inner = Stream::create(d), s_outer = Stream::create(d);
  cuda::Graph inner, outer;
  const Array a = capture_uniform(inner, s_inner, 4);  // 1 block
  Array before, after;
  try {
    cuda::GraphCapture capture(outer, s_outer);
    before = random::uniform({4}, float32, d);  // relative block 0
    inner.replay(s_outer);                      // relative block 1, from the outer graph's state
    after = random::uniform({4}, float32, d);   // relative block 2
  } catch (const CudaError& e) {
    GTEST_SKIP() << "this CUDA cannot capture a graph launch into another graph: " << e.what();
  }
  random::set_state({21, 4});
  outer.replay();
  s_outer.synchronize();
  EXPECT_EQ(random::get_state().offset, 7u);
  expect_cpu_uniforms({21, 4}, {before, a, after});
}

// The first draw of a capture comes after a temporary that the captured work made and freed (a layer's output
// before its activation). The graph's state word must not take that freed block: each replay writes the word
// before the graph starts and the temporary's node would overwrite it mid-replay (the draws then read a wrong
// seed: a graphed dropout MLP trained differently from the eager one).
TEST(GraphRandom, a_draw_after_a_temporary_freed_in_the_capture_reads_the_replays_state) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  Stream s = Stream::create(d);
  const Array x = arange(1280, float32, d) * 0.001f - 0.5f;
  s.synchronize();
  cuda::Graph g;
  Array u, y;
  {
    cuda::GraphCapture capture(g, s);
    Array t = x * 3.0f;  // small blocks of the graph's pool, made and freed before the first draw
    y = relu(t) + 1.0f;
    t = Array();
    u = random::uniform({1280}, float32, d);
  }
  for (uint64_t seed : {7u, 8u}) {
    random::set_state({seed, 5});
    g.replay();
    s.synchronize();
    expect_cpu_uniforms({seed, 5}, {u});
  }
  EXPECT_EQ(bytes_of(y), bytes_of(relu(x * 3.0f) + 1.0f));
}

TEST(GraphRandom, a_generator_object_refuses_to_draw_in_a_capture_and_the_capture_goes_on) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  Stream s = Stream::create(d);
  cuda::Graph g;
  random::Generator own(3);
  Array u;
  random::set_state({5, 0});
  {
    cuda::GraphCapture capture(g, s);
    kiln_test::expect_error<ValueError>([&] { (void)own.uniform({4}, 0.0, 1.0, float32, d); },
                                        {"random.Generator", "CUDA graph", "kiln::random::uniform"});
    u = random::uniform({4}, float32, d);  // the default generator still draws in the capture
  }
  EXPECT_EQ(own.get_state().offset, 0u);
  g.replay();
  s.synchronize();
  expect_cpu_uniforms({5, 0}, {u});
}

#endif  // KILN_WITH_CUDA
