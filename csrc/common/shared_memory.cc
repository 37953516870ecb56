#include "shared_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

namespace xccl {

SharedMapping createSharedMapping(size_t bytes, const char* what) {
  int fd = memfd_create(what, MFD_CLOEXEC);
  XCCL_SYSCHECK(fd, "memfd_create");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    throw IoError(strCat("ftruncate of a ", bytes, "-byte ", what, " failed: ", errnoString(err)));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    throw IoError(strCat("mmap of a ", bytes, "-byte ", what, " failed: ", errnoString(err)));
  }
  return SharedMapping{fd, base, bytes};
}

namespace {

// Opens process `pid`'s memfd `fd` and checks that it is `total` bytes long.
int openPeerMemfd(long pid, long fd, size_t total, const std::string& what) {
  std::string path = strCat("/proc/", pid, "/fd/", fd);
  int sfd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (sfd < 0) {
    throw IoError(strCat("cannot open ", what, " ", path, ": ", errnoString(errno),
                         " (set XCCL_SHM_DISABLE=1 to use TCP)"));
  }
  struct stat st {};
  if (fstat(sfd, &st) != 0 || static_cast<size_t>(st.st_size) != total) {
    ::close(sfd);
    throw RemoteError(strCat(what, " ", path, " has the wrong size"));
  }
  return sfd;
}

void* mapOrThrow(int sfd, size_t bytes, size_t offset, long pid, long fd, const std::string& what) {
  void* base =
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, static_cast<off_t>(offset));
  if (base != MAP_FAILED) return base;
  const int err = errno;
  ::close(sfd);
  throw IoError(
      strCat("mmap of ", what, " /proc/", pid, "/fd/", fd, " failed: ", errnoString(err)));
}

}  // namespace

SharedMapping openSharedMapping(long pid, long fd, size_t bytes, const std::string& what) {
  const int sfd = openPeerMemfd(pid, fd, bytes, what);
  return SharedMapping{sfd, mapOrThrow(sfd, bytes, 0, pid, fd, what), bytes};
}

SharedMapping openSharedRange(long pid, long fd, size_t total, size_t offset, size_t bytes,
                              const std::string& what) {
  XCCL_CHECK(offset + bytes <= total, what, ": range ", offset, "+", bytes, " past ", total);
  const int sfd = openPeerMemfd(pid, fd, total, what);
  void* base = mapOrThrow(sfd, bytes, offset, pid, fd, what);
  ::close(sfd);  // the mapping keeps the memory
  return SharedMapping{-1, base, bytes};
}

void closeSharedMapping(const SharedMapping& m) {
  if (m.base != nullptr) munmap(m.base, m.bytes);
  if (m.fd >= 0) ::close(m.fd);
}

}  // namespace xccl
