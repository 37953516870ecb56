#include "process.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace xccl {

namespace {

// The fields of /proc/<pid>/stat after the command name (which may contain spaces and
// parentheses), starting with the state (field 3); "" when the process is gone.
std::string statAfterName(int pid, const std::string& file = "stat") {
  std::ifstream f("/proc/" + std::to_string(pid) + "/" + file);
  std::string stat;
  if (!std::getline(f, stat)) return "";
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return "";
  return stat.substr(paren + 2);
}

}  // namespace

char processState(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return 'X';
  std::string rest = statAfterName(pid);
  return rest.empty() ? 'X' : rest[0];
}

bool processHasRunnableThread(int pid) {
  DIR* dir = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (dir == nullptr) return false;
  bool runnable = false;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string rest = statAfterName(pid, std::string("task/") + e->d_name + "/stat");
    if (!rest.empty() && rest[0] == 'R') {
      runnable = true;
      break;
    }
  }
  ::closedir(dir);
  return runnable;
}

bool processDead(int pid) {
  char state = processState(pid);
  return state == 'Z' || state == 'X';
}

int64_t processStartTime(int pid) {
  if (pid <= 0) return -1;
  std::istringstream in(statAfterName(pid));
  std::string field;
  // The state is field 3, so the start time (field 22) is the 20th from here.
  for (int i = 3; i <= 22; ++i) {
    if (!(in >> field)) return -1;
  }
  char* end = nullptr;
  long long v = std::strtoll(field.c_str(), &end, 10);
  return end != nullptr && *end == '\0' && v >= 0 ? static_cast<int64_t>(v) : -1;
}

bool processGone(int pid, int64_t startTime) {
  if (pid <= 0 || processDead(pid)) return true;
  int64_t now = processStartTime(pid);
  return now < 0 || now != startTime;
}

int usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace xccl
