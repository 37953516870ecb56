// Rendezvous.hpp — the part of the c10d store a backend instance writes to. torch hands each
// group a prefix store whose prefix ("default_pg/0/cpu/" and the like) repeats for every
// initialisation: after destroy_process_group() + init_process_group(), and in every attempt
// of a job torchrun restarts (its store outlives the workers). So the backend puts all its
// keys (libxccl's rendezvous, monitored barriers, the desync report, the flight recorder's)
// under a scope of its own:
//
//   xccl.<attempt>.g<generation>/
//
// <attempt> is "<TORCHELASTIC_RUN_ID>.r<TORCHELASTIC_RESTART_COUNT>" under torchrun, else
// "local"; <generation> counts the initialisations of this group (and size) in this attempt:
// every rank adds 1 to "xccl.inits/<attempt>/n<size>" and takes (value - 1) / size. All
// ranks of an initialisation add before any of them finishes it (libxccl's rendezvous needs
// every rank's records), so the ranks of one initialisation always get the same generation
// and the next one a new one.
#pragma once

#include <cstdint>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace torch_xccl {

// "<run id>.r<restart count>" when torchrun (torchelastic) set either variable, else "local".
std::string attemptId();

// `store` seen through a PrefixStore of this initialisation's scope; *scope receives the
// scope ("xccl.local.g3"). The one store call (add) is bounded by `callTimeoutMs`.
c10::intrusive_ptr<c10d::Store> scopeToInitialisation(const c10::intrusive_ptr<c10d::Store>& store,
                                                      int size, int64_t callTimeoutMs,
                                                      std::string* scope);

}  // namespace torch_xccl
