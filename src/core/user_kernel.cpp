// User kernels, the device-neutral part: parameter parsing, placeholder
// resolution (CuPy's rules), argument checks, broadcasting and output
// allocation, then one call to the device's backend (which generates, compiles
// and launches the kernel). Every check runs before the device check, so a
// wrong call is reported the same way on any machine.
#include "core/user_kernel.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "core/elementwise.hpp"
#include "core/reduce.hpp"

namespace kiln {
namespace detail {

namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> words;
  std::string word;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(word);
  return words;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

constexpr DType kAllDTypes[] = {DType::Bool,  DType::Int8,    DType::Int16,    DType::Int32,   DType::Int64,
                                DType::UInt8, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

std::optional<DType> dtype_by_exact_name(const std::string& s) {
  for (DType t : kAllDTypes)
    if (dtype_name(t) == s) return t;
  return std::nullopt;
}

const char* kTypeHelp =
    "use a dtype name (bool, int8, int16, int32, int64, uint8, float16, bfloat16, float32, float64) or a "
    "one-letter type placeholder such as T";

[[noreturn]] void bad_param(const std::string& kernel, const std::string& param, const std::string& why) {
  throw ValueError(kernel + ": parameter '" + param + "': " + why);
}

std::string quoted_list(const std::vector<KernelParam>& params, int first, int last) {
  std::string s;
  for (int k = first; k < last; ++k) s += (k > first ? ", " : "") + params[static_cast<size_t>(k)].name;
  return s;
}

bool can_cast_safe(DType from, DType to) { return from == to || promote_types(from, to) == to; }

std::string scalar_kind_name(const Scalar& s) {
  return s.kind() == Scalar::Kind::Bool ? "bool" : s.kind() == Scalar::Kind::Int ? "integer" : "float";
}

/// Throws unless scalar `s` fits parameter `p` of dtype `t` (its kind, and the range of an integer type).
void check_scalar(const std::string& kernel, const KernelParam& p, DType t, const Scalar& s) {
  const bool kind_ok = s.kind() == Scalar::Kind::Bool || (s.kind() == Scalar::Kind::Int && t != DType::Bool) ||
                       (s.kind() == Scalar::Kind::Float && is_floating(t));
  const std::string type = p.dtype ? p.type_str() : p.placeholder + " = " + std::string(dtype_name(t));
  if (!kind_ok)
    throw DTypeError(kernel + ": the " + scalar_kind_name(s) + " scalar " + s.str() +
                     " cannot be passed for parameter '" + p.name + "' of type " + type +
                     "; pass a value of that type (or an array)");
  if (!scalar_fits(s, t))
    throw ValueError(kernel + ": the scalar " + s.str() + " for parameter '" + p.name + "' is out of range for " +
                     type + "; pass an array of a wider dtype or use a wider parameter type");
}

/// `s` as a value of dtype `t`: floats rounded to t's precision (as kiln's ops round weak scalars).
Scalar scalar_as(const Scalar& s, DType t) {
  if (t == DType::Bool) return Scalar(s.to_bool());
  if (is_integral(t)) return Scalar(s.to_int64());
  return round_scalar(Scalar(s.to<double>()), t);
}

std::string count_message(const std::string& kernel, const std::vector<KernelParam>& params, int nin, int nout,
                          size_t got) {
  std::string s = kernel + ": expected " + std::to_string(nin) + " input argument" + (nin == 1 ? "" : "s") + " (" +
                  quoted_list(params, 0, nin) + ")";
  if (nout > 0)
    s += " or " + std::to_string(nin + nout) + " (the inputs, then the outputs " +
         quoted_list(params, nin, nin + nout) + ")";
  return s + ", got " + std::to_string(got);
}

/// Checks the arguments' count and that outputs are arrays and arrays are defined; returns what type
/// resolution sees of them.
std::vector<ArgType> arg_types(const std::string& kernel, const std::vector<KernelParam>& params, int nin, int nout,
                               const std::vector<KernelArg>& args) {
  if (args.size() != static_cast<size_t>(nin) && args.size() != static_cast<size_t>(nin + nout))
    throw ValueError(count_message(kernel, params, nin, nout, args.size()));
  std::vector<ArgType> types(args.size());
  for (size_t k = 0; k < args.size(); ++k) {
    const KernelParam& p = params[k];
    if (args[k].is_array()) {
      if (!args[k].array().defined())
        throw ValueError(kernel + ": the argument for parameter '" + p.name +
                         "' is an undefined (default-constructed) Array");
      types[k].is_array = true;
      types[k].dtype = args[k].array().dtype();
    } else {
      if (p.output)
        throw ValueError(kernel + ": output '" + p.name + "' must be an Array, got the scalar " +
                         args[k].scalar().str());
      types[k].scalar = args[k].scalar();
    }
  }
  return types;
}

/// The device every array argument lives on (current_device() when there is none); throws DeviceError when
/// they differ or when it is not a GPU.
Device kernel_device(const std::string& kernel, const std::vector<KernelParam>& params,
                     const std::vector<KernelArg>& args) {
  const Array* first = nullptr;
  size_t first_index = 0;
  for (size_t k = 0; k < args.size(); ++k) {
    if (!args[k].is_array()) continue;
    const Array& a = args[k].array();
    if (!first) {
      first = &a;
      first_index = k;
    } else if (a.device() != first->device()) {
      throw DeviceError(kernel + ": arguments are on different devices, " + first->device().str() + " ('" +
                        params[first_index].name + "') and " + a.device().str() + " ('" + params[k].name +
                        "'); move one with .to(" + first->device().str() +
                        ") so all live on one GPU (kiln never copies behind your back)");
    }
  }
  const Device device = first ? first->device() : current_device();
  if (device.type != DeviceType::CUDA)
    throw DeviceError(kernel + ": user kernels run on CUDA devices, but " +
                      (first ? "the arguments are on " + device.str() : "the current device is " + device.str()) +
                      (num_gpus() > 0 ? "; move the data to a GPU first, e.g. x.to(gpu(0)), and call the kernel with "
                                        "the GPU arrays"
                                      : "; " + detail::gpu_count_str() +
                                            ", so run it where there is one (built-in ops and kiln::fuse also run "
                                            "on the CPU)"));
  return device;
}

}  // namespace

// ------------------------------------------------------------------ parsing

std::vector<KernelParam> parse_kernel_params(const std::string& params, bool outputs, const std::string& kernel) {
  std::vector<KernelParam> result;
  const std::string list = trim(params);
  if (list.empty()) return result;
  const char* what = outputs ? "output" : "input";
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string text = trim(list.substr(start, comma - start));
    start = comma + 1;
    const std::vector<std::string> words = split_words(text);
    if (words.size() < 2)
      throw ValueError(kernel + ": syntax error in the " + what + " parameters \"" + params + "\" at \"" + text +
                       "\": each parameter is \"[raw] type name\", e.g. \"float32 x, raw T y\"");
    KernelParam p;
    p.output = outputs;
    p.name = words.back();
    const std::string& type = words[words.size() - 2];
    for (size_t w = 0; w + 2 < words.size(); ++w) {
      if (words[w] == "raw")
        p.raw = true;
      else
        bad_param(kernel, p.name, "unknown keyword '" + words[w] + "' (the only keyword is raw)");
    }
    if (!is_identifier(p.name)) bad_param(kernel, p.name, "the name is not a C++ identifier");
    if (p.name.rfind("kiln_", 0) == 0 || p.name[0] == '_')
      bad_param(kernel, p.name, "names starting with kiln_ or _ are reserved for the generated code");
    if (type.size() == 1) {
      if (!std::isalpha(static_cast<unsigned char>(type[0])))
        bad_param(kernel, p.name, "unknown type '" + type + "'; " + kTypeHelp);
      p.placeholder = type;
    } else if (std::optional<DType> t = dtype_by_exact_name(type)) {
      p.dtype = t;
    } else {
      bad_param(kernel, p.name, "unknown type '" + type + "'; " + kTypeHelp);
    }
    result.push_back(std::move(p));
    if (comma == list.size()) break;
  }
  return result;
}

TypeSpec parse_type_spec(const std::string& type, const std::string& kernel, const char* what) {
  std::string t;
  for (const std::string& w : split_words(type)) t += (t.empty() ? "" : " ") + w;
  TypeSpec spec;
  if (t.size() == 1 && std::isalpha(static_cast<unsigned char>(t[0]))) {
    spec.placeholder = t;
    return spec;
  }
  // C spellings first ("float" and "int" are C's float32/int32 here, not NumPy's float64/int64), then any
  // name parse_dtype reads (which includes short, long, half, double).
  static const std::pair<const char*, DType> c_names[] = {{"float", DType::Float32},
                                                          {"int", DType::Int32},
                                                          {"signed char", DType::Int8},
                                                          {"long long", DType::Int64},
                                                          {"unsigned char", DType::UInt8}};
  std::optional<DType> d;
  for (const auto& [name, dtype] : c_names)
    if (t == name) d = dtype;
  if (!d) d = find_dtype(t);
  if (d) {
    spec.dtype = d;
    return spec;
  }
  throw ValueError(kernel + ": unknown " + what + " '" + type + "'; " + kTypeHelp +
                   ", or a C type (float, double, int, long long, ...)");
}

// ------------------------------------------------------------------ types

std::optional<DType> TypeMap::find(const std::string& placeholder) const {
  for (const auto& [name, dtype] : bound)
    if (name == placeholder) return dtype;
  return std::nullopt;
}

TypeMap resolve_kernel_types(const std::string& kernel, const std::vector<KernelParam>& params, int nin,
                             const std::vector<ArgType>& args) {
  TypeMap map;
  std::vector<std::string> binder;  // the parameter that bound each placeholder, for messages
  auto bind_array = [&](const KernelParam& p, DType t) {
    for (size_t b = 0; b < map.bound.size(); ++b) {
      if (map.bound[b].first != p.placeholder) continue;
      if (map.bound[b].second != t)
        throw DTypeError(kernel + ": parameter '" + p.name + "' has type " + p.placeholder + ", which '" + binder[b] +
                         "' binds to " + std::string(dtype_name(map.bound[b].second)) + ", but its array is " +
                         std::string(dtype_name(t)) + "; convert one with astype(" +
                         std::string(dtype_name(map.bound[b].second)) + ")");
      return;
    }
    map.bound.emplace_back(p.placeholder, t);
    binder.push_back(p.name);
  };
  // Outputs passed in first (exact types), then input arrays.
  for (size_t k = static_cast<size_t>(nin); k < args.size(); ++k) {
    const KernelParam& p = params[k];
    if (p.dtype && *p.dtype != args[k].dtype)
      throw DTypeError(kernel + ": output '" + p.name + "' is declared " + p.type_str() + " but the array passed is " +
                       std::string(dtype_name(args[k].dtype)) + "; pass a " + p.type_str() +
                       " array (outputs are written without conversion)");
    if (!p.dtype) bind_array(p, args[k].dtype);
  }
  for (int k = 0; k < nin; ++k) {
    const KernelParam& p = params[static_cast<size_t>(k)];
    const ArgType& a = args[static_cast<size_t>(k)];
    if (!a.is_array) {
      if (p.raw)
        throw ValueError(kernel + ": raw parameter '" + p.name + "' needs an Array, got the scalar " + a.scalar.str());
      continue;
    }
    if (!p.dtype) {
      bind_array(p, a.dtype);
    } else if (p.raw ? a.dtype != *p.dtype : !can_cast_safe(a.dtype, *p.dtype)) {
      throw DTypeError(
          kernel + ": parameter '" + p.name + "' is declared " + p.type_str() + " but the array is " +
          std::string(dtype_name(a.dtype)) +
          (p.raw ? " (a raw array must have its parameter's dtype exactly)" : ", which does not cast safely to it") +
          "; convert it with astype(" + p.type_str() + ")");
    }
  }
  // Placeholders no array binds take the scalars' NumPy types (bool, int64, float64), promoted.
  for (int k = 0; k < nin; ++k) {
    const KernelParam& p = params[static_cast<size_t>(k)];
    const ArgType& a = args[static_cast<size_t>(k)];
    if (a.is_array || p.dtype) continue;
    bool bound_by_array = false;
    for (size_t b = 0; b < map.bound.size(); ++b)
      if (map.bound[b].first == p.placeholder) bound_by_array = true;
    if (bound_by_array) continue;
    DType t = a.scalar.default_dtype();
    for (int j = k + 1; j < nin; ++j) {
      const KernelParam& q = params[static_cast<size_t>(j)];
      if (!args[static_cast<size_t>(j)].is_array && !q.dtype && q.placeholder == p.placeholder)
        t = promote_types(t, args[static_cast<size_t>(j)].scalar.default_dtype());
    }
    map.bound.emplace_back(p.placeholder, t);
    binder.push_back(p.name);
  }
  for (int k = 0; k < nin; ++k) {
    const KernelParam& p = params[static_cast<size_t>(k)];
    const ArgType& a = args[static_cast<size_t>(k)];
    if (!a.is_array) check_scalar(kernel, p, param_dtype(kernel, p, map), a.scalar);
  }
  return map;
}

DType param_dtype(const std::string& kernel, const KernelParam& p, const TypeMap& types) {
  if (p.dtype) return *p.dtype;
  if (std::optional<DType> t = types.find(p.placeholder)) return *t;
  throw DTypeError(kernel + ": cannot determine type " + p.placeholder + " of " + (p.output ? "output" : "input") +
                   " '" + p.name + "': no argument binds " + p.placeholder +
                   "; pass the output array (its dtype binds it) or declare the parameter with a dtype");
}

namespace {

/// Construction checks shared by both kernel kinds.
void check_definition(const std::string& name, const std::vector<KernelParam>& params,
                      const std::vector<std::string>& reserved) {
  if (!is_identifier(name))
    throw ValueError("user kernel: the name '" + name +
                     "' is not a C++ identifier (it names the __global__ function); use e.g. \"my_kernel\"");
  if (name.rfind("kiln_", 0) == 0)
    throw ValueError("user kernel: the name '" + name +
                     "' starts with kiln_, which kiln's own generated kernels use; use e.g. \"my_kernel\"");
  for (size_t k = 0; k < params.size(); ++k) {
    const KernelParam& p = params[k];
    for (size_t j = 0; j < k; ++j)
      if (params[j].name == p.name)
        bad_param(name, p.name, "the name is used twice; give every parameter its own name");
    for (const std::string& r : reserved)
      if (p.name == r || p.placeholder == r)
        bad_param(name, p.name, "'" + r + "' is reserved in this kernel's code; rename it");
    for (const char* builtin : {"threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "kd"})
      if (p.name == builtin) bad_param(name, p.name, "the name is a CUDA built-in the generated loop uses; rename it");
    for (const KernelParam& q : params)
      if (!q.placeholder.empty() && q.placeholder == p.name)
        bad_param(name, p.name, "the name is also a type placeholder; rename one");
  }
}

/// Parses both parameter lists into `def` (inputs, then outputs), keeps the compile settings and checks
/// the definition; `reserved` are the names the kernel's code defines.
void parse_definition(KernelDef& def, const std::string& name, const std::string& in_params,
                      const std::string& out_params, std::vector<std::string> options, std::string preamble,
                      const std::vector<std::string>& reserved) {
  def.name = name;
  def.options = std::move(options);
  def.preamble = std::move(preamble);
  def.params = parse_kernel_params(in_params, false, name);
  def.nin = static_cast<int>(def.params.size());
  for (KernelParam& p : parse_kernel_params(out_params, true, name)) def.params.push_back(std::move(p));
  def.nout = static_cast<int>(def.params.size()) - def.nin;
  check_definition(name, def.params, reserved);
}

/// Placeholders bound by a call's arguments, and each parameter's dtype under them.
struct BoundTypes {
  TypeMap types;
  std::vector<DType> dtypes;  ///< one per parameter, inputs then outputs
};

/// The checks and typing every call starts with: argument count and kinds, then type resolution.
BoundTypes bind_types(const KernelDef& def, const std::vector<KernelArg>& args) {
  BoundTypes bound;
  bound.types =
      resolve_kernel_types(def.name, def.params, def.nin, arg_types(def.name, def.params, def.nin, def.nout, args));
  for (const KernelParam& p : def.params) bound.dtypes.push_back(param_dtype(def.name, p, bound.types));
  return bound;
}

}  // namespace

template <class Def>
const std::string& UserKernel<Def>::name() const {
  return def_->name;
}
template <class Def>
int UserKernel<Def>::nin() const {
  return def_->nin;
}
template <class Def>
int UserKernel<Def>::nout() const {
  return def_->nout;
}
template <class Def>
void UserKernel<Def>::require_single_output() const {
  if (def_->nout > 1)
    throw ValueError(def_->name + ": the kernel has " + std::to_string(def_->nout) +
                     " outputs; use call({...}), which returns all of them");
}
template class UserKernel<ElementwiseKernelDef>;
template class UserKernel<ReductionKernelDef>;

}  // namespace detail

// ------------------------------------------------------------------ ElementwiseKernel

ElementwiseKernel::ElementwiseKernel(const std::string& in_params, const std::string& out_params,
                                     const std::string& operation, const std::string& name,
                                     ElementwiseKernelOptions options)
    : UserKernel(std::make_shared<detail::ElementwiseKernelDef>()) {
  def_->operation = operation;
  detail::parse_definition(*def_, name, in_params, out_params, std::move(options.options), std::move(options.preamble),
                           {"i", "n"});
}

Array ElementwiseKernel::single_output(std::vector<Array> outputs) const {
  return outputs.empty() ? Array() : outputs.front();
}

namespace {
/// User kernels have no gradient: an array argument that requires grad is refused (never a silently dropped gradient).
void reject_grad_args(const std::vector<KernelArg>& args, const std::string& kernel) {
  for (const KernelArg& a : args)
    if (a.is_array())
      detail::reject_grad({&a.array()}, ("user kernel " + kernel).c_str(),
                          "user kernels are not differentiable: compute the op with kiln's ops to get its gradient");
}
/// The outputs passed in (arguments from `first_output` on) were written in place, as by any in-place op: their
/// storage's version moves on, so a backward that saved one of them throws instead of reading the new values.
void note_output_writes(const std::vector<KernelArg>& args, size_t first_output) {
  for (size_t k = first_output; k < args.size(); ++k)
    if (args[k].is_array() && args[k].array().storage()) args[k].array().storage()->bump_version();
}
}  // namespace

std::vector<Array> ElementwiseKernel::call(const std::vector<KernelArg>& args, std::optional<int64_t> size) const {
  using namespace detail;
  const ElementwiseKernelDef& def = *def_;
  const std::string& kernel = def.name;
  reject_grad_args(args, kernel);
  BoundTypes bound = bind_types(def, args);
  const std::vector<DType>& dtypes = bound.dtypes;
  UserElementwiseCall call;
  call.kernel = &def;
  call.types = std::move(bound.types);

  // The shape: the non-raw inputs broadcast together, or `size`; outputs passed in must have a shape the
  // inputs broadcast to (they are never broadcast themselves).
  bool have_array = false;
  for (int k = 0; k < def.nin; ++k) {
    const KernelArg& a = args[static_cast<size_t>(k)];
    if (!a.is_array() || def.params[static_cast<size_t>(k)].raw) continue;
    call.shape = broadcast_shapes(call.shape, a.array().shape(), kernel.c_str());
    have_array = true;
  }
  const Shape inputs_shape = call.shape;
  bool have_output = false;
  for (size_t k = static_cast<size_t>(def.nin); k < args.size(); ++k) {
    if (def.params[k].raw) continue;
    const Shape& out = args[k].array().shape();
    bool ok = false;
    if (have_output) {
      ok = out == call.shape;  // every output has the one shape
    } else {
      try {
        ok = broadcast_shapes(inputs_shape, out, kernel.c_str()) == out;
      } catch (const ShapeError&) {
        ok = false;
      }
    }
    if (!ok)
      throw ShapeError(kernel + ": output '" + def.params[k].name + "' has shape " + shape_str(out) +
                       " but the arguments broadcast to " + shape_str(have_output ? call.shape : inputs_shape) +
                       "; pass an output of that shape (outputs are never broadcast)");
    call.shape = out;
    have_output = have_array = true;
  }
  if (!have_array) {
    if (!size)
      throw ValueError(kernel + ": no argument is a non-raw array, so the number of elements is unknown; pass it: " +
                       kernel + ".call(args, size)");
    if (*size < 0) throw ValueError(kernel + ": size must be >= 0, got " + std::to_string(*size));
    call.shape = Shape{*size};
  } else if (size && *size != shape_numel(call.shape)) {
    throw ValueError(kernel + ": size " + std::to_string(*size) + " differs from the " +
                     std::to_string(shape_numel(call.shape)) + " elements of the arguments' broadcast shape " +
                     shape_str(call.shape) + "; leave size out when arrays give the shape");
  }
  call.size = shape_numel(call.shape);
  call.device = kernel_device(kernel, def.params, args);

  std::vector<Array> outputs;
  for (size_t k = 0; k < def.params.size(); ++k) {
    const KernelParam& p = def.params[k];
    BoundArg b;
    b.param = &p;
    b.dtype = dtypes[k];
    if (k < args.size() && args[k].is_array()) {
      const Array& a = args[k].array();
      b.array = p.raw || a.shape() == call.shape ? a : a.broadcast_to(call.shape);
    } else if (k < args.size()) {
      b.is_scalar = true;
      b.scalar = scalar_as(args[k].scalar(), b.dtype);
    } else {
      b.array = make_array(call.shape, b.dtype, call.device);
    }
    if (p.output) outputs.push_back(b.array);
    call.args.push_back(std::move(b));
  }
  if (call.size > 0) backend_for(call.device).user_elementwise(call);
  note_output_writes(args, static_cast<size_t>(def.nin));
  return outputs;
}

// ------------------------------------------------------------------ ReductionKernel

ReductionKernel::ReductionKernel(const std::string& in_params, const std::string& out_params,
                                 const std::string& map_expr, const std::string& reduce_expr,
                                 const std::string& post_map_expr, const std::string& identity, const std::string& name,
                                 ReductionKernelOptions options)
    : UserKernel(std::make_shared<detail::ReductionKernelDef>()) {
  detail::ReductionKernelDef& d = *def_;
  d.map_expr = map_expr;
  d.reduce_expr = reduce_expr;
  d.post_map_expr = post_map_expr;
  d.identity = detail::trim(identity);
  detail::parse_definition(d, name, in_params, out_params, std::move(options.options), std::move(options.preamble),
                           {"a", "b"});
  if (d.nout == 0)
    throw ValueError(name + ": a ReductionKernel needs at least one output parameter (post_map_expr writes it)");
  for (const detail::KernelParam& p : d.params)
    if (p.output && p.raw)
      detail::bad_param(name, p.name, "ReductionKernel outputs cannot be raw (post_map_expr writes one element each)");
  if (detail::trim(map_expr).empty() || detail::trim(reduce_expr).empty())
    throw ValueError(name + ": map_expr and reduce_expr must not be empty (e.g. \"x\" and \"a + b\")");
  if (options.reduce_type.empty()) {
    const detail::KernelParam& first = d.params[static_cast<size_t>(d.nin)];
    d.reduce_type.dtype = first.dtype;
    d.reduce_type.placeholder = first.placeholder;
  } else {
    d.reduce_type = detail::parse_type_spec(options.reduce_type, name, "reduce_type");
    if (!d.reduce_type.dtype) {
      bool used = false;
      for (const detail::KernelParam& p : d.params) used = used || p.placeholder == d.reduce_type.placeholder;
      if (!used)
        throw ValueError(name + ": reduce_type '" + d.reduce_type.placeholder +
                         "' is a placeholder that no parameter uses, so nothing can bind it; use a dtype or C type");
    }
  }
}

Array ReductionKernel::operator()(const Array& x, Axes axis, bool keepdims) const {
  return (*this)(std::vector<KernelArg>{KernelArg(x)}, std::move(axis), keepdims);
}

Array ReductionKernel::operator()(const std::vector<KernelArg>& args, Axes axis, bool keepdims) const {
  require_single_output();  // before call() allocates and launches
  return call(args, std::move(axis), keepdims).front();
}

std::vector<Array> ReductionKernel::call(const std::vector<KernelArg>& args, Axes axis, bool keepdims) const {
  using namespace detail;
  const ReductionKernelDef& def = *def_;
  const std::string& kernel = def.name;
  reject_grad_args(args, kernel);
  BoundTypes bound = bind_types(def, args);
  const std::vector<DType>& dtypes = bound.dtypes;
  UserReductionCall call;
  call.kernel = &def;
  call.types = std::move(bound.types);
  if (def.reduce_type.dtype) {
    call.reduce_type = *def.reduce_type.dtype;
  } else if (std::optional<DType> t = call.types.find(def.reduce_type.placeholder)) {
    call.reduce_type = *t;
  } else {
    throw DTypeError(kernel + ": cannot determine the reduce type " + def.reduce_type.placeholder +
                     ": no argument binds it; pass the output array or give reduce_type a dtype");
  }

  // The reduced shape: the non-raw inputs broadcast together (scalars count as 0-d).
  for (int k = 0; k < def.nin; ++k)
    if (args[static_cast<size_t>(k)].is_array() && !def.params[static_cast<size_t>(k)].raw)
      call.in_shape = broadcast_shapes(call.in_shape, args[static_cast<size_t>(k)].array().shape(), kernel.c_str());
  const Reduction plan = plan_reduction(call.in_shape, axis, kernel.c_str());
  call.axes = plan.axes;
  const Shape& keep_shape = plan.keep_shape;
  const Shape& out_shape = plan.out_shape;
  const Shape& result_shape = keepdims ? keep_shape : out_shape;
  if (plan.count == 0 && def.identity.empty() && shape_numel(keep_shape) > 0)
    throw ValueError(kernel + ": zero-size reduction of shape " + shape_str(call.in_shape) +
                     " and the kernel has no identity; give an identity or reduce over non-empty axes");
  for (size_t k = static_cast<size_t>(def.nin); k < args.size(); ++k)
    if (!(args[k].array().shape() == result_shape))
      throw ShapeError(kernel + ": output '" + def.params[k].name + "' has shape " +
                       shape_str(args[k].array().shape()) + " but the reduction gives shape " +
                       shape_str(result_shape) + "; pass an output of shape " + shape_str(result_shape));
  call.device = kernel_device(kernel, def.params, args);

  std::vector<Array> outputs;
  for (size_t k = 0; k < def.params.size(); ++k) {
    const KernelParam& p = def.params[k];
    BoundArg b;
    b.param = &p;
    b.dtype = dtypes[k];
    if (!p.output && args[k].is_array()) {
      const Array& a = args[k].array();
      b.array = p.raw || a.shape() == call.in_shape ? a : a.broadcast_to(call.in_shape);
    } else if (!p.output) {
      b.is_scalar = true;
      b.scalar = scalar_as(args[k].scalar(), b.dtype);
    } else if (k < args.size()) {
      Array view = args[k].array();
      if (!keepdims)
        for (int64_t d : call.axes) view = view.expand_dims(d);
      b.array = view;
      outputs.push_back(args[k].array());
    } else {
      b.array = make_array(keep_shape, b.dtype, call.device);
      outputs.push_back(keepdims ? b.array : b.array.reshape(out_shape));
    }
    call.args.push_back(std::move(b));
  }
  if (shape_numel(keep_shape) > 0) backend_for(call.device).user_reduction(call);
  note_output_writes(args, static_cast<size_t>(def.nin));
  return outputs;
}

}  // namespace kiln
