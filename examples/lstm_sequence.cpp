// A character-level language model on the Jargon File (Debian's jargon-text): an embedding, a 2-layer LSTM and a
// linear layer predicting the next byte, trained with Adam on random windows for a few seconds on the CPU (the
// best device present), then asked to continue a prompt greedily, carrying the LSTM's (h, c) state from step to
// step. Checks that it learned (the loss falls well below the uniform guess; exit 1 otherwise); without the
// package it says so and exits 0.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <kiln/kiln.hpp>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

using namespace kiln;

int main() {
  if (!std::filesystem::exists(text::kJargonFile)) {
    std::printf("lstm_sequence: %s is missing (apt-get install jargon-text, as make deps does); skipping.\n",
                text::kJargonFile);
    return 0;
  }
  const Device d = try_gpu();
  const std::string corpus = text::read_text(text::kJargonFile).substr(20000, 200000);
  // The bytes that occur, as ids 0..V-1.
  std::vector<int64_t> id_of(256, -1);
  std::string chars;
  for (unsigned char ch : corpus)
    if (id_of[ch] < 0) {
      id_of[ch] = static_cast<int64_t>(chars.size());
      chars.push_back(static_cast<char>(ch));
    }
  std::vector<int64_t> ids;
  for (unsigned char ch : corpus) ids.push_back(id_of[ch]);
  const int64_t vocab = static_cast<int64_t>(chars.size()), n = static_cast<int64_t>(ids.size());
  const Array data = from_data(ids, Shape{n}).to(d);

  random::seed(0);
  const int64_t embed = 32, hidden = 96, batch = 16, steps = 32;
  auto embedding = std::make_shared<nn::Embedding>(vocab, embed, float32, d);
  auto lstm =
      std::make_shared<nn::LSTM>(embed, hidden, nn::RNNOptions{.num_layers = 2, .batch_first = true, .device = d});
  auto head = std::make_shared<nn::Linear>(hidden, vocab, true, float32, d);
  std::vector<Array> params;
  for (const auto* m : {static_cast<nn::Module*>(embedding.get()), static_cast<nn::Module*>(lstm.get()),
                        static_cast<nn::Module*>(head.get())})
    for (const Array& p : m->parameters()) params.push_back(p);
  optim::Adam opt(params, {.lr = 1e-2});

  const Array offsets = arange(int64_t{0}, steps + 1, int64_t{1}, int64, d);
  double first = 0, last = 0;
  const int iterations = 90;
  for (int it = 0; it < iterations; ++it) {
    const Array starts = random::randint(0, n - steps - 1, {batch, 1}, int64, d);
    const Array window = take(data, starts + offsets);  // (batch, steps + 1)
    const Array x = window.slice(1, 0, steps), y = window.slice(1, 1, steps + 1);
    const Array logits = (*head)((*lstm)((*embedding)(x)));  // (batch, steps, vocab)
    Array loss = nn::cross_entropy(logits.reshape(batch * steps, vocab), y.reshape(batch * steps));
    opt.zero_grad();
    loss.backward();
    opt.step();
    const double value = loss.item<double>();
    if (it == 0) first = value;
    last = it == 0 ? value : 0.9 * last + 0.1 * value;  // smoothed
    if (it % 25 == 0 || it == iterations - 1) std::printf("step %3d  loss %.3f\n", it, value);
  }
  std::printf("loss %.3f -> %.3f nats a byte (uniform over %lld bytes: %.3f)\n", first, last,
              static_cast<long long>(vocab), std::log(static_cast<double>(vocab)));

  // Greedy continuation: the prompt through the LSTM once, then one byte at a time with the carried state.
  NoGradGuard no_grad;
  std::string text = "The hacker ";
  std::vector<int64_t> prompt;
  for (unsigned char ch : text) prompt.push_back(id_of[ch] < 0 ? 0 : id_of[ch]);
  Array input = from_data(prompt, Shape{1, static_cast<int64_t>(prompt.size())}).to(d);
  Array h, c;
  for (int i = 0; i < 60; ++i) {
    auto [out, h1, c1] = nn::call(*lstm, (*embedding)(input), h, c);
    h = h1;
    c = c1;
    const Array next = argmax((*head)(out.slice(1, -1, std::nullopt)), -1);  // (1, 1)
    text.push_back(chars[static_cast<size_t>(next.to(cpu()).item<int64_t>())]);
    input = next;
  }
  std::printf("continuation: \"%s\"\n", text.c_str());
  if (!(last < 0.75 * first)) {
    std::printf("lstm_sequence: the loss did not fall (%.3f -> %.3f)\n", first, last);
    return 1;
  }
  return 0;
}
