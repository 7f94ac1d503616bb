// Datasets in the DataLoader (torch.utils.data's Dataset, IterableDataset, collate): every sample once per
// epoch, fields stacked or collated by the user, the same seeded order and resume as arrays, iterable streams
// sharded by worker and handed out round-robin, errors from get() surfaced.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <vector>

#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"

namespace kiln {
namespace {

// Sample i: (i as float32 (1,), i * i as int64 scalar, 2 i as float64 (2,)), made on demand.
struct Squares : data::MapDataset {
  int64_t n;
  explicit Squares(int64_t n) : n(n) {}
  int64_t size() const override { return n; }
  data::Sample get(int64_t i) const override {
    if (i == 13 && n == 14) throw std::runtime_error("sample 13 is unreadable");
    return {full({1}, static_cast<double>(i), float32), full({}, static_cast<double>(i * i), int64),
            full({2}, 2.0 * static_cast<double>(i), float64)};
  }
};

// Worker w of W streams the samples w, w + W, w + 2W, ... below n: each sample once over all workers.
struct Counter : data::IterableDataset {
  int64_t n;
  explicit Counter(int64_t n) : n(n) {}
  std::function<std::optional<data::Sample>()> stream(const data::WorkerInfo& info) const override {
    auto next = std::make_shared<int64_t>(info.id);
    const int64_t step = info.num_workers, end = n, shift = info.epoch * 1000;
    return [=]() -> std::optional<data::Sample> {
      if (*next >= end) return std::nullopt;
      const int64_t v = *next;
      *next += step;
      return data::Sample{full({}, static_cast<double>(v + shift), int64)};
    };
  }
};

std::vector<int64_t> column(const Array& a) { return a.astype(int64).reshape({-1}).to_vector<int64_t>(); }

TEST(Dataset, MapDatasetBatchesStackEachFieldAndSeeEverySampleOnceOnEveryDevice) {
  for (Device d : harness::backends()) {
    data::DataLoader loader(std::make_shared<Squares>(23),
                            {.batch_size = 5, .shuffle = true, .seed = 3, .workers = 3, .device = d});
    EXPECT_EQ(loader.num_samples(), 23);
    EXPECT_EQ(loader.num_batches(), 5);
    std::vector<int64_t> seen;
    int64_t index = 0;
    for (const data::Batch& b : loader) {
      EXPECT_EQ(b.index, index++);
      ASSERT_EQ(b.fields.size(), 3u);
      const int64_t rows = index == 5 ? 3 : 5;
      EXPECT_EQ(b.fields[0].shape(), (Shape{rows, 1}));
      EXPECT_EQ(b.fields[1].shape(), (Shape{rows}));
      EXPECT_EQ(b.fields[2].shape(), (Shape{rows, 2}));
      EXPECT_EQ(b.fields[2].dtype(), float64);
      EXPECT_EQ(b.x.device(), d);
      const auto xs = column(b.x), ys = column(b.y), zs = column(b.fields[2]);
      for (size_t i = 0; i < xs.size(); ++i) {
        EXPECT_EQ(ys[i], xs[i] * xs[i]);  // fields of one sample stay together
        EXPECT_EQ(zs[2 * i], 2 * xs[i]);
      }
      seen.insert(seen.end(), xs.begin(), xs.end());
    }
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 23u);
    // The shuffle is the arrays' one: a loader over the same samples as arrays gives the same order.
    data::DataLoader arrays(arange(23, int64), arange(23, int64), {.batch_size = 5, .shuffle = true, .seed = 3});
    std::vector<int64_t> expected;
    for (const data::Batch& b : arrays)
      for (int64_t v : b.x.to_vector<int64_t>()) expected.push_back(v);
    EXPECT_EQ(seen, expected);
  }
}

TEST(Dataset, ArrayDatasetIsTheArrayLoadersRowsAndCollateIsTheUsers) {
  const Array x = arange(12, float32).reshape({6, 2});
  const Array y = arange(6, int64) * int64_t{10};
  data::DataLoader loader(std::make_shared<data::ArrayDataset>(std::vector<Array>{x, y}), {.batch_size = 4});
  std::vector<std::vector<float>> xs;
  for (const data::Batch& b : loader) xs.push_back(b.x.to_vector<float>());
  ASSERT_EQ(xs.size(), 2u);
  EXPECT_EQ(xs[0], (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(xs[1], (std::vector<float>{8, 9, 10, 11}));

  // A collate that sums each batch's labels into one field.
  data::Collate sum = [](const std::vector<data::Sample>& samples) {
    int64_t total = 0;
    for (const auto& s : samples) total += s[1].item<int64_t>();
    return std::vector<Array>{full({}, static_cast<double>(total), int64)};
  };
  data::DataLoader summed(std::make_shared<data::ArrayDataset>(std::vector<Array>{x, y}),
                          {.batch_size = 4, .collate = sum});
  std::vector<int64_t> totals;
  for (const data::Batch& b : summed) {
    EXPECT_EQ(b.fields.size(), 1u);
    EXPECT_FALSE(b.y.defined());
    totals.push_back(b.x.item<int64_t>());
  }
  EXPECT_EQ(totals, (std::vector<int64_t>{0 + 10 + 20 + 30, 40 + 50}));
  EXPECT_THROW(data::ArrayDataset({zeros({3}), zeros({4})}), ShapeError);
}

TEST(Dataset, SetEpochResumesAMapDatasetAtTheUninterruptedRunsBatch) {
  auto ds = std::make_shared<Squares>(40);
  data::DataLoader full_run(ds, {.batch_size = 6, .shuffle = true, .seed = 9});
  (void)full_run.epoch();  // epoch 0
  std::vector<std::vector<int64_t>> epoch1;
  for (const data::Batch& b : full_run) epoch1.push_back(column(b.x));
  data::DataLoader resumed(ds, {.batch_size = 6, .shuffle = true, .seed = 9});
  resumed.set_epoch(1, 4);
  int64_t k = 4;
  for (const data::Batch& b : resumed) {
    EXPECT_EQ(b.index, k);
    EXPECT_EQ(column(b.x), epoch1[static_cast<size_t>(k++)]);
  }
  EXPECT_EQ(k, 7);
}

TEST(Dataset, IterableStreamsAreShardedByWorkerAndHandedOutRoundRobin) {
  // 2 workers, batches of 3: worker 0 streams 0 2 4 6 8 10 12, worker 1 streams 1 3 5 7 9 11.
  data::DataLoader loader(std::make_shared<Counter>(13), {.batch_size = 3, .workers = 2, .prefetch = 1});
  EXPECT_EQ(loader.num_batches(), -1);
  std::vector<std::vector<int64_t>> batches;
  int64_t index = 0;
  for (const data::Batch& b : loader) {
    EXPECT_EQ(b.index, index++);
    batches.push_back(column(b.x));
  }
  using B = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(batches, (B{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}, {12}}));
  // The next epoch's streams get epoch 1 (this dataset adds 1000 per epoch).
  std::vector<int64_t> second;
  for (const data::Batch& b : loader)
    for (int64_t v : column(b.x)) second.push_back(v);
  EXPECT_EQ(second.size(), 13u);
  EXPECT_EQ(second.front(), 1000);

  data::DataLoader dropping(std::make_shared<Counter>(13), {.batch_size = 3, .drop_last = true, .workers = 2});
  B kept;
  for (const data::Batch& b : dropping) kept.push_back(column(b.x));
  EXPECT_EQ(kept, (B{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}));

  data::DataLoader resumed(std::make_shared<Counter>(13), {.batch_size = 3, .workers = 2});
  resumed.set_epoch(0, 3);
  B rest;
  for (const data::Batch& b : resumed) {
    EXPECT_EQ(b.index, 3 + static_cast<int64_t>(rest.size()));
    rest.push_back(column(b.x));
  }
  EXPECT_EQ(rest, (B{{7, 9, 11}, {12}}));
}

TEST(Dataset, ErrorsOfGetReachTheConsumerAndBadOptionsThrow) {
  data::DataLoader loader(std::make_shared<Squares>(14), {.batch_size = 4, .workers = 2});
  try {
    for (const data::Batch& b : loader) (void)b;
    FAIL() << "expected the dataset's error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 13"), std::string::npos) << e.what();
  }
  EXPECT_THROW(data::DataLoader(std::make_shared<Counter>(3), {.shuffle = true}), ValueError);
  EXPECT_THROW(data::DataLoader(std::shared_ptr<const data::MapDataset>(), {}), ValueError);
  EXPECT_THROW((void)data::stack_samples({{zeros({2})}, {zeros({3})}}), ShapeError);
  EXPECT_THROW((void)data::stack_samples({{zeros({2})}, {zeros({2}), zeros({2})}}), ShapeError);
}

}  // namespace
}  // namespace kiln
