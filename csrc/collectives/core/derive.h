// Communicators made from communicators: split by colour, shrink to the survivors, grow by new
// processes, and the liveness probe that tells a caller whom to exclude.
//
// None of them uses the store the parent was made with. Every process runs one bootstrap
// service (bootstrap.h, processService) whose address the parent's members exchanged at
// creation (PeerInfo::service); a child's members rendezvous on the service of the child's
// lowest member (its rank 0), under a key scope that only the parent's members can name
// (the parent's record scope, the derivation's number and, for a shrink, the excluded
// ranks), then connect to each other as at creation. So a shrink works when the parent is
// failed (a dead, stopped or cut-off peer), when the rank that hosted the original store is
// the one lost, and without the caller's store at all.
//
// The parent's connections are not reused: a failed parent has closed them (comm.h: the
// first failure closes every connection so that peers fail fast), and a healthy parent's
// connections belong to its progress engine, which keeps running beside the child's.
#pragma once

#include <memory>
#include <vector>

#include "comm.h"

namespace xccl {

// xcclCommSplit: the members of `parent` that pass the same colour form a child, ranked by
// (key, parent rank). Collective over the parent (every member calls it, in the same order
// as its other splits and shrinks); color < 0 (XCCL_SPLIT_NOCOLOR): takes part, returns null.
// config null: the parent's configuration.
std::unique_ptr<Comm> splitComm(Comm& parent, int color, int key, const xcclConfig_t* config);

// xcclCommShrink: the members of `parent` not in `exclude` form a child, in parent-rank
// order. Called by those members only, each with the same list (checked: a member that
// passes another list never meets the others, and says so at the deadline). abortParent
// (XCCL_SHRINK_ABORT): the parent's pending operations fail at once; otherwise they are
// waited for, up to the parent's timeout.
std::unique_ptr<Comm> shrinkComm(Comm& parent, const std::vector<int>& exclude, bool abortParent,
                                 const xcclConfig_t* config);

// xcclCommGrow (xccl.h). parent non-null: an existing member, keeping its rank; `id` null:
// read from the parent's rank 0, where the member that made it published it. parent null: a
// joining process with rank `rank`. All meet on the id's service under the scope of the id's
// secret, then connect as at creation. Arguments are checked here (InvalidArgument).
std::unique_ptr<Comm> growComm(Comm* parent, int nranks, const xcclUniqueId* id, int rank,
                               const xcclConfig_t* config);

// xcclCommProbeAlive: for every rank of `parent`, whether its process answers on its bootstrap
// service within timeoutMs (this rank: always). A killed process is found at once (its port
// refuses); a stopped or unreachable one when the time runs out. Works on a failed or
// revoked communicator.
std::vector<bool> probeAlive(Comm& parent, int64_t timeoutMs);

}  // namespace xccl
