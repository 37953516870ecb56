// A communicator's point-to-point operations (comm.h): the taking of queued sends and
// receives into one engine pass (executeP2P) and their posting, self-sends as copies.
#include "collectives/algorithms/algorithm.h"
#include "collectives/device/device.h"
#include "comm.h"
#include "common/error.h"
#include "common/log.h"

namespace xccl {

namespace {

bool hasRecvAny(const OpEntry& op) {
  for (const CollArgs& a : op.p2p) {
    if (a.type == CollType::kRecvAny) return true;
  }
  return false;
}

}  // namespace

// Separate point-to-point calls (torch's isend then irecv) share the engine: while the
// first waits, the point-to-point ops queued behind it are posted too, so a send that
// cannot leave before its peer receives never holds back this rank's own receive. One op
// at a time, a ring of isend + irecv larger than the transports' buffers deadlocked until
// the timeout (the fault suite found it); Gloo and MPI run such rings. Ops still complete
// in order, each as soon as it and every earlier one are done (its messages complete and no
// byte left in this process), and the deadline is the oldest running op's. A collective, an
// op its caller runs, or a second recv-any (one may be posted at a time) ends the taking; a
// failure fails every op taken.
void Comm::executeP2P(OpEntry& first) {
  struct Taken {
    OpEntry op;
    int left = 0;  // its messages not yet complete
    Deadline deadline;
  };
  std::deque<Taken> run;  // references stay valid across push_back / pop_front
  bool taking = true;
  uint64_t seen = first.id;  // the last id looked at
  auto take = [&](OpEntry& op) {
    run.push_back(Taken{std::move(op), 0, Deadline::after(timeoutMs_)});
    device_->streamWait(run.back().op.streamToken, abort_);
    exchange_->countMessagesIn(&run.back().left);
    postP2POp(run.back().op);
    exchange_->countMessagesIn(nullptr);
  };
  auto publishDone = [&] {
    // Done: every message complete and every byte out of this process (wait()'s rule).
    while (!run.empty() && run.front().left == 0 && !exchange_->holdsBytes()) {
      finish(run.front().op, false);
      run.pop_front();
      if (!run.empty()) exchange_->setDeadline(run.front().deadline);
    }
  };
  auto more = [&]() -> bool {
    publishDone();
    if (!taking || enqueued_.load(std::memory_order_acquire) == seen) return false;
    bool took = false;
    std::unique_lock<std::mutex> lock(mu_);
    seen = enqueued_.load();
    while (taking && !queue_.empty()) {
      OpEntry& next = queue_.front();
      if (!next.colls.empty() || next.p2p.empty() || next.onCaller || hasRecvAny(next)) {
        taking = false;
        break;
      }
      OpEntry op = std::move(next);
      queue_.pop_front();
      lock.unlock();
      take(op);
      took = true;
      lock.lock();
    }
    return took;
  };

  p2pRun_.store(true, std::memory_order_release);
  if (asyncError_.load() == xcclSuccess) {
    guarded([&] {
      exchange_->beginOp(signatureOf(first.p2p.front()), 0, Deadline::after(timeoutMs_));
      take(first);
      do {
        exchange_->wait(more);
        publishDone();
      } while (more());
    });
  } else {
    run.push_back(Taken{std::move(first), 0, Deadline{}});
  }
  p2pRun_.store(false, std::memory_order_release);
  exchange_->countMessagesIn(nullptr);
  // Ops left after a failure are published failed (query() compares with failedFrom_).
  for (Taken& t : run) finish(t.op, false);
  endTurn();
}

namespace {

void postP2P(Exchange& ex, const CollArgs& a) {
  size_t bytes = a.count * dtypeSize(a.dtype);
  switch (a.type) {
    case CollType::kSend:
      ex.send(a.root, a.sendbuf, bytes);
      break;
    case CollType::kRecv:
      ex.recv(a.root, a.recvbuf, bytes);
      break;
    case CollType::kRecvAny:
      ex.recvAny(a.recvbuf, bytes, a.anyPeerOut);
      break;
    default:
      XCCL_CHECK(false, "not a point-to-point op: ", collName(a.type));
  }
}

}  // namespace

void Comm::postP2POp(const OpEntry& op) {
  std::vector<const CollArgs*> selfSends, selfRecvs;  // paired in order (checked at GroupEnd)
  for (const CollArgs& args : op.p2p) {
    if (args.root == rank_ && args.type != CollType::kRecvAny) {
      (args.type == CollType::kSend ? selfSends : selfRecvs).push_back(&args);
    } else {
      exchange_->setSignature(signatureOf(args));
      postP2P(*exchange_, args);
    }
  }
  for (size_t i = 0; i < selfSends.size(); ++i) {
    engine_->copy(selfRecvs[i]->recvbuf, selfSends[i]->sendbuf,
                  selfSends[i]->count * dtypeSize(selfSends[i]->dtype), CopyKind::kDeviceToDevice);
  }
}

}  // namespace xccl
