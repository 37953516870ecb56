// FlightDump.cpp — the flight recorder's dump itself: where the file goes and how it is
// written (atomically). Its JSON is in FlightJson.cpp, what triggers it in FlightTriggers.cpp.
#include "FlightDump.hpp"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include <c10/util/Exception.h>

#include "FlightJson.hpp"
#include "FlightRecorder.hpp"

namespace torch_xccl {
namespace flight {

namespace {

std::string fileName(const Identity& id) {
  if (id.rank >= 0) return "rank_" + std::to_string(id.rank) + ".json";
  return "pid_" + std::to_string(static_cast<long long>(getpid())) + ".json";
}

void makeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      TORCH_CHECK(false, "xccl flight recorder: cannot create directory '", part,
                  "': ", std::strerror(errno));
    }
  }
}

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string traceDir() {
  const char* dir = std::getenv("TORCH_XCCL_TRACE_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  std::string job = "default";
  for (const char* name : {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0' && std::string(v) != "none") {
      job = v;
      break;
    }
  }
  return "/tmp/xccl_trace/" + job;
}

}  // namespace

std::string defaultPath() {
  return traceDir() + "/" + fileName(identity(FlightRecorder::get().groups()));
}

std::string dump(const std::string& path, const std::string& reason) {
  std::string target = path.empty() ? defaultPath() : path;
  if (!path.empty() && (isDirectory(path) || path.back() == '/')) {
    target =
        path + (path.back() == '/' ? "" : "/") + fileName(identity(FlightRecorder::get().groups()));
  }
  const size_t slash = target.rfind('/');
  if (slash != std::string::npos && slash > 0) makeDirs(target.substr(0, slash));
  const std::string text = json(reason);
  const std::string tmp = target + ".tmp" + std::to_string(static_cast<long long>(getpid()));
  {
    std::ofstream f(tmp, std::ios::trunc);
    TORCH_CHECK(f.good(), "xccl flight recorder: cannot write '", tmp, "': ", std::strerror(errno));
    f << text;
    f.close();
    TORCH_CHECK(!f.fail(), "xccl flight recorder: writing '", tmp, "' failed");
  }
  TORCH_CHECK(::rename(tmp.c_str(), target.c_str()) == 0, "xccl flight recorder: cannot rename '",
              tmp, "' to '", target, "': ", std::strerror(errno));
  return target;
}

}  // namespace flight
}  // namespace torch_xccl
