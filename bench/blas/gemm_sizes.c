// OpenBLAS's cblas_sgemm against oneMKL's (libkiln_mkl.so) for small and mid-sized float32 products on all
// cores: threads as kiln picks them (one per 2^20 multiply-adds, at most 16). Best of several reps, GFLOP/s.
// `gemm_sizes both` alternates the libraries in one process; `gemm_sizes openblas` / `gemm_sizes mkl` runs one.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
enum { RowMajor = 101, NoTrans = 111, Trans = 112 };
void cblas_sgemm(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
void openblas_set_num_threads(int);
void kiln_mkl_sgemm(int, int, int, int, int, int, const float*, int, const float*, int, float*, int);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char** argv) {
  const char* which = argc > 1 ? argv[1] : "both";
  const int use[2] = {which[0] != 'm', which[0] != 'o'};
  int shapes[][5] = {{128, 128, 128, 0, 0}, {256, 256, 256, 0, 0}, {384, 384, 384, 0, 0}, {512, 512, 512, 0, 0},
                     {640, 640, 640, 0, 0}, {768, 768, 768, 0, 0}, {1024, 1024, 1024, 0, 0}, {2048, 2048, 2048, 0, 0},
                     {100, 1000, 784, 0, 1}, {100, 1000, 1000, 0, 1}, {784, 1000, 100, 1, 0}, {1000, 1000, 100, 1, 0},
                     {100, 784, 1000, 0, 0}, {100, 1000, 1000, 0, 0}, {128, 1000, 2048, 0, 1}};
  float* a = malloc(sizeof(float) << 22); float* b = malloc(sizeof(float) << 22); float* c = malloc(sizeof(float) << 22);
  for (int i = 0; i < (1 << 22); ++i) { a[i] = (i % 17) * 0.01f; b[i] = (i % 13) * 0.02f; }
  printf("m n k ta tb | threads | OpenBLAS GFLOP/s | oneMKL GFLOP/s | MKL/OpenBLAS\n");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], ta = shapes[s][3], tb = shapes[s][4];
    long long work = (long long)m * n * k;
    int th = (int)(work >> 20); if (th < 1) th = 1; if (th > 16) th = 16;
    int lda = ta ? m : k, ldb = tb ? k : n;
    double best[2] = {1e9, 1e9};
    for (int round = 0; round < 3; ++round)
      for (int lib = 0; lib < 2; ++lib) {
        if (!use[lib]) continue;
        int reps = (int)(2e8 / work) + 3;
        for (int r = 0; r < reps + 2; ++r) {
          double t0 = now();
          if (lib == 0) { openblas_set_num_threads(th); cblas_sgemm(RowMajor, ta ? Trans : NoTrans, tb ? Trans : NoTrans, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n); }
          else kiln_mkl_sgemm(th, ta, tb, m, n, k, a, lda, b, ldb, c, n);
          double t = now() - t0;
          if (r >= 2 && t < best[lib]) best[lib] = t;
        }
      }
    printf("%d %d %d %d %d | %d | %.0f | %.0f | %.2f\n", m, n, k, ta, tb, th, 2.0 * work / best[0] / 1e9,
           2.0 * work / best[1] / 1e9, best[0] / best[1]);
  }
  return 0;
}
