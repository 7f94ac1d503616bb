// The garbage collector's view of the modules a kiln.nn.Module holds. A module made in Python and handed to C++
// (Sequential(x), ModuleList.append(x), `self.child = x`) is held through a shared_ptr whose control block owns one
// reference to the Python object (nanobind's py_deleter). A Python subclass's class reaches its module's globals
// through its methods, and the globals reach the container: a cycle through C++ that the collector cannot see, so
// the objects outlive the interpreter (nanobind's "leaked instances" at exit). Every module type reports, and
// clears, the Python objects of the children it holds.
#include <nanobind/stl/shared_ptr.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"

namespace kiln::python {
namespace {

using Children = std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>;

// Module::replace_module is protected; a member pointer taken through a derived class reaches it (as nn.cpp).
struct RegistryAccess : nn::Module {
  using nn::Module::replace_module;
};

traverseproc nanobind_traverse = nullptr;  // nanobind's own: the instance's __dict__ and its type
inquiry nanobind_clear = nullptr;

// Copies of a child's shared_ptr that the module holds itself: one per registry entry and, in Sequential and
// ModuleList, one per entry of their own list.
long copies_held(nn::Module& m, const Children& children, const nn::Module* child) {
  long copies = 0;
  for (const auto& entry : children) copies += entry.second.get() == child;
  if (auto* list = dynamic_cast<nn::ModuleList*>(&m)) {
    for (const auto& entry : *list) copies += entry.get() == child;
  } else if (auto* sequential = dynamic_cast<nn::Sequential*>(&m)) {
    for (size_t i = 0; i < sequential->size(); ++i) copies += &(*sequential)[i] == child;
  }
  return copies;
}

// Calls f(child, python_object) for each child whose Python reference the module owns alone: the control block's
// every copy is the module's (or in `children`, the caller's copy of its registry). A child shared with another
// holder (a second container, a TrainStep) is left out: reporting its one reference from two holders would make
// the collector count it twice and free an object that is still reachable.
template <class F>
void for_each_owned_child(nn::Module& m, const Children& children, F&& f) {
  for (size_t i = 0; i < children.size(); ++i) {
    const std::shared_ptr<nn::Module>& child = children[i].second;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; ++j) seen = children[j].second.get() == child.get();
    auto* owner = std::get_deleter<nb::detail::py_deleter>(child);
    if (seen || owner == nullptr) continue;  // a module made in C++ holds no Python reference
    long in_copy = 0;
    for (const auto& entry : children) in_copy += entry.second.get() == child.get();
    if (child.use_count() == in_copy + copies_held(m, children, child.get())) f(child.get(), owner->o);
  }
}

// The module of an instance that owns it (made from Python: destroyed with the instance, and any C++ holder keeps
// the instance alive); none for a wrapper of a module C++ owns, whose children outlive the wrapper. Every bound
// module type derives from nn::Module through single inheritance, so the instance's pointer is the Module's.
nn::Module* module_of(PyObject* self) {
  const auto [ready, owned] = nb::inst_state(self);
  return ready && owned ? nb::inst_ptr<nn::Module>(self) : nullptr;
}

int module_traverse(PyObject* self, visitproc visit, void* arg) {
  if (int result = nanobind_traverse(self, visit, arg)) return result;
  nn::Module* m = module_of(self);
  if (m == nullptr) return 0;
  int result = 0;
  try {
    const Children children = m->named_children();
    for_each_owned_child(*m, children, [&](const nn::Module*, PyObject* child) {
      if (result == 0) result = visit(child, arg);
    });
  } catch (const std::exception&) {  // no memory for the copy: report no child rather than unwind through CPython
  }
  return result;
}

int module_clear(PyObject* self) {
  if (nn::Module* m = module_of(self)) {
    Children dropped;  // released when this returns, so a child freed by it does not run inside the loop
    try {
      const Children children = m->named_children();
      std::vector<const nn::Module*> owned;
      for_each_owned_child(*m, children, [&](const nn::Module* child, PyObject*) { owned.push_back(child); });
      for (const auto& entry : children) {
        if (std::find(owned.begin(), owned.end(), entry.second.get()) == owned.end()) continue;
        dropped.push_back(entry);
        (m->*(&RegistryAccess::replace_module))(entry.first, nullptr);  // erases the registry entry
      }
    } catch (const std::exception&) {
    }
  }
  return nanobind_clear(self);
}

// Gives every module type of `scope` and its submodules the collector's view above.
void install_module_gc(nb::handle scope, PyTypeObject* base) {
  const std::string prefix = nb::cast<std::string>(scope.attr("__name__")) + ".";
  for (nb::handle value : nb::borrow<nb::dict>(scope.attr("__dict__")).values()) {
    if (PyModule_Check(value.ptr())) {  // its own submodules only (kiln._kiln.nn, kiln._kiln.nn.init), no others
      if (nb::cast<std::string>(value.attr("__name__")).rfind(prefix, 0) == 0) install_module_gc(value, base);
      continue;
    }
    if (!PyType_Check(value.ptr())) continue;
    auto* type = reinterpret_cast<PyTypeObject*>(value.ptr());
    if (!PyType_IsSubtype(type, base) || type->tp_traverse == module_traverse) continue;
    if (type->tp_traverse != nanobind_traverse || type->tp_clear != nanobind_clear)
      throw std::logic_error(std::string("kiln: module type ") + type->tp_name + " has GC slots of its own");
    type->tp_traverse = module_traverse;
    type->tp_clear = module_clear;
  }
}

}  // namespace

void bind_module_gc(nb::module_& m) {
  auto* base = reinterpret_cast<PyTypeObject*>(nb::type<nn::Module>().ptr());
  nanobind_traverse = base->tp_traverse;
  nanobind_clear = base->tp_clear;
  // Python subclasses made later inherit the slots; every C++ module type is bound by now.
  install_module_gc(m, base);
}

}  // namespace kiln::python
