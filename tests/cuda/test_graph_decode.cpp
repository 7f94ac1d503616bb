// Graph-captured decoding (models::generate's cuda_graph): a static KVCache step captured once and replayed
// keeps the device position equal to the host's length and gives the dynamic cache's logits at every step.
// Skipped without a GPU.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/lm_test_util.hpp"
#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "kiln/models.hpp"
#include "test_util.hpp"

using namespace kiln;

namespace {

int64_t device_position(const models::KVCache& cache) {
  return cache.position_array().to(cpu()).to_vector<int64_t>().front();
}

TEST(GraphDecode, a_captured_advance_moves_the_device_position_once_per_replay) {
  KILN_REQUIRE_GPU();
  models::KVCache cache(1, 1, 1, 8, 4, float32, gpu(0));
  cache.advance(2);
  cache.set_static(true);  // the device's position is kept while static
  cuda::Graph g;
  const Stream side = Stream::create(gpu(0));
  {
    cuda::GraphCapture capture(g, side);
    cache.advance(1);
  }
  EXPECT_EQ(device_position(cache), 2) << "the capture ran the add";
  for (int64_t k = 1; k <= 3; ++k) {
    g.replay(Stream::current(gpu(0)));
    EXPECT_EQ(device_position(cache), 2 + k) << "replay " << k;
  }
}

// Each action between replays leaves the captured cache's device position alone; each replay moves it by one.
TEST(GraphDecode, only_replays_move_the_captured_position) {
  KILN_REQUIRE_GPU();
  NoGradGuard no_grad;
  const Device d = gpu(0);
  auto gpt = models::load_gpt2(kiln_test::kGptGolden + "gpt2_tiny.safetensors", kiln_test::tiny_gpt2_config(),
                               float32, d);
  gpt->eval();
  models::KVCache other = gpt->make_cache(1, 12), fixed = gpt->make_cache(1, 12);
  gpt->forward(from_data(std::vector<int64_t>{3, 14, 15}, Shape{1, 3}, d), fixed);
  gpt->forward(from_data(std::vector<int64_t>{3, 14, 15}, Shape{1, 3}, d), other);
  fixed.set_static(true);
  Array tokens = from_data(std::vector<int64_t>{5}, Shape{1, 1}, d);
  gpt->forward(tokens, fixed);
  ASSERT_EQ(device_position(fixed), 4);
  cuda::Graph g;
  {
    const Stream side = Stream::create(d);
    cuda::GraphCapture capture(g, side);
    gpt->forward(tokens, fixed);
  }
  EXPECT_EQ(device_position(fixed), 4) << "after the capture";
  g.replay(Stream::current(d));
  EXPECT_EQ(device_position(fixed), 5) << "after replay 1";
  g.replay(Stream::current(d));
  EXPECT_EQ(device_position(fixed), 6) << "after replay 2 (no work between)";
  gpt->forward(tokens, other);
  EXPECT_EQ(device_position(fixed), 6) << "after an eager forward of another cache";
  tokens.copy_from(from_data(std::vector<int64_t>{9}, Shape{1, 1}));
  EXPECT_EQ(device_position(fixed), 6) << "after writing the tokens";
  g.replay(Stream::current(d));
  EXPECT_EQ(device_position(fixed), 7) << "after replay 3";
  EXPECT_EQ(other.length(), 4) << "the other cache (prompt of 3, one step)";
  EXPECT_FALSE(other.position_array().defined()) << "a dynamic cache keeps no device position";
}

template <class Model>
void expect_replayed_steps_equal_dynamic(Model& model, const std::string& what) {
  const Device d = gpu(0);
  const std::vector<int64_t> prompt{3, 14, 15};
  models::KVCache dynamic = model.make_cache(1, 12), fixed = model.make_cache(1, 12);
  model.forward(from_data(prompt, Shape{1, 3}, d), dynamic);
  model.forward(from_data(prompt, Shape{1, 3}, d), fixed);
  fixed.set_static(true);
  Array tokens = from_data(std::vector<int64_t>{5}, Shape{1, 1}, d);
  kiln_test::expect_close(model.forward(tokens, fixed), model.forward(tokens, dynamic), 1e-5, what + ": eager step");
  cuda::Graph g;
  Array logits;
  const Stream side = Stream::create(d);
  {
    cuda::GraphCapture capture(g, side);
    logits = model.forward(tokens, fixed);
  }
  EXPECT_EQ(fixed.length(), 5) << what;
  EXPECT_EQ(device_position(fixed), 4) << what << ": the capture ran work";
  for (int64_t step = 0; step < 6; ++step) {
    const std::vector<int64_t> next{(7 * step + 2) % 50};
    tokens.copy_from(from_data(next, Shape{1, 1}));
    if (step > 0) fixed.replayed(1);
    g.replay(Stream::current(d));
    const Array want = model.forward(from_data(next, Shape{1, 1}, d), dynamic);
    EXPECT_EQ(device_position(fixed), fixed.length()) << what << ": step " << step;
    kiln_test::expect_close(logits, want, 1e-5, what + ": replayed step " + std::to_string(step));
  }
}

TEST(GraphDecode, replayed_static_steps_equal_the_dynamic_caches_logits) {
  KILN_REQUIRE_GPU();
  NoGradGuard no_grad;
  auto gpt = models::load_gpt2(kiln_test::kGptGolden + "gpt2_tiny.safetensors", kiln_test::tiny_gpt2_config(),
                               float32, gpu(0));
  gpt->eval();
  expect_replayed_steps_equal_dynamic(*gpt, "GPT-2");
  models::Llama llama(kiln_test::tiny_llama_config(), float32, gpu(0));
  llama.load_hf_state_dict(nn::load_safetensors(kiln_test::kGptGolden + "llama_tiny.safetensors"));
  llama.eval();
  expect_replayed_steps_equal_dynamic(llama, "Llama");
}

}  // namespace

#endif  // KILN_WITH_CUDA
