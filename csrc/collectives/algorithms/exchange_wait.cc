// The progress engine's wait: passes over every posted message, the adaptive spin, sleeping
// on the doorbell, the periodic liveness and deadline checks, and leaving the engine empty
// when an operation fails (after telling the peers why).
#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "exchange.h"
#include "exchange_msg.h"

namespace xccl {

bool Exchange::posted(int peer) const {
  return !sends_[peer].empty() || !recvs_[peer].empty() || (recvAny_ && recvs_[peer].empty());
}

bool Exchange::progressAll(bool* busy) {
  bool progressed = progressRecvAny();
  *busy = pending_ > 0;
  forEachActive([&](int p) {
    Connection* c = conns_[p];
    if (!posted(p)) {
      if (!mayHoldBytes_[p]) return;
      mayHoldBytes_[p] = c->sendPending();
      if (!mayHoldBytes_[p]) return;
    }
    *busy = true;
    progressed |= c->progress();
    progressed |= progressSend(p);
    progressed |= progressRecv(p);
  });
  return progressed;
}

bool Exchange::holdsBytes() {
  bool holds = false;
  forEachActive([&](int p) {
    if (holds || !mayHoldBytes_[p]) return;
    mayHoldBytes_[p] = conns_[p]->sendPending();
    holds = mayHoldBytes_[p] != 0;
  });
  return holds;
}

bool Exchange::sleepOnDoorbell(int64_t timeoutUs) {
  if (bell_ == nullptr) return false;
  bool allRing = true;
  forEachActive([&](int p) {
    if (posted(p) && !conns_[p]->ringsDoorbell()) allRing = false;  // a TCP peer would not wake us
  });
  if (!allRing) return false;
  const uint32_t seen = bell_->prepare();
  bool busy = false;
  if (progressAll(&busy) || !busy) {  // moved after all (or done): no sleep
    bell_->cancel();
    return false;
  }
  bell_->sleep(seen, timeoutUs);
  return true;
}

void Exchange::wait(const std::function<bool()>& more) {
  Backoff backoff(yieldWhenIdle_);
  auto lastCheck = Clock::now();
  const auto checkEvery = aliveCheck_;
  Clock::time_point idleSince{};
  bool spinning = false;  // idle, and still within this wait's spin time
  try {
    for (;;) {
      bool busy = false;
      bool progressed = progressAll(&busy);
      if (more && (progressed || !busy || backoff.count() % 64 == 63) && more()) {
        progressed = busy = true;  // more was posted
      }
      if (!busy) break;  // every message done and every byte handed to the wire
      if (progressed) {
        // The spin ended the idle stretch: next time spin a little longer.
        if (spinning) spinUs_ = std::min(spinMaxUs_, spinUs_ + spinUs_ / 4 + 1);
        spinning = false;
        backoff.reset();
        continue;
      }
      if (!spinning && backoff.count() == 0) {
        spinning = true;
        idleSince = Clock::now();
      }
      backoff.idle();
      if (abort_.load(std::memory_order_relaxed)) {
        throw InvalidUsage(
            strCat("rank ", rank_, ": communicator aborted during ", collName(sig_.type)));
      }
      // Reading the clock costs more than a poll of the rings: only every 64 idle polls
      // (and after every nap, which is long anyway).
      if (backoff.count() % 64 != 0 && !backoff.napping()) continue;
      auto now = Clock::now();
      if (spinning && now - idleSince >= std::chrono::microseconds(spinUs_)) {
        // Spun out without progress: sleep on the doorbell (where every peer waited on
        // rings it), and spin less next time.
        const int64_t untilCheck =
            std::chrono::duration_cast<std::chrono::microseconds>(checkEvery - (now - lastCheck))
                .count();
        if (sleepOnDoorbell(std::max<int64_t>(untilCheck, 50))) {
          spinUs_ -= spinUs_ / 4 + (spinUs_ > 0);
          spinning = false;
          backoff.reset();
          now = Clock::now();
        }
      }
      if (now - lastCheck >= checkEvery) {
        lastCheck = now;
        checkPeers();
        if (deadline_.expired()) failTimeout();
      }
    }
  } catch (const std::exception& e) {
    abandon(e.what());
    throw;
  }
}

void Exchange::abandon(const std::string& why) {
  // Tell the peers why (best effort), then leave the engine empty: the communicator is
  // failed and will not reuse this state. Peers waiting on our slots read it there.
  markSlotsFailed(why);
  sendAbortFrames(why);
  for (auto& q : sends_) q.clear();
  for (auto& q : recvs_) q.clear();
  recvAny_.reset();
  pending_ = 0;
}

}  // namespace xccl
