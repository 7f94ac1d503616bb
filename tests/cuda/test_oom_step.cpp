// Out of memory in the middle of a training step (issue "Never hang, never lose a run", docs/reliability.md): a
// step whose batch does not fit under the allocator's limit throws OutOfMemoryError naming the figures; the
// unwound step leaves no memory held and the cache released; the parameters and the optimizer's state are those
// of before the step; the same process then trains with a smaller batch, and that step equals the CPU's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "test_util.hpp"

#ifdef KILN_WITH_CUDA  // kiln::cuda's allocator functions exist in CUDA builds only
#include "kiln/cuda.hpp"

namespace {

using namespace kiln;

std::shared_ptr<nn::Sequential> mlp(Device device) {
  random::seed(7);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(512, 2048, true, float32, device));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(2048, 2048, true, float32, device));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(2048, 10, true, float32, device));
  return model;
}

void step(nn::Module& model, optim::Optimizer& opt, const Array& x, const Array& y) {
  opt.zero_grad();
  Array loss = nn::cross_entropy(model(x), y);
  loss.backward();
  opt.step();
}

nn::StateDict on_cpu(const nn::StateDict& state) {
  nn::StateDict out;
  for (const auto& [name, value] : state) out.insert(name, value.to(cpu()));
  return out;
}

std::vector<Array> host_copies(nn::Module& model) {
  std::vector<Array> out;
  for (const Array& p : model.parameters()) out.push_back(p.detach().to(cpu()));
  return out;
}

TEST(OomStep, a_step_past_the_limit_throws_releases_its_memory_and_a_smaller_batch_then_trains) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  cuda::empty_cache(g);
  auto model = mlp(g);
  optim::Adam opt(model->parameters(), {.lr = 1e-3});
  // One step first, so Adam's moments exist (their state must survive the failed step unchanged).
  random::seed(1);
  step(*model, opt, random::normal({64, 512}, 0.0, 1.0, float32, g), random::randint(0, 10, {64}, int64, g));
  synchronize(g);
  const std::vector<Array> before = host_copies(*model);
  const size_t held = cuda::memory_stats(g).allocated;
  // Room for the model, its moments and a small batch; a batch of 65536 needs ~1.5 GB of activations.
  const size_t limit = cuda::memory_stats(g).reserved + (size_t{96} << 20);
  cuda::set_memory_limit(g, limit);
  struct Unlimit {
    Device d;
    ~Unlimit() { cuda::set_memory_limit(d, 0); }
  } unlimit{g};
  const uint64_t ooms = cuda::memory_stats(g).ooms;
  try {
    step(*model, opt, random::normal({65536, 512}, 0.0, 1.0, float32, g), random::randint(0, 10, {65536}, int64, g));
    FAIL() << "a batch of 65536 fit under a limit of " << limit << " bytes";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tried to allocate"), std::string::npos) << m;
    EXPECT_NE(m.find("limit"), std::string::npos) << m;
    EXPECT_NE(m.find("smaller batches"), std::string::npos) << m;  // says what to do
  }
  synchronize(g);
  const cuda::MemoryStats after = cuda::memory_stats(g);
  EXPECT_EQ(after.ooms, ooms + 1);
  EXPECT_EQ(after.allocated, held) << "the unwound step kept memory";
  EXPECT_LE(after.reserved, limit);
  // The failed step stopped before opt.step(): the parameters are those of before it.
  const std::vector<Array> unchanged = host_copies(*model);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(array_equal(unchanged[i], before[i])) << "parameter " << i;

  // The same process goes on with a smaller batch; the step equals the same step on the CPU.
  auto reference = mlp(cpu());
  reference->load_state_dict(on_cpu(model->state_dict()));
  optim::Adam ref_opt(reference->parameters(), {.lr = 1e-3});
  ref_opt.load_state_dict(on_cpu(opt.state_dict()));
  random::seed(2);
  const Array x = random::normal({256, 512}, 0.0, 1.0, float32, cpu());
  const Array y = random::randint(0, 10, {256}, int64, cpu());
  step(*model, opt, x.to(g), y.to(g));
  step(*reference, ref_opt, x, y);
  const std::vector<Array> trained = host_copies(*model);
  const std::vector<Array> want = host_copies(*reference);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_FALSE(array_equal(trained[i], before[i])) << "parameter " << i << " did not train";
    EXPECT_TRUE(allclose(trained[i], want[i], 1e-4, 1e-5)) << "parameter " << i << " differs from the CPU's step";
  }
}

}  // namespace
#endif  // KILN_WITH_CUDA
