// libxdev's own reporting, as a device runtime has its own (libxccl's logger is not linked
// here: one process, one logging state per library that owns it). Lines go to stderr as
// "host:pid xdev WARN|INFO <message>"; XCCL_DEBUG sets the level, read once, as libxccl reads
// it (NONE, WARN (default), INFO, TRACE). XCCL_DEBUG_FILE and XCCL_DEBUG_SUBSYS are libxccl's.
#pragma once

#include <string>

namespace xdev {

bool reportInfoEnabled();
void reportWarn(const std::string& msg);
void reportInfo(const std::string& msg);  // printed only when reportInfoEnabled()

}  // namespace xdev
