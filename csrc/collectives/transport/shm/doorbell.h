// Doorbells: how a rank waiting on shared-memory peers sleeps instead of spinning.
//
// Each rank (per communicator) owns one doorbell: a futex word `seq` and a count of
// `sleepers` on a page of its own memfd, which its peers on the host map. A peer that
// publishes bytes into a ring towards us, or frees room in a ring from us, rings our bell;
// ringing costs a fence and one load unless we are asleep, and then one FUTEX_WAKE.
//
//   waiting rank (owner)                    peer (after moving ring counters)
//   --------------------                    ---------------------------------
//   seen = prepare()   sleepers++           store head/tail (release)
//   one more progress pass; moved? cancel() fence (seq_cst)
//   sleep(seen, timeout): FUTEX_WAIT        sleepers > 0 ? seq++, FUTEX_WAKE : nothing
//     returns at a ring, a timeout, or at once if seq changed since prepare()
//
// The fences make the two sides agree: either the waiter's last progress pass sees the
// peer's counter, or the peer sees the sleeper and wakes it. So no wake-up is lost, and a
// sleeper also wakes at its timeout (the engine's liveness and deadline checks).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/shared_memory.h"

namespace xccl {
namespace shm {

struct BellPage;

class Doorbell {
 public:
  // This rank's own bell, in a fresh memfd page.
  static std::unique_ptr<Doorbell> create();
  // A peer's bell from its describe() string ("<pid> <fd>"); throws RemoteError when
  // malformed, IoError when it cannot be mapped.
  static std::unique_ptr<Doorbell> open(const std::string& desc, int rank, int peer);
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  std::string describe() const;

  // Owner: announce a sleep; returns the sequence to sleep on.
  uint32_t prepare();
  // Owner: withdraw the announcement (the last progress pass moved something).
  void cancel();
  // Owner: sleep until rung or timeoutUs passed (at once if rung since prepare()); then
  // withdraw the announcement.
  void sleep(uint32_t seen, int64_t timeoutUs);
  // Anyone: wake the owner if it sleeps (a peer after moving bytes; a local abort).
  void ring();

 private:
  explicit Doorbell(SharedMapping m) : map_(m) {}
  BellPage* page() const;
  SharedMapping map_;
};

}  // namespace shm
}  // namespace xccl
