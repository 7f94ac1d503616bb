/* kiln's entry points into oneMKL, compiled and linked by scripts/build-mkl with MKL's static libraries into
 * libkiln_mkl.so. Only these names are exported: MKL's own (cblas_sgemm, ...) stay local to the library, so
 * kiln links OpenBLAS as well and sends each product to one of them by its size (src/cpu/matmul.cpp). The thread count is set for the calling thread, for this call only. */
#include <mkl_cblas.h>
#include <mkl_service.h>

static CBLAS_TRANSPOSE trans(int t) { return t ? CblasTrans : CblasNoTrans; }

void kiln_mkl_sgemm(int threads, int trans_a, int trans_b, int m, int n, int k, const float* a, int lda,
                    const float* b, int ldb, float* c, int ldc) {
  const int previous = mkl_set_num_threads_local(threads);
  cblas_sgemm(CblasRowMajor, trans(trans_a), trans(trans_b), m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  mkl_set_num_threads_local(previous);
}

void kiln_mkl_dgemm(int threads, int trans_a, int trans_b, int m, int n, int k, const double* a, int lda,
                    const double* b, int ldb, double* c, int ldc) {
  const int previous = mkl_set_num_threads_local(threads);
  cblas_dgemm(CblasRowMajor, trans(trans_a), trans(trans_b), m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
  mkl_set_num_threads_local(previous);
}
