// The GPT-2 training step of `kiln bench gpt2`, as one object that a data-parallel run can wrap in
// DistributedDataParallel: bench_dist's ddp_gpt2, `kiln bench gpt2 --nproc N` and tests/dist (which checks that
// two ranks' step equals one process's on the concatenated batch) share it.
//
// One step = zero_grad, forward (bfloat16 autocast when asked), cross entropy (models::lm_loss), backward (with
// DDP: the gradients averaged over the ranks), clip_grad_norm, and AdamW (lr 6e-4, betas 0.9/0.95, eps 1e-8)
// as torch's two parameter groups: weight decay 0.1 on the matrices, 0 on biases and LayerNorms.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/dist.hpp"
#include "kiln/kiln.hpp"
#include "kiln/models.hpp"
#include "kiln/optim.hpp"

namespace kiln_bench {

/// GPT-2 as the anchors benchmark it: the named config ("124m", "d6", ...), the vocabulary padded to 50304 as
/// nanoGPT and llm.c pad it, dropout 0, positions for `seq` tokens (at least 64).
inline kiln::models::GPT2Config gpt2_bench_config(const std::string& name, int64_t seq) {
  kiln::models::GPT2Config c = kiln::models::GPT2Config::from_name(name);
  c.vocab_size = 50304;  // 50257 padded to a multiple of 64 (aligned classifier products)
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  c.n_positions = std::max<int64_t>(seq, 64);
  return c;
}

struct Gpt2StepOptions {
  kiln::models::GPT2Config config = gpt2_bench_config("124m", 1024);
  bool bf16 = true;   ///< bfloat16 autocast around the forward and the loss
  double clip = 1.0;  ///< clip_grad_norm's max norm (0: no clipping)
  bool ddp = false;   ///< wrap the model in DistributedDataParallel (the default process group)
  kiln::dist::DdpOptions ddp_options{};
  uint64_t seed = 0;  ///< the initialisation's seed (with ddp, rank 0's model is broadcast anyway)
};

class Gpt2Step {
 public:
  Gpt2Step(const Gpt2StepOptions& o, kiln::Device d) : options_(o) {
    using namespace kiln;
    random::seed(o.seed);
    model_ = std::make_shared<models::GPT2>(o.config, float32, d);
    if (o.ddp) ddp_ = std::make_shared<dist::DistributedDataParallel>(model_, o.ddp_options);
    params_ = model_->parameters();
    std::vector<Array> decay, other;
    for (const Array& p : params_) (p.ndim() >= 2 ? decay : other).push_back(p);
    // Capturable (the step count on the device), as `kiln bench gpt2`'s step, which its graphs replay.
    decay_.emplace(decay,
                   optim::AdamOptions{.lr = 6e-4, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .capturable = true});
    other_.emplace(other,
                   optim::AdamOptions{.lr = 6e-4, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0, .capturable = true});
  }

  /// One training step on tokens x and targets y (int64, batch x seq); returns the loss (this rank's batch's).
  kiln::Array operator()(const kiln::Array& x, const kiln::Array& y) {
    using namespace kiln;
    decay_->zero_grad();
    other_->zero_grad();
    Array loss;
    {
      AutocastGuard amp(options_.bf16 ? std::optional<DType>(bfloat16) : std::nullopt);
      loss = models::lm_loss(ddp_ ? ddp_->forward(x) : model_->forward(x), y);
    }
    loss.backward();
    if (options_.clip > 0) grad_norm_ = optim::clip_grad_norm(params_, options_.clip);
    decay_->step();
    other_->step();
    return loss;
  }

  kiln::models::GPT2& model() { return *model_; }
  const std::vector<kiln::Array>& parameters() const { return params_; }
  /// The gradients' 2-norm before the last step's clipping (empty without clipping).
  const kiln::Array& grad_norm() const { return grad_norm_; }
  /// Model FLOPs per token of a step, llm.c's count: 6 N + 12 L C T.
  double flops_per_token(int64_t seq) const {
    const auto& c = options_.config;
    return 6.0 * static_cast<double>(model_->num_parameters()) + 12.0 * static_cast<double>(c.n_layer * c.n_embd * seq);
  }

 private:
  Gpt2StepOptions options_;
  std::shared_ptr<kiln::models::GPT2> model_;
  std::shared_ptr<kiln::dist::DistributedDataParallel> ddp_;
  std::vector<kiln::Array> params_;
  std::optional<kiln::optim::AdamW> decay_, other_;
  kiln::Array grad_norm_;
};

/// A rank's batch of random tokens and targets (0 <= token < min(vocab, 50257)), from a generator of its own:
/// seed + rank, so the ranks train on different data.
inline std::pair<kiln::Array, kiln::Array> gpt2_random_batch(int64_t vocab, int64_t batch, int64_t seq, uint64_t seed,
                                                             kiln::Device d) {
  kiln::random::Generator gen(seed);
  const int64_t high = std::min<int64_t>(vocab, 50257);
  kiln::Array x = gen.randint(0, high, {batch, seq}, kiln::int64, d);
  kiln::Array y = gen.randint(0, high, {batch, seq}, kiln::int64, d);
  return {x, y};
}

/// This rank's data-parallel GPT-2 step (`config` at rows x seq per rank, DistributedDataParallel over the
/// default process group) and its own batch of random tokens (seed 1 + rank): bench_dist's ddp_gpt2 and
/// `kiln bench gpt2 --nproc` time it.
struct Gpt2DdpRun {
  Gpt2DdpRun(const std::string& config, int64_t rows, int64_t seq, bool bf16, const kiln::dist::DdpOptions& ddp,
             kiln::Device d)
      : step(options(config, seq, bf16, ddp), d),
        batch(gpt2_random_batch(step_vocab(), rows, seq, 1 + static_cast<uint64_t>(kiln::dist::rank()), d)) {}
  Gpt2Step step;
  std::pair<kiln::Array, kiln::Array> batch;
  kiln::Array operator()() { return step(batch.first, batch.second); }

 private:
  static Gpt2StepOptions options(const std::string& config, int64_t seq, bool bf16, const kiln::dist::DdpOptions& ddp) {
    Gpt2StepOptions o;
    o.config = gpt2_bench_config(config, seq);
    o.bf16 = bf16;
    o.ddp = true;
    o.ddp_options = ddp;
    return o;
  }
  static int64_t step_vocab() { return gpt2_bench_config("124m", 64).vocab_size; }
};

}  // namespace kiln_bench
