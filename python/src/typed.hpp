// Argument types that only name what a parameter accepts in the generated stubs (_kiln.pyi): each is an
// nb::handle taking any object, converted in the function body by convert.hpp, so kiln's own errors (a
// DTypeError naming the dtype, a ShapeError) reach the caller instead of nanobind's "incompatible arguments".
#pragma once

#include <nanobind/nanobind.h>

#define KILN_PY_TYPED_HANDLE(Name, stub_type)                                                         \
  namespace kiln::python {                                                                            \
  struct Name : nanobind::handle {                                                                    \
    Name() = default;                                                                                 \
    Name(nanobind::handle h) : nanobind::handle(h) {} /* NOLINT */                                    \
  };                                                                                                  \
  }                                                                                                   \
  namespace nanobind::detail {                                                                        \
  template <>                                                                                         \
  struct type_caster<kiln::python::Name> {                                                            \
    NB_TYPE_CASTER(kiln::python::Name, const_name(stub_type))                                         \
    bool from_python(handle src, uint8_t, cleanup_list*) noexcept {                                   \
      value = kiln::python::Name(src);                                                                \
      return true;                                                                                    \
    }                                                                                                 \
    static handle from_cpp(kiln::python::Name h, rv_policy, cleanup_list*) noexcept { return h.inc_ref(); } \
  };                                                                                                  \
  }

KILN_PY_TYPED_HANDLE(DTypeLike, "kiln._kiln.dtype | str | type | numpy.dtype")
KILN_PY_TYPED_HANDLE(DeviceLike, "kiln._kiln.Device | str")
KILN_PY_TYPED_HANDLE(ShapeLike, "int | collections.abc.Sequence[int]")
KILN_PY_TYPED_HANDLE(AxisLike, "int | collections.abc.Sequence[int]")  // None (all axes) is every default
KILN_PY_TYPED_HANDLE(ArrayLike, "kiln._kiln.Array | numpy.typing.ArrayLike")
KILN_PY_TYPED_HANDLE(ScalarLike, "bool | int | float")
KILN_PY_TYPED_HANDLE(OrdLike, "float | str")  // numpy.linalg.norm's ord: a number, "fro" or "nuc"
KILN_PY_TYPED_HANDLE(TokensLike, "collections.abc.Sequence[int] | kiln._kiln.Array | numpy.typing.ArrayLike")
KILN_PY_TYPED_HANDLE(TokenCallback, "collections.abc.Callable[[int], object]")

#undef KILN_PY_TYPED_HANDLE
