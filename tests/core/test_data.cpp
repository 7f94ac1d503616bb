// IDX files (plain and gzip, written here) and the DataLoader on every backend: every sample exactly once per
// epoch, seeded shuffles, drop_last, batches on the requested device, worker errors surfaced.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"

namespace kiln {
namespace {

std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_" + std::to_string(::getpid()) + "_" + name)).string();
}

void gzip_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gzFile f = gzopen(to.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

TEST(DataIdx, RoundTripsEveryTypePlainAndGzipped) {
  for (DType t : {uint8, int8, int16, int32, float32, float64}) {
    const Array a = (arange(24, int64) - 5).astype(t).reshape({2, 3, 4});
    const std::string plain = temp("a.idx"), packed = temp("a.idx.gz");
    data::write_idx(plain, a);
    gzip_file(plain, packed);
    for (const std::string& path : {plain, packed}) {
      const Array b = data::read_idx(path);
      EXPECT_EQ(b.dtype(), t);
      EXPECT_EQ(b.shape(), (Shape{2, 3, 4}));
      EXPECT_TRUE(array_equal(a, b)) << dtype_name(t) << " " << path;
    }
    std::filesystem::remove(plain);
    std::filesystem::remove(packed);
  }
  // The MNIST bytes by hand: magic 0x00000801 (uint8, rank 1), 3 items.
  const std::string path = temp("labels.idx");
  std::ofstream(path, std::ios::binary).write("\x00\x00\x08\x01\x00\x00\x00\x03\x07\x02\x01", 11);
  EXPECT_EQ(data::read_idx(path).to_vector<int64_t>(), (std::vector<int64_t>{7, 2, 1}));
  std::ofstream(path, std::ios::binary).write("\x00\x00\x08\x01\x00\x00\x00\x05\x07\x02", 10);
  EXPECT_THROW(data::read_idx(path), ValueError);  // truncated
  std::ofstream(path, std::ios::binary).write("\x00\x00\x07\x01\x00\x00\x00\x01\x07", 9);
  EXPECT_THROW(data::read_idx(path), ValueError);  // unknown type code
  std::filesystem::remove(path);
  EXPECT_THROW(data::read_idx(temp("missing.idx")), ValueError);
  try {
    data::fashion_mnist(true, temp("nowhere"));
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("dataset-fashion-mnist"), std::string::npos) << e.what();
  }
}

TEST(DataIdx, FashionMnistFromAFolderOfIdxFiles) {
  const std::string dir = temp("fmnist");
  std::filesystem::create_directories(dir);
  const Array images = (arange(2 * 28 * 28, int64) % 256).astype(uint8).reshape({2, 28, 28});
  data::write_idx(dir + "/train-images-idx3-ubyte", images);
  data::write_idx(dir + "/train-labels-idx1-ubyte", from_data(std::vector<int64_t>{9, 0}).astype(uint8));
  const data::Dataset d = data::fashion_mnist(true, dir);
  EXPECT_EQ(d.images.shape(), (Shape{2, 784}));
  EXPECT_EQ(d.images.dtype(), float32);
  EXPECT_NEAR(d.images.max().item<double>(), 1.0, 0);
  EXPECT_NEAR(d.images.index({0, 3}).item<double>(), 3.0 / 255, 1e-7);
  EXPECT_EQ(d.labels.to_vector<int64_t>(), (std::vector<int64_t>{9, 0}));
  std::filesystem::remove_all(dir);
}

TEST(DataLoader, EverySampleOncePerEpochInSeededOrderOnEveryDevice) {
  for (Device d : harness::backends()) {
    const Array x = arange(103, float32).reshape({103, 1}) * from_data(std::vector<float>{1, -1}, Shape{1, 2});
    const Array y = arange(103, int64);
    data::DataLoader loader(x, y,
                            {.batch_size = 10, .shuffle = true, .seed = 5, .workers = 3, .prefetch = 2, .device = d});
    EXPECT_EQ(loader.num_batches(), 11);
    std::vector<std::vector<int64_t>> orders;
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<int64_t> seen;
      int64_t index = 0;
      for (const data::Batch& b : loader) {
        EXPECT_EQ(b.index, index++);
        EXPECT_EQ(b.x.device(), d);
        EXPECT_EQ(b.y.device(), d);
        EXPECT_EQ(b.x.shape(0), index == 11 ? 3 : 10);
        const std::vector<int64_t> labels = b.y.to_vector<int64_t>();
        const std::vector<float> xs = b.x.to_vector<float>();
        for (size_t i = 0; i < labels.size(); ++i) {
          EXPECT_EQ(xs[2 * i], static_cast<float>(labels[i]));  // inputs and targets stay paired
          EXPECT_EQ(xs[2 * i + 1], -static_cast<float>(labels[i]));
        }
        seen.insert(seen.end(), labels.begin(), labels.end());
      }
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 103u);
      orders.push_back(seen);
    }
    EXPECT_NE(orders[0], orders[1]);  // reshuffled each epoch
    data::DataLoader again(x, y, {.batch_size = 10, .shuffle = true, .seed = 5, .device = d});
    std::vector<int64_t> first;
    for (const data::Batch& b : again)
      for (int64_t v : b.y.to_vector<int64_t>()) first.push_back(v);
    EXPECT_EQ(first, orders[0]);  // the shuffle depends on (seed, epoch) only, not on the workers

    data::DataLoader dropping(x, y, {.batch_size = 10, .drop_last = true, .device = d});
    int64_t batches = 0;
    for (const data::Batch& b : dropping) {
      EXPECT_EQ(b.x.shape(0), 10);
      EXPECT_EQ(b.y.to_vector<int64_t>().front(), batches * 10);  // unshuffled: in order
      ++batches;
    }
    EXPECT_EQ(batches, 10);
  }
}

// A resumed run sees the batches the stopped run would have: set_epoch(n) gives the order of the n-th epoch of
// a loader that ran from the start, and set_epoch(n, k) its batches from k on, with their epoch positions.
TEST(DataLoader, SetEpochRepeatsAnUninterruptedRunsEpochFromAnyBatch) {
  const Array x = arange(47, float32).reshape({47, 1});
  const Array y = arange(47, int64);
  const data::DataLoaderOptions options{.batch_size = 5, .shuffle = true, .seed = 3, .workers = 3};
  data::DataLoader straight(x, y, options);
  std::vector<std::vector<std::vector<int64_t>>> epochs;  // [epoch][batch] -> labels
  for (int e = 0; e < 4; ++e) {
    epochs.emplace_back();
    for (const data::Batch& b : straight) epochs.back().push_back(b.y.to_vector<int64_t>());
  }
  for (int64_t e : {3, 1, 2})
    for (int64_t k : {0, 1, 4, 9, 10}) {
      data::DataLoader resumed(x, y, options);
      resumed.set_epoch(e, k);
      EXPECT_EQ(resumed.epochs_started(), e);
      int64_t index = k;
      for (const data::Batch& b : resumed) {
        EXPECT_EQ(b.index, index) << "epoch " << e << " from batch " << k;
        EXPECT_EQ(b.y.to_vector<int64_t>(), epochs[static_cast<size_t>(e)][static_cast<size_t>(index)]);
        ++index;
      }
      EXPECT_EQ(index, 10);
      // The epoch after a resumed one starts at its first batch again.
      std::vector<std::vector<int64_t>> next;
      for (const data::Batch& b : resumed) next.push_back(b.y.to_vector<int64_t>());
      if (e + 1 < 4) {
        EXPECT_EQ(next, epochs[static_cast<size_t>(e + 1)]);
      }
    }
  data::DataLoader loader(x, y, options);
  EXPECT_THROW(loader.set_epoch(-1), ValueError);
  EXPECT_THROW(loader.set_epoch(0, 11), ValueError);
}

TEST(DataLoader, AnEpochLeftEarlyStopsItsWorkersAndBadOptionsThrow) {
  data::DataLoader loader(zeros({50, 3}), zeros({50}, int64), {.batch_size = 4, .workers = 2, .prefetch = 1});
  {
    auto epoch = loader.epoch();
    EXPECT_TRUE(epoch->next().has_value());
  }  // destroyed with batches pending: joins its workers
  EXPECT_EQ(loader.epochs_started(), 1);
  EXPECT_THROW(data::DataLoader(zeros({5, 3}), zeros({4}, int64)), ShapeError);
  EXPECT_THROW(data::DataLoader(zeros({5, 3}), zeros({5}, int64), {.batch_size = 0}), ValueError);
}

}  // namespace
}  // namespace kiln
