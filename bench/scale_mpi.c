/* Open MPI's side of bench/bench_scale.py: MPI_Init timed, then for each size in argv a
 * blocking in-place float32 MPI_Allreduce (sum): WARMUP operations, then ITERS back to
 * back after a barrier; prints "init_ms <max over ranks>" and "<bytes> <us per op, slowest rank>"
 * from rank 0. Built by bench_scale.py with mpicc. usage: scale_mpi BYTES:ITERS:WARMUP... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
  const double t0 = now_ms();
  MPI_Init(&argc, &argv);
  double init = now_ms() - t0, initMax = 0;
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Reduce(&init, &initMax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("init_ms %.1f\n", initMax);
  for (int a = 1; a < argc; ++a) {
    long bytes = 0;
    int iters = 20, warmup = 3;
    if (sscanf(argv[a], "%ld:%d:%d", &bytes, &iters, &warmup) < 1 || bytes <= 0) {
      if (rank == 0) fprintf(stderr, "bad size spec '%s' (BYTES:ITERS:WARMUP)\n", argv[a]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const long count = bytes / 4 > 0 ? bytes / 4 : 1;
    float* buf = malloc(count * sizeof(float));
    for (long i = 0; i < count; ++i) buf[i] = 1.0f;
    for (int w = 0; w < warmup; ++w) {
      MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double s = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double us = (MPI_Wtime() - s) / iters * 1e6, usMax = 0;
    MPI_Reduce(&us, &usMax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("%ld %.1f\n", count * 4, usMax);
    free(buf);
  }
  MPI_Finalize();
  return 0;
}
