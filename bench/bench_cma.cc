// bench_cma: is cross-memory attach (process_vm_readv) a faster way for one process to read
// another's buffer than the shared-memory rings' two copies? The question behind single copy
// for cpu buffers, which torch allocates and which therefore cannot live in shared memory.
//
// A child process holds a buffer; the parent reads it with process_vm_readv in chunks, and,
// in the same run, copies a buffer of its own with memcpy (the physical limit) and through a
// 1 MiB staging buffer (the ring: copy in, copy out). Each figure is the median of the reps.
//
//   bench_cma [--sizes 65536,1048576,...] [--chunk BYTES] [--reps N]
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <signal.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double timeUs(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes = {65536, 1 << 20, 16 << 20, 64 << 20};
  size_t chunk = 1 << 20;
  int reps = 21;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      for (char* t = strtok(argv[++i], ","); t; t = strtok(nullptr, ",")) sizes.push_back(atol(t));
    } else if (a == "--chunk" && i + 1 < argc) {
      chunk = atol(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--sizes B,B,...] [--chunk BYTES] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  const size_t maxBytes = *std::max_element(sizes.begin(), sizes.end());
  std::vector<char> theirs(maxBytes, 1);  // the child's copy is the one read (same address)
  pid_t child = fork();
  if (child == 0) {
    std::fill(theirs.begin(), theirs.end(), 3);  // its own pages, not shared with the parent
    pause();
    _exit(0);
  }
  usleep(200000);
  std::vector<char> mine(maxBytes, 2), dst(maxBytes, 0), staging(1 << 20);
  printf("# bench_cma: process_vm_readv in %zu-byte chunks vs memcpy, %d reps, median\n", chunk,
         reps);
  printf("%12s %12s %10s %12s %10s %14s %10s\n", "size(B)", "cma(us)", "GB/s", "memcpy(us)", "GB/s",
         "2 copies(us)", "GB/s");
  int rc = 0;
  for (size_t bytes : sizes) {
    double cma = timeUs(reps, [&] {
      for (size_t off = 0; off < bytes; off += chunk) {
        const size_t n = std::min(chunk, bytes - off);
        iovec local{dst.data() + off, n}, remote{theirs.data() + off, n};
        if (process_vm_readv(child, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(n)) {
          perror("process_vm_readv");
          rc = 1;
          return;
        }
      }
    });
    if (rc != 0) break;
    if (dst[bytes - 1] != 3) {
      fprintf(stderr, "read the wrong bytes\n");
      rc = 1;
      break;
    }
    double mc = timeUs(reps, [&] { std::memcpy(dst.data(), mine.data(), bytes); });
    double two = timeUs(reps, [&] {
      for (size_t off = 0; off < bytes; off += staging.size()) {
        const size_t n = std::min(staging.size(), bytes - off);
        std::memcpy(staging.data(), mine.data() + off, n);
        std::memcpy(dst.data() + off, staging.data(), n);
      }
    });
    printf("%12zu %12.1f %10.2f %12.1f %10.2f %14.1f %10.2f\n", bytes, cma, bytes / cma / 1e3, mc,
           bytes / mc / 1e3, two, bytes / two / 1e3);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return rc;
}
