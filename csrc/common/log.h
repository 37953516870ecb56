// Logging: XCCL_DEBUG=WARN|INFO|TRACE (default: WARN), XCCL_DEBUG_SUBSYS=INIT,COLL,SHM,NET,TOPO,
// BOOT,ALL (default: ALL), XCCL_DEBUG_FILE=path (%h = host, %p = pid; default stderr).
//
//   XCCL_INFO(INIT, "rank ", r, " -> ", p, " via SHM");
//
// Lines look like "host:pid:tid [rank] XCCL INFO <message>", one per call.
#pragma once

#include "error.h"

namespace xccl {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };
enum LogSubsys : unsigned {
  INIT = 1u << 0,
  COLL = 1u << 1,
  SHM = 1u << 2,
  NET = 1u << 3,
  TOPO = 1u << 4,
  BOOT = 1u << 5,
  ALLSUBSYS = ~0u,
};

bool logEnabled(LogLevel level, unsigned subsys);
void logWrite(LogLevel level, unsigned subsys, const std::string& msg);
// Rank shown in every log line of this thread (-1 = unknown).
void setLogRank(int rank);

}  // namespace xccl

#define XCCL_LOG_(level, subsys, ...)                                       \
  do {                                                                      \
    if (::xccl::logEnabled(level, ::xccl::subsys)) {                        \
      ::xccl::logWrite(level, ::xccl::subsys, ::xccl::strCat(__VA_ARGS__)); \
    }                                                                       \
  } while (0)

#define XCCL_WARN(subsys, ...) XCCL_LOG_(::xccl::LogLevel::kWarn, subsys, __VA_ARGS__)
#define XCCL_INFO(subsys, ...) XCCL_LOG_(::xccl::LogLevel::kInfo, subsys, __VA_ARGS__)
#define XCCL_TRACE(subsys, ...) XCCL_LOG_(::xccl::LogLevel::kTrace, subsys, __VA_ARGS__)
