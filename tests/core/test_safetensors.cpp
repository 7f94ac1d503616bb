// Checkpoints in the safetensors format: files of the Python package (tests/golden/safetensors_golden.py) read
// onto every backend, a model and its optimizer saved and restored, broken files refused with clear errors.
// scripts.safetensors_interop checks that the package reads what kiln writes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"

namespace kiln {
namespace {

std::string golden(const std::string& name) { return std::string(KILN_GOLDEN_DIR) + "/safetensors/" + name; }

TEST(Safetensors, ReadsThePythonPackagesFileOnEveryBackend) {
  for (Device d : harness::backends()) {
    const nn::StateDict state = nn::load_safetensors(golden("python.safetensors"), d);
    const char* names[] = {"layer.weight", "layer.bias", "half", "steps", "i32",   "i16",
                           "i8",           "u8",         "mask", "empty", "scalar"};
    EXPECT_EQ(state.size(), std::size(names));
    for (const char* name : names) {
      const Array& got = state.at(name);
      const Array want = load(golden(std::string(name) + ".npy"));
      EXPECT_EQ(got.device(), d);
      EXPECT_EQ(got.dtype(), want.dtype()) << name;
      EXPECT_EQ(got.shape(), want.shape()) << name;
      EXPECT_TRUE(array_equal(got.to(cpu()), want)) << name;
    }
  }
}

TEST(Safetensors, RefusesBrokenFilesWithTheFault) {
  struct Case {
    const char* file;
    const char* says;
  };
  for (const Case& c : {Case{"truncated.safetensors", "outside"}, Case{"short.safetensors", "fewer than the 8"},
                        Case{"huge_header.safetensors", "claims"}, Case{"bad_json.safetensors", "does not parse"},
                        Case{"outside.safetensors", "outside"}, Case{"mismatch.safetensors", "needs 12"},
                        Case{"bad_dtype.safetensors", "F8_E4M3"}, Case{"missing.safetensors", "cannot open"}}) {
    try {
      nn::load_safetensors(golden(c.file));
      ADD_FAILURE() << c.file << ": expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.file << ": " << e.what();
    }
  }
}

TEST(Safetensors, WritesWhatThePythonPackageReads) {
  // The values tests/scripts/test_safetensors_interop.py expects; written where KILN_SAFETENSORS_OUT says (else a
  // temporary file, read back by kiln).
  const char* env = std::getenv("KILN_SAFETENSORS_OUT");
  const std::string path =
      env ? env
          : (std::filesystem::temp_directory_path() / ("kiln_st_" + std::to_string(::getpid()) + ".safetensors"))
                .string();
  nn::StateDict state;
  state.insert("w", arange(12, float32).reshape({3, 4}) * 0.5f);
  state.insert("b", from_data(std::vector<double>{1.0, -2.0}));
  state.insert("h", from_data(std::vector<float>{0.25f, -8.0f}).astype(float16));
  state.insert("step", scalar_array(int64_t{7}));
  state.insert("mask", from_data(std::vector<bool>{true, false}));
  state.insert("u8", from_data(std::vector<int64_t>{1, 255}).astype(uint8));
  nn::save_safetensors(path, state, {{"written_by", "kiln"}});
  const nn::StateDict back = nn::load_safetensors(path);
  ASSERT_EQ(back.size(), state.size());
  for (const auto& [name, value] : state) {
    EXPECT_EQ(back.at(name).dtype(), value.dtype()) << name;
    EXPECT_TRUE(array_equal(back.at(name), value)) << name;
  }
  if (!env) std::filesystem::remove(path);
}

TEST(Safetensors, AModelAndItsOptimizerResumeFromACheckpoint) {
  for (Device d : harness::backends()) {
    random::seed(21);
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(3, 4, true, float32, d));
    model->push_back(std::make_shared<nn::Tanh>());
    model->push_back(std::make_shared<nn::Linear>(4, 2, true, float32, d));
    optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    const Array x = random::normal({8, 3}, 0.0, 1.0, float32, d), y = random::normal({8, 2}, 0.0, 1.0, float32, d);
    auto train_step = [&](nn::Module& m, optim::Optimizer& o) {
      const Array loss = nn::mse_loss(m(x), y);
      o.zero_grad();
      loss.backward();
      o.step();
    };
    train_step(*model, opt);
    const std::string path =
        (std::filesystem::temp_directory_path() / ("kiln_ckpt_" + std::to_string(::getpid()) + ".safetensors"))
            .string();
    nn::StateDict both = model->state_dict().prefixed("model.");
    for (const auto& [k, v] : opt.state_dict().prefixed("optimizer.")) both.insert(k, v);
    nn::save_safetensors(path, both);

    random::seed(99);
    auto restored = std::make_shared<nn::Sequential>();
    restored->push_back(std::make_shared<nn::Linear>(3, 4, true, float32, d));
    restored->push_back(std::make_shared<nn::Tanh>());
    restored->push_back(std::make_shared<nn::Linear>(4, 2, true, float32, d));
    const nn::StateDict loaded = nn::load_safetensors(path, d);
    restored->load_state_dict(loaded.strip_prefix("model."));
    optim::SGD opt2(restored->parameters(), {.lr = 0.1, .momentum = 0.9});
    opt2.load_state_dict(loaded.strip_prefix("optimizer."));
    std::filesystem::remove(path);
    train_step(*model, opt);
    train_step(*restored, opt2);
    const auto a = model->parameters(), b = restored->parameters();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].to_vector<float>(), b[i].to_vector<float>()) << i;
  }
}

}  // namespace
}  // namespace kiln
