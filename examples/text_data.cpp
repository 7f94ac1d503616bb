// Text data for language modelling: a GPT-2 byte-level BPE tokenizer trained on the Jargon File (Debian's
// jargon-text), the corpus written as an llm.c token file, random-window batches from its memory map, and the
// same windows as a map-style dataset in the DataLoader. Checks its own results (exit 1 when wrong); without the
// package it says so and exits 0.
#include <cstdio>
#include <filesystem>
#include <kiln/kiln.hpp>
#include <memory>
#include <string>
#include <vector>

using namespace kiln;

namespace {

// Window i of a token file: tokens [i T, i T + T) as x and the next T as y (non-overlapping windows).
struct Windows : data::MapDataset {
  std::shared_ptr<const text::TokenFile> file;
  int64_t seq;
  Windows(std::shared_ptr<const text::TokenFile> f, int64_t t) : file(std::move(f)), seq(t) {}
  int64_t size() const override { return (file->size() - 1) / seq; }
  data::Sample get(int64_t i) const override { return {file->window(i * seq, seq), file->window(i * seq + 1, seq)}; }
};

int fail(const char* what) {
  std::printf("text_data: %s\n", what);
  return 1;
}

}  // namespace

int main() {
  if (!std::filesystem::exists(text::kJargonFile)) {
    std::printf("text_data: %s is missing (apt-get install jargon-text, as make deps does); skipping.\n",
                text::kJargonFile);
    return 0;
  }
  const std::string corpus = text::read_text(text::kJargonFile).substr(0, 300000);
  std::vector<std::string> lines;
  for (size_t at = 0; at < corpus.size();) {
    const size_t end = std::min(corpus.find('\n', at), corpus.size() - 1) + 1;
    lines.push_back(corpus.substr(at, end - at));
    at = end;
  }
  const auto tok = text::BpeTokenizer::train(lines, {.vocab_size = 1024});
  const std::vector<int32_t> ids = tok.encode(corpus);
  std::printf("%zu bytes -> %zu tokens with %lld ids (%.2f bytes a token)\n", corpus.size(), ids.size(),
              static_cast<long long>(tok.vocab_size()), static_cast<double>(corpus.size()) / ids.size());
  if (tok.decode(ids) != corpus) return fail("decode(encode(text)) is not the text");

  const std::string path = (std::filesystem::temp_directory_path() / "kiln_text_data_example.bin").string();
  text::write_tokens(path, ids);
  auto file = std::make_shared<const text::TokenFile>(path);
  std::filesystem::remove(path);  // the map keeps the pages readable
  if (file->size() != static_cast<int64_t>(ids.size())) return fail("the token file has the wrong length");

  random::Generator gen(0);
  auto [x, y] = file->batch(4, 32, gen);
  const auto xs = x.to_vector<int64_t>(), ys = y.to_vector<int64_t>();
  for (size_t i = 0; i + 1 < 32; ++i)
    if (xs[i + 1] != ys[i]) return fail("y is not x shifted by one");
  std::vector<int32_t> first(xs.begin(), xs.begin() + 32);
  std::printf("a random window: \"%s\"\n", tok.decode(first).c_str());

  data::DataLoader loader(std::make_shared<Windows>(file, 64), {.batch_size = 16, .shuffle = true, .workers = 2});
  int64_t batches = 0, samples = 0;
  for (const data::Batch& b : loader) {
    if (b.x.shape() != Shape{b.x.shape(0), 64} || b.y.shape() != b.x.shape()) return fail("a batch has a bad shape");
    samples += b.x.shape(0);
    ++batches;
  }
  std::printf("one epoch: %lld batches of windows of 64 tokens, %lld windows\n", static_cast<long long>(batches),
              static_cast<long long>(samples));
  if (samples != (file->size() - 1) / 64) return fail("the epoch did not see every window once");
  return 0;
}
