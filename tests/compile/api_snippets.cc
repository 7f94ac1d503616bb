// Compile checks of the public API (issue 11), run by ctest (tests/CMakeLists.txt; .cc keeps it out of kiln_tests):
//   api.compile.member_forms       (no macro) must compile: the member forms and printing need no fmt;
//   api.compile_fail.free_std      (-DKILN_FREE_STD) must NOT compile: under `using namespace kiln`,
//                                  `std(x)` is ambiguous with namespace std, which is why x.std() exists.
#include <iostream>

#include <kiln/kiln.hpp>

#ifdef FMT_VERSION
#error "kiln/kiln.hpp pulled in fmt: fmt formatters belong in kiln/fmt.hpp only"
#endif

using namespace kiln;

void snippet(Array x) {
#ifdef KILN_FREE_STD
  Array s = std(x);
#else
  Array s = x.std();
#endif
  x[0] = ones({3});
  std::cout << x.shape() << x.device() << x.dtype() << s.argmax(0) << x.reshape(-1);
}
