// train::save_checkpoint / load_checkpoint: a run's whole state (model, optimizer, schedule, loss scaler,
// generator, position in the data) in one safetensors file, written crash-safely by save_safetensors.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/autograd.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"
#include "kiln/train.hpp"

namespace kiln::train {

namespace {

constexpr const char* kFormat = "kiln-checkpoint-1";

void require_core(const Checkpoint& c, const char* op) {
  if (!c.model || !c.optimizer)
    throw ValueError(std::string(op) + ": the checkpoint needs a model and an optimizer (Checkpoint{.model = " +
                     "model.get(), .optimizer = &opt, ...})");
}

/// The uint64 words as int64 bit patterns (safetensors and kiln have no uint64 dtype).
Array words(uint64_t a, uint64_t b) {
  int64_t w[2];
  std::memcpy(&w[0], &a, sizeof a);
  std::memcpy(&w[1], &b, sizeof b);
  return from_data(std::vector<int64_t>{w[0], w[1]});
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  require_core(c, "save_checkpoint");
  nn::StateDict state = c.model->state_dict().prefixed("model.");
  auto add = [&](const nn::StateDict& part, const std::string& prefix) {
    for (const auto& [k, v] : part.prefixed(prefix)) state.insert(k, v);
  };
  add(c.optimizer->state_dict(), "optimizer.");
  if (c.scheduler) add(c.scheduler->state_dict(), "scheduler.");
  if (c.scaler) add(c.scaler->state_dict(), "scaler.");
  const random::GeneratorState g = random::get_state();
  state.insert("random", words(g.seed, g.offset));
  state.insert("position", from_data(std::vector<int64_t>{c.epoch, c.batch, c.step}));
  nn::save_safetensors(path, state, {{"format", kFormat}});
}

void load_checkpoint(const std::string& path, Checkpoint& c) {
  require_core(c, "load_checkpoint");
  const std::string op = "load_checkpoint(" + path + ")";
  const nn::StateDict state = nn::load_safetensors(path);
  // The file's layout first, so that another kind of file or run is refused before anything changes.
  struct Section {
    const char* prefix;
    bool wanted;
    const char* field;
  };
  const Section sections[] = {{"model.", true, "model"},
                              {"optimizer.", true, "optimizer"},
                              {"scheduler.", c.scheduler != nullptr, "scheduler"},
                              {"scaler.", c.scaler != nullptr, "scaler"}};
  for (const auto& [k, v] : state) {
    bool known = k == "random" || k == "position";
    for (const Section& s : sections) known = known || k.rfind(s.prefix, 0) == 0;
    if (!known)
      throw ValueError(op + ": unexpected entry \"" + k + "\"; the file is not a save_checkpoint file (a model's " +
                       "state dict alone loads with Module::load_state_dict)");
  }
  for (const char* key : {"random", "position"})
    if (!state.find(key)) throw ValueError(op + ": no \"" + key + "\" entry; the file is not a save_checkpoint file");
  for (const Section& s : sections) {
    bool present = false;
    for (const auto& [k, v] : state) present = present || k.rfind(s.prefix, 0) == 0;
    if (present && !s.wanted)
      throw ValueError(op + ": the checkpoint holds a " + s.field + "'s state but Checkpoint::" + s.field +
                       " is not set; pass the " + s.field + " the saved run used, so that it resumes too");
    if (!present && s.wanted && std::string(s.field) != "model")  // a model without parameters saves nothing
      throw ValueError(op + ": the checkpoint holds no " + s.field + " state (no \"" + s.prefix +
                       "*\" entries) but Checkpoint::" + s.field + " is set; resume from a checkpoint saved with " +
                       "one" + (std::string(s.field) == "optimizer" ? "" : ", or leave it unset"));
  }
  const Array& rng = state.at("random");
  const Array& position = state.at("position");
  if (!(rng.shape() == Shape{2}) || rng.dtype() != int64 || !(position.shape() == Shape{3}) ||
      position.dtype() != int64)
    throw ValueError(op + ": \"random\" must be int64 of shape (2,) and \"position\" int64 of shape (3,), got " +
                     shape_str(rng.shape()) + " and " + shape_str(position.shape()));
  {
    NoGradGuard no_grad;
    c.model->load_state_dict(state.strip_prefix("model."));
  }
  c.optimizer->load_state_dict(state.strip_prefix("optimizer."));
  if (c.scheduler) c.scheduler->load_state_dict(state.strip_prefix("scheduler."));
  if (c.scaler) c.scaler->load_state_dict(state.strip_prefix("scaler."));
  const std::vector<int64_t> w = rng.to_vector<int64_t>(), p = position.to_vector<int64_t>();
  random::GeneratorState g;
  std::memcpy(&g.seed, &w[0], sizeof g.seed);
  std::memcpy(&g.offset, &w[1], sizeof g.offset);
  random::set_state(g);
  c.epoch = p[0];
  c.batch = p[1];
  c.step = p[2];
  if (c.loader) c.loader->set_epoch(c.epoch, c.batch);
}

}  // namespace kiln::train
