// Training from Python: the optimizers' state dicts, the learning-rate schedules and GradScaler (kiln.optim, as
// torch.optim.lr_scheduler and torch.amp.GradScaler), and kiln.train: TrainStep, fit, evaluate and the
// checkpoints of a whole run (kiln/train.hpp). fit, evaluate and a TrainStep's call run with the GIL released, so
// a DataLoader over a Python dataset can run its workers meanwhile; a Python forward or loss takes it back.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "datasets.hpp"

namespace kiln::python {
namespace {

using LossCallable = std::optional<std::function<Array(const Array&, const Array&)>>;

train::NonFiniteLoss to_non_finite(const std::string& name) {
  if (name == "keep_going") return train::NonFiniteLoss::keep_going;
  if (name == "skip") return train::NonFiniteLoss::skip;
  if (name == "raise") return train::NonFiniteLoss::raise;
  throw nb::value_error(
      ("kiln.train: on_non_finite_loss '" + name + "' is none of 'keep_going', 'skip', 'raise'").c_str());
}


// torch.optim.lr_scheduler.LambdaLR: lr = base * lr_lambda(count), the Python function called holding the GIL
// (fit steps a schedule with it released). The function is owned here, visible to the garbage collector.
class PyLambdaLR : public optim::LRScheduler {
 public:
  PyLambdaLR(optim::Optimizer& optimizer, nb::handle lr_lambda) : LRScheduler(optimizer), lr_lambda(nb::borrow(lr_lambda)) {
    optimizer.set_lr(lr_at(0));
  }
  double lr_at(int64_t count) const override {
    nb::gil_scoped_acquire gil;
    if (!lr_lambda.is_valid())
      throw ValueError("LambdaLR: its lr_lambda was cleared by the garbage collector");
    return base_lr_ * nb::cast<double>(lr_lambda(count));
  }
  nb::object lr_lambda;
};

int lambda_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  Py_VISIT(nb::inst_ptr<PyLambdaLR>(self)->lr_lambda.ptr());
  return 0;
}
int lambda_clear(PyObject* self) {
  if (nb::inst_ready(self)) nb::inst_ptr<PyLambdaLR>(self)->lr_lambda.reset();
  return 0;
}
PyType_Slot lambda_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(lambda_traverse)},
                              {Py_tp_clear, reinterpret_cast<void*>(lambda_clear)},
                              {0, nullptr}};

void bind_schedules(nb::module_& optim) {
  nb::handle optimizer = nb::type<optim::Optimizer>();
  optimizer.attr("state_dict") = nb::cpp_function(
      [](const optim::Optimizer& o) { return state_to_dict(o.state_dict()); }, nb::is_method(), nb::name("state_dict"),
      "The optimizer's state: lr, step, its kind and the per-parameter buffers (exp_avg.3, ...).");
  optimizer.attr("load_state_dict") = nb::cpp_function(
      [](optim::Optimizer& o, nb::dict state) { o.load_state_dict(dict_to_state(state)); }, nb::is_method(),
      nb::name("load_state_dict"), "state_dict"_a,
      "Restores a state_dict() of an optimizer of the same kind over as many parameters (ValueError otherwise).");

  nb::class_<optim::LRScheduler>(optim, "LRScheduler",
                                 "A learning-rate schedule: step() sets the optimizer's lr to the next count's value.")
      .def("step", &optim::LRScheduler::step)
      .def("get_last_lr", [](const optim::LRScheduler& s) { return std::vector<double>{s.lr_at(s.count())}; })
      .def("lr_at", &optim::LRScheduler::lr_at, "count"_a)
      .def_prop_ro("last_epoch", &optim::LRScheduler::count)
      .def_prop_ro("base_lrs", [](const optim::LRScheduler& s) { return std::vector<double>{s.base_lr()}; })
      .def("state_dict", [](const optim::LRScheduler& s) { return state_to_dict(s.state_dict()); })
      .def("load_state_dict", [](optim::LRScheduler& s, nb::dict state) { s.load_state_dict(dict_to_state(state)); },
           "state_dict"_a);
  nb::class_<optim::StepLR, optim::LRScheduler>(optim, "StepLR", "lr = base * gamma ** (count // step_size).")
      .def(nb::init<optim::Optimizer&, int64_t, double>(), "optimizer"_a, "step_size"_a, "gamma"_a = 0.1,
           nb::keep_alive<1, 2>());
  nb::class_<optim::CosineAnnealingLR, optim::LRScheduler>(
      optim, "CosineAnnealingLR", "lr = eta_min + (base - eta_min) (1 + cos(pi count / T_max)) / 2.")
      .def(nb::init<optim::Optimizer&, int64_t, double>(), "optimizer"_a, "T_max"_a, "eta_min"_a = 0.0,
           nb::keep_alive<1, 2>());
  nb::class_<optim::LinearWarmupLR, optim::LRScheduler>(
      optim, "LinearWarmupLR", "Linear warm-up from base * start_factor to base over `warmup` steps, then constant.")
      .def(nb::init<optim::Optimizer&, int64_t, double>(), "optimizer"_a, "warmup"_a, "start_factor"_a = 1.0 / 3.0,
           nb::keep_alive<1, 2>());
  nb::class_<PyLambdaLR, optim::LRScheduler>(optim, "LambdaLR",
                                             "lr = base * lr_lambda(count), as torch.optim.lr_scheduler.LambdaLR.",
                                             nb::type_slots(lambda_slots))
      .def("__init__", [](PyLambdaLR* self, optim::Optimizer& optimizer, nb::handle lr_lambda) {
        if (!PyCallable_Check(lr_lambda.ptr()))
          throw nb::type_error("kiln.optim.LambdaLR: lr_lambda is a callable of the step count returning a factor");
        new (self) PyLambdaLR(optimizer, lr_lambda);
      }, "optimizer"_a, "lr_lambda"_a, nb::keep_alive<1, 2>());
  // torch.optim.lr_scheduler.LinearLR, in the case kiln's warm-up covers: ending at the base lr.
  optim.def("LinearLR", [](optim::Optimizer& o, double start_factor, double end_factor, int64_t total_iters) {
    if (end_factor != 1.0)
      throw nb::value_error("kiln.optim.LinearLR: end_factor must be 1.0 (kiln's warm-up ends at the base lr); "
                            "compose another schedule for a decay");
    return new optim::LinearWarmupLR(o, total_iters, start_factor);
  }, "optimizer"_a, "start_factor"_a = 1.0 / 3.0, "end_factor"_a = 1.0, "total_iters"_a = 5, nb::keep_alive<0, 1>(),
     nb::rv_policy::take_ownership, "torch's LinearLR with end_factor=1.0: a LinearWarmupLR.");

  nb::class_<optim::GradScaler>(optim, "GradScaler",
                                "Loss scaling for float16 training, as torch.amp.GradScaler: "
                                "scaler.scale(loss).backward(); scaler.step(opt); scaler.update().")
      .def("__init__", [](optim::GradScaler* self, double init_scale, double growth_factor, double backoff_factor,
                          int64_t growth_interval, bool enabled) {
        new (self) optim::GradScaler({init_scale, growth_factor, backoff_factor, growth_interval, enabled});
      }, "init_scale"_a = 65536.0, "growth_factor"_a = 2.0, "backoff_factor"_a = 0.5, "growth_interval"_a = 2000,
         "enabled"_a = true)
      .def("scale", &optim::GradScaler::scale, "outputs"_a)
      .def("unscale_", &optim::GradScaler::unscale, "optimizer"_a)
      .def("step", &optim::GradScaler::step, "optimizer"_a, "optimizer.step() unless a gradient overflowed; "
                                                           "returns whether it stepped.")
      .def("update", &optim::GradScaler::update)
      .def("get_scale", &optim::GradScaler::get_scale)
      .def_prop_ro("found_inf", &optim::GradScaler::found_inf)
      .def_prop_ro("skipped_steps", &optim::GradScaler::skipped_steps)
      .def("state_dict", [](const optim::GradScaler& s) { return state_to_dict(s.state_dict()); })
      .def("load_state_dict", [](optim::GradScaler& s, nb::dict state) { s.load_state_dict(dict_to_state(state)); },
           "state_dict"_a);
}

// A TrainStep that owns its Python loss (the C++ step borrows it), so that the garbage collector sees the cycle of a
// loss whose globals hold the step.
struct PyTrainStep : train::TrainStep {
  using train::TrainStep::TrainStep;
  nb::object loss;
};

int step_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  Py_VISIT(nb::inst_ptr<PyTrainStep>(self)->loss.ptr());
  return 0;
}
int step_clear(PyObject* self) {
  if (nb::inst_ready(self)) nb::inst_ptr<PyTrainStep>(self)->loss.reset();
  return 0;
}
PyType_Slot step_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(step_traverse)},
                            {Py_tp_clear, reinterpret_cast<void*>(step_clear)},
                            {0, nullptr}};

void bind_train_step(nb::module_& train) {
  using Step = PyTrainStep;
  nb::class_<PyTrainStep>(train, "TrainStep",
                                            "One training step per call step(x, y) (zero_grad, forward, loss, "
                                            "backward, clipping, optimizer and scheduler steps), with the loss and "
                                            "accuracy summed on the device.",
                                            nb::type_slots(step_slots))
      .def("__init__", [](PyTrainStep* self, nn::Module& model, optim::Optimizer& optimizer, nb::handle loss,
                          bool accuracy, bool graph, int warmup, double max_grad_norm, optim::LRScheduler* scheduler,
                          const std::string& on_non_finite_loss, optim::GradScaler* scaler, bool compile) {
        train::StepOptions o;
        if (!loss.is_none()) {
          if (!PyCallable_Check(loss.ptr()))
            throw nb::type_error("kiln.train.TrainStep: loss is a callable loss(output, target) -> Array, or None");
          o.loss = [f = loss.ptr()](const Array& output, const Array& target) {
            nb::gil_scoped_acquire gil;
            return nb::cast<Array>(nb::handle(f)(output, target));
          };
        }
        o.accuracy = accuracy;
        o.graph = graph;
        o.compile = compile;
        o.warmup = warmup;
        o.max_grad_norm = max_grad_norm;
        o.scheduler = scheduler;
        o.on_non_finite_loss = to_non_finite(on_non_finite_loss);
        o.scaler = scaler;
        new (self) PyTrainStep(model, optimizer, o);
        self->loss = nb::borrow(loss);
      }, "model"_a, "optimizer"_a, nb::kw_only(), "loss"_a = nb::none(), "accuracy"_a = true, "graph"_a = false,
         "warmup"_a = 3, "max_grad_norm"_a = 0.0, "scheduler"_a.none() = nb::none(),
         "on_non_finite_loss"_a = "keep_going", "scaler"_a.none() = nb::none(), "compile"_a = false,
         nb::keep_alive<1, 2>(),
         nb::keep_alive<1, 3>(), nb::keep_alive<1, 9>(), nb::keep_alive<1, 11>())
      .def("__call__", [](Step& step, nb::handle x, nb::handle y) {
        const Array xa = to_array(x), ya = to_array(y);
        nb::gil_scoped_release release;
        step(xa, ya);
      }, "x"_a, "y"_a)
      .def("mean_loss", [](const Step& s) { return s.mean_loss(); },
           "Mean loss per sample since reset_metrics (synchronises).")
      .def("accuracy", [](const Step& s) { return s.accuracy(); },
           "Accuracy since reset_metrics; -1 without accuracy=True.")
      .def("reset_metrics", [](Step& s) { s.reset_metrics(); })
      .def_prop_ro("samples", [](const Step& s) { return s.samples(); })
      .def_prop_ro("steps", [](const Step& s) { return s.steps(); })
      .def_prop_ro("non_finite_skipped", [](const Step& s) { return s.non_finite_skipped(); })
      .def_prop_ro("scaler_skipped", [](const Step& s) { return s.scaler_skipped(); })
      .def_prop_ro("graphed", [](const Step& s) { return s.graphed(); })
      .def_prop_ro("graph_nodes", [](const Step& s) { return s.graph_nodes(); })
      .def_prop_ro("replays", [](const Step& s) { return s.replays(); });
}

void bind_fit(nb::module_& train) {
  nb::class_<train::EpochMetrics>(train, "EpochMetrics", "One epoch's metrics (-1: not measured).")
      .def_ro("epoch", &train::EpochMetrics::epoch)
      .def_ro("train_loss", &train::EpochMetrics::train_loss)
      .def_ro("train_accuracy", &train::EpochMetrics::train_accuracy)
      .def_ro("test_loss", &train::EpochMetrics::test_loss)
      .def_ro("test_accuracy", &train::EpochMetrics::test_accuracy)
      .def_ro("seconds", &train::EpochMetrics::seconds)
      .def_ro("samples_per_second", &train::EpochMetrics::samples_per_second)
      .def_ro("lr", &train::EpochMetrics::lr)
      .def_ro("non_finite_skipped", &train::EpochMetrics::non_finite_skipped)
      .def_ro("scaler_skipped", &train::EpochMetrics::scaler_skipped)
      .def("json", &train::EpochMetrics::json)
      .def("__repr__", [](const train::EpochMetrics& e) { return "EpochMetrics(" + e.json() + ")"; });

  train.def("fit", [](nn::Module& model, optim::Optimizer& optimizer, PyDataLoader& loader, PyDataLoader* test,
                      int64_t epochs, LossCallable loss, bool accuracy, const std::string& log_path, bool progress,
                      bool graph, int graph_warmup, nb::handle on_epoch_end, double max_grad_norm,
                      optim::LRScheduler* scheduler, bool scheduler_per_epoch, const std::string& on_non_finite_loss,
                      optim::GradScaler* scaler, const std::string& checkpoint, int64_t checkpoint_every, bool resume,
                      bool compile) {
    train::FitOptions o;
    o.epochs = epochs;
    if (loss) o.loss = *loss;
    o.accuracy = accuracy;
    o.log_path = log_path;
    o.progress = progress;
    o.graph = graph;
    o.compile = compile;
    o.graph_warmup = graph_warmup;
    if (!on_epoch_end.is_none()) {
      // One callable or a list of them; a callback returning False (not None) stops the run, as Keras' does.
      nb::list callbacks;
      if (PyCallable_Check(on_epoch_end.ptr())) {
        callbacks.append(on_epoch_end);
      } else {
        for (nb::handle cb : on_epoch_end) callbacks.append(cb);
      }
      for (nb::handle cb : callbacks)
        o.on_epoch_end.push_back([f = nb::cast<std::function<nb::object(const train::EpochMetrics&)>>(cb)](
                                     const train::EpochMetrics& m) {
          nb::object r = f(m);
          nb::gil_scoped_acquire gil;
          const bool stop = !r.is_none() && !nb::cast<bool>(r);
          r.reset();
          return !stop;
        });
    }
    o.max_grad_norm = max_grad_norm;
    o.scheduler = scheduler;
    o.scheduler_per_epoch = scheduler_per_epoch;
    o.on_non_finite_loss = to_non_finite(on_non_finite_loss);
    o.scaler = scaler;
    o.checkpoint = checkpoint;
    o.checkpoint_every = checkpoint_every;
    o.resume = resume;
    std::vector<train::EpochMetrics> history;
    {
      nb::gil_scoped_release release;
      history = train::fit(model, optimizer, loader, test, o);
    }
    o = {};  // the callbacks' Python references, dropped with the GIL held
    return history;
  }, "model"_a, "optimizer"_a, "train_loader"_a, "test_loader"_a.none() = nb::none(), nb::kw_only(), "epochs"_a = 1,
     "loss"_a = nb::none(), "accuracy"_a = true, "log_path"_a = "", "progress"_a = true, "graph"_a = false,
     "graph_warmup"_a = 3, "on_epoch_end"_a = nb::none(), "max_grad_norm"_a = 0.0, "scheduler"_a.none() = nb::none(),
     "scheduler_per_epoch"_a = false, "on_non_finite_loss"_a = "keep_going", "scaler"_a.none() = nb::none(),
     "checkpoint"_a = "", "checkpoint_every"_a = 0, "resume"_a = false, "compile"_a = false,
     "Trains for `epochs` epochs (train mode), evaluating on test_loader after each; returns their EpochMetrics. "
     "loss(output, target) defaults to cross_entropy; on_epoch_end: a callable (or list) of an EpochMetrics, False "
     "stops; checkpoint: a file written each epoch (and every checkpoint_every steps), resumed with resume=True.");
  train.def("evaluate", [](nn::Module& model, PyDataLoader& loader, LossCallable loss, bool accuracy) {
    train::LossFn fn = loss ? train::LossFn(*loss) : train::LossFn();
    std::pair<double, double> r;
    {
      nb::gil_scoped_release release;
      r = train::evaluate(model, loader, fn, accuracy);
    }
    return r;
  }, "model"_a, "loader"_a, "loss"_a = nb::none(), "accuracy"_a = true,
     "(mean loss, accuracy) of model over one pass of loader, in eval mode without gradients.");
}

void bind_checkpoints(nb::module_& train) {
  train.def("save_checkpoint", [](const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                                  optim::LRScheduler* scheduler, optim::GradScaler* scaler, PyDataLoader* loader,
                                  int64_t epoch, int64_t batch, int64_t step) {
    train::Checkpoint c{&model, &optimizer, scheduler, scaler, loader, epoch, batch, step};
    train::save_checkpoint(path, c);
  }, "path"_a, "model"_a, "optimizer"_a, "scheduler"_a.none() = nb::none(), "scaler"_a.none() = nb::none(),
     "loader"_a.none() = nb::none(),
     "epoch"_a = 0, "batch"_a = 0, "step"_a = 0,
     "Writes the run's state (model, optimizer, scheduler, scaler, the generator, the position epoch/batch/step) to "
     "one safetensors file, crash-safely.");
  train.def("load_checkpoint", [](const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                                  optim::LRScheduler* scheduler, optim::GradScaler* scaler, PyDataLoader* loader) {
    train::Checkpoint c{&model, &optimizer, scheduler, scaler, loader};
    train::load_checkpoint(path, c);
    nb::dict position;
    position["epoch"] = c.epoch;
    position["batch"] = c.batch;
    position["step"] = c.step;
    return position;
  }, "path"_a, "model"_a, "optimizer"_a, "scheduler"_a.none() = nb::none(), "scaler"_a.none() = nb::none(),
     "loader"_a.none() = nb::none(),
     "Restores a save_checkpoint file into the given objects, strictly (ValueError naming a section without its "
     "object or an object without its section), sets the generator and the loader's position, and returns the "
     "position {'epoch', 'batch', 'step'}.");
}

}  // namespace

void bind_train(nb::module_& m) {
  nb::module_ optim = nb::borrow<nb::module_>(m.attr("optim"));
  bind_schedules(optim);
  nb::module_ train = m.def_submodule("train", "Training loops and checkpoints (kiln::train).");
  bind_train_step(train);
  bind_fit(train);
  bind_checkpoints(train);
}

}  // namespace kiln::python
