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

SharedMapping openSharedMapping(long pid, long fd, size_t bytes, const std::string& what) {
  std::string path = strCat("/proc/", pid, "/fd/", fd);
  int sfd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (sfd < 0) {
    throw IoError(strCat("cannot open ", what, " ", path, ": ", errnoString(errno),
                         " (set XCCL_SHM_DISABLE=1 to use TCP)"));
  }
  struct stat st {};
  if (fstat(sfd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    ::close(sfd);
    throw RemoteError(strCat(what, " ", path, " has the wrong size"));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    ::close(sfd);
    throw IoError(strCat("mmap of ", what, " ", path, " failed: ", errnoString(err)));
  }
  return SharedMapping{sfd, base, bytes};
}

SharedMapping openSharedRange(long pid, long fd, size_t total, size_t offset, size_t bytes,
                              const std::string& what) {
  std::string path = strCat("/proc/", pid, "/fd/", fd);
  int sfd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (sfd < 0) {
    throw IoError(strCat("cannot open ", what, " ", path, ": ", errnoString(errno),
                         " (set XCCL_SHM_DISABLE=1 to use TCP)"));
  }
  struct stat st {};
  if (fstat(sfd, &st) != 0 || static_cast<size_t>(st.st_size) != total || offset + bytes > total) {
    ::close(sfd);
    throw RemoteError(strCat(what, " ", path, " has the wrong size"));
  }
  void* base =
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, static_cast<off_t>(offset));
  const int err = errno;
  ::close(sfd);
  if (base == MAP_FAILED) {
    throw IoError(strCat("mmap of ", what, " ", path, " failed: ", errnoString(err)));
  }
  return SharedMapping{-1, base, bytes};
}

void closeSharedMapping(const SharedMapping& m) {
  if (m.base != nullptr) munmap(m.base, m.bytes);
  if (m.fd >= 0) ::close(m.fd);
}

}  // namespace xccl
