// What /proc says about another process of this pid namespace: its state, whether it is
// gone, and when it started (which tells a pid that was reused apart from the process that
// first had it).
#pragma once

#include <cstdint>

namespace xccl {

// The state letter of process `pid` in /proc/<pid>/stat (R, S, D, T stopped, t traced, Z
// zombie, X dead), or 'X' when it is gone.
char processState(int pid);
// True when some thread of process `pid` is running or waiting for a core (state R in
// /proc/<pid>/task/*/stat): the process is alive and merely not scheduled yet.
bool processHasRunnableThread(int pid);
// True when process `pid` is gone or a zombie (killed, not yet reaped).
bool processDead(int pid);
// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot; -1 when
// the process is gone or the file cannot be read. Two processes that had the same pid one
// after the other have different start times.
int64_t processStartTime(int pid);
// True unless `pid` is alive (not a zombie) and started at `startTime`: the process a record
// names has exited, or its pid now belongs to another process.
bool processGone(int pid, int64_t startTime);

// CPUs this process may run on (its affinity mask; at least 1).
int usableCores();

}  // namespace xccl
