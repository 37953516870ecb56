// Windows and one-sided put/signal (windows.h).
#include "windows.h"

#include <sched.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

#include "api_edge.h"
#include "collectives/device/device.h"
#include "common/clock.h"
#include "common/process.h"

namespace xccl {

namespace {

constexpr uint32_t kRecordMagic = 0x4e495758;  // "XWIN"

// What each rank tells the others when a window is registered (an allgather).
struct WindowRecord {
  uint32_t magic = kRecordMagic;
  uint32_t ok = 0;  // 1: the window (and the pad) are memory this host's peers can map
  uint64_t bytes = 0;
  PeerRef window{};
  PeerRef pad{};
};

uint64_t loadAcquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

// In order with the caller's program: every operation enqueued on `c` before is done.
void drain(Comm& c) {
  const xcclResult_t r = c.wait(c.lastEnqueued(), -1);
  if (r != xcclSuccess) throw Error(toKind(r), c.lastError());
}

// One collective of the windows' own, on host memory, on the calling thread, after the
// operations enqueued before it (on any communicator: no stream is involved).
void runOnCaller(Comm& c, CollType type, void* send, void* recv, size_t bytes) {
  CollArgs a;
  a.type = type;
  a.sendbuf = send;
  a.recvbuf = recv;
  a.count = bytes;
  a.dtype = xcclUint8;
  OpEntry op;
  op.colls.push_back(std::move(a));
  const uint64_t id = c.runHere(op);
  const xcclResult_t r = c.query(id);
  if (r != xcclSuccess) throw Error(toKind(r), c.lastError());
}

}  // namespace

Windows::~Windows() {
  // Mappings of peers' memory belong to the device (kept for reuse); our pad is ours.
  if (pad_ != nullptr) comm_.device().freePeerable(pad_);
}

void Windows::exchange(void* mine, size_t bytes, void* all) {
  runOnCaller(comm_, CollType::kAllGather, mine, all, bytes);
}

Window* Windows::registerWindow(void* buff, size_t bytes) {
  Device& dev = comm_.device();
  const int n = comm_.nranks(), me = comm_.rank();
  XCCL_CHECK_ARG(bytes > 0, "window of 0 bytes");
  std::lock_guard<std::mutex> g(mu_);
  WindowRecord rec;
  rec.bytes = bytes;
  if (pad_ == nullptr) {
    const size_t padBytes = sizeof(uint64_t) * kWindowSignals * static_cast<size_t>(n);
    pad_ = static_cast<uint64_t*>(dev.allocPeerable(padBytes));
    std::memset(pad_, 0, padBytes);  // hostAddressable(): windowsOf refuses other devices
    consumed_.assign(static_cast<size_t>(kWindowSignals) * n, 0);
  }
  rec.ok = dev.exportBuffer(buff, bytes, &rec.window) &&
           dev.exportBuffer(pad_, sizeof(uint64_t) * kWindowSignals * n, &rec.pad);
  std::vector<WindowRecord> all(n);
  exchange(&rec, sizeof(rec), all.data());  // every rank takes part, even one that will fail
  for (int p = 0; p < n; ++p) {
    if (all[p].magic != kRecordMagic) {
      throw RemoteError(strCat("rank ", me, ": rank ", p, " sent no window record"));
    }
    if (!all[p].ok) {
      throw InvalidArgument(strCat(
          "rank ", me, ": rank ", p, "'s window is not memory that device ", dev.name(),
          " can share with the other processes of its host (allocate it with xcclMemAlloc)"));
    }
    if (all[p].bytes != bytes) {
      throw InvalidArgument(strCat("rank ", me, ": windows differ in size: ", bytes,
                                   " bytes here, ", all[p].bytes, " on rank ", p,
                                   " (every rank registers the same size)"));
    }
  }
  auto win = std::make_unique<Window>();
  win->comm = &comm_;
  win->base = static_cast<char*>(buff);
  win->bytes = bytes;
  win->peerBase.assign(n, nullptr);
  if (peerPads_.empty()) peerPads_.assign(n, nullptr);
  const std::vector<PeerInfo>& peers = comm_.peers();
  std::exception_ptr failed;
  try {
    for (int p = 0; p < n; ++p) {
      if (p == me) {
        win->peerBase[p] = win->base;
        peerPads_[p] = pad_;
        continue;
      }
      if (peers[p].hostId != peers[me].hostId) continue;  // another host: no mapping
      win->peerBase[p] = const_cast<char*>(
          static_cast<const char*>(dev.importBuffer(all[p].window, peers[p].pid, bytes)));
      if (peerPads_[p] == nullptr) {
        peerPads_[p] = reinterpret_cast<uint64_t*>(const_cast<void*>(
            dev.importBuffer(all[p].pad, peers[p].pid, sizeof(uint64_t) * kWindowSignals * n)));
      }
    }
  } catch (const Error&) {
    failed = std::current_exception();
  }
  // No rank returns before every rank has mapped what it needs (or said it could not): an
  // owner may then free its window or exit once registration returned, and a failure
  // anywhere fails the registration everywhere. Every rank takes part, failed or not.
  uint8_t mapped = failed ? 0 : 1;
  std::vector<uint8_t> everyone(n);
  exchange(&mapped, 1, everyone.data());
  if (failed) std::rethrow_exception(failed);
  for (int p = 0; p < n; ++p) {
    if (!everyone[p]) {
      throw RemoteError(strCat("rank ", me, ": rank ", p,
                               " could not map the windows of its host's ranks (its own error "
                               "says why); the window is not registered"));
    }
  }
  windows_.push_back(std::move(win));
  XCCL_INFO(INIT, "rank ", me, ": window of ", bytes, " bytes registered");
  return windows_.back().get();
}

Window* Windows::owned(Window* win, const char* what) {
  for (auto& w : windows_) {
    if (w.get() == win) return win;
  }
  throw InvalidArgument(strCat("rank ", comm_.rank(), ": ", what, ": window ", win,
                               " is not registered with this communicator (or was "
                               "deregistered already)"));
}

void Windows::deregisterWindow(Window* win) {
  {
    std::lock_guard<std::mutex> g(mu_);
    owned(win, "xcclCommWindowDeregister");
  }
  // Every rank's puts into it are done once every rank got here.
  runOnCaller(comm_, CollType::kBarrier, nullptr, nullptr, 0);
  std::lock_guard<std::mutex> g(mu_);
  for (auto it = windows_.begin(); it != windows_.end(); ++it) {
    if (it->get() == win) {
      windows_.erase(it);
      return;
    }
  }
}

void Windows::checkPeer(int peer, int sigIdx, const char* what) const {
  const int n = comm_.nranks(), me = comm_.rank();
  XCCL_CHECK_ARG(peer >= 0 && peer < n, "rank ", me, ": ", what, ": peer ", peer,
                 " is not a rank of this communicator (", n, " ranks)");
  XCCL_CHECK_ARG(sigIdx >= 0 && sigIdx < kWindowSignals, "rank ", me, ": ", what, ": sigIdx ",
                 sigIdx, " out of [0, ", kWindowSignals, ")");
  if (peerPads_.empty()) {
    throw InvalidUsage(strCat("rank ", me, ": ", what,
                              ": no window registered yet (signals live with the windows)"));
  }
  if (peerPads_[peer] == nullptr) {
    throw InvalidUsage(strCat("rank ", me, ": ", what, ": rank ", peer,
                              " is on another host: windows and signals reach the ranks of "
                              "this host only (docs/MEMORY.md)"));
  }
}

uint64_t* Windows::peerCounter(int peer, int sigIdx) const {
  return peerPads_[peer] + static_cast<size_t>(comm_.rank()) * kWindowSignals + sigIdx;
}

void Windows::inOrder(xcclStream_t stream, std::function<void()> action) {
  if (!comm_.device().streamOrdered()) {
    drain(comm_);  // in order with the operations enqueued before it
    action();
    return;
  }
  OpEntry op;
  op.stream = stream;
  op.oneSided = std::move(action);
  comm_.enqueue(std::move(op));
}

void Windows::putSignal(const void* src, size_t bytes, int peer, Window* win, size_t offset,
                        int sigIdx, xcclStream_t stream) {
  char* dst = nullptr;
  uint64_t* counter = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    owned(win, "xcclPutSignal");
    checkPeer(peer, sigIdx, "xcclPutSignal");
    const int me = comm_.rank();
    if (offset > win->bytes || bytes > win->bytes - offset) {
      throw InvalidArgument(strCat("rank ", me, ": xcclPutSignal: [", offset, ", +", bytes,
                                   ") lies outside rank ", peer, "'s window of ", win->bytes,
                                   " bytes"));
    }
    XCCL_CHECK_ARG(bytes == 0 || src != nullptr, "rank ", me, ": xcclPutSignal: localbuff is NULL");
    dst = win->peerBase[peer] + offset;
    counter = peerCounter(peer, sigIdx);
  }
  // A window stays mapped until its deregistration, which every rank's earlier puts precede.
  Device* dev = &comm_.device();
  inOrder(stream, [dev, dst, src, bytes, counter] {
    if (bytes > 0) dev->copy(dst, src, bytes, CopyKind::kDeviceToDevice);
    __atomic_fetch_add(counter, 1, __ATOMIC_RELEASE);
  });
}

void Windows::signal(int peer, int sigIdx, xcclStream_t stream) {
  uint64_t* counter = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    checkPeer(peer, sigIdx, "xcclSignal");
    counter = peerCounter(peer, sigIdx);
  }
  inOrder(stream, [counter] { __atomic_fetch_add(counter, 1, __ATOMIC_RELEASE); });
}

void Windows::awaitCounter(const uint64_t* counter, uint64_t want, int peer, int sigIdx,
                           int opCnt) {
  const int me = comm_.rank();
  const int pid = comm_.peers()[peer].pid;
  const Deadline deadline = Deadline::after(comm_.timeoutMs());
  auto nextCheck = Clock::now();
  for (int spins = 0; loadAcquire(counter) < want; ++spins) {
    if (spins < 256) continue;
    if (Clock::now() >= nextCheck) {
      nextCheck = Clock::now() + std::chrono::milliseconds(50);
      const uint64_t got = loadAcquire(counter);
      if (got >= want) break;
      if (peer != me && processDead(pid)) {
        throw RemoteError(strCat("rank ", me, ": rank ", peer, " (pid ", pid,
                                 ") exited while this rank waits for its signal ", sigIdx, " (",
                                 got - (want - opCnt), " of ", opCnt, " arrived)"));
      }
      if (comm_.asyncError() != xcclSuccess) {
        throw Error(toKind(comm_.asyncError()), comm_.lastError());
      }
      if (deadline.expired()) {
        throw Timeout(strCat("rank ", me, ": xcclWaitSignal: ", got - (want - opCnt), " of ", opCnt,
                             " signals ", sigIdx, " from rank ", peer, " arrived in ",
                             comm_.timeoutMs(), " ms"));
      }
    }
    if (spins < 1024) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void Windows::waitSignal(int peer, int sigIdx, int opCnt, xcclStream_t stream) {
  const int me = comm_.rank();
  const uint64_t* counter = nullptr;
  uint64_t want = 0;
  const size_t slot = static_cast<size_t>(peer) * kWindowSignals + sigIdx;
  {
    std::lock_guard<std::mutex> g(mu_);
    checkPeer(peer, sigIdx, "xcclWaitSignal");
    XCCL_CHECK_ARG(opCnt >= 0, "rank ", me, ": xcclWaitSignal: opCnt ", opCnt, " < 0");
    counter = pad_ + slot;
    want = consumed_[slot] + opCnt;
    // On a stream the wait is queued: the next one counts from this one's target (if this one
    // fails, so does the communicator). On the caller only a wait that ends consumes.
    if (comm_.device().streamOrdered()) consumed_[slot] = want;
  }
  if (comm_.device().streamOrdered()) {
    inOrder(stream, [this, counter, want, peer, sigIdx, opCnt] {
      awaitCounter(counter, want, peer, sigIdx, opCnt);
    });
    return;
  }
  drain(comm_);
  awaitCounter(counter, want, peer, sigIdx, opCnt);
  std::lock_guard<std::mutex> g(mu_);
  consumed_[slot] = want;
}

}  // namespace xccl

namespace xccl {

Windows& Comm::windows() {
  std::lock_guard<std::mutex> g(windowsMu_);
  if (!windows_) windows_ = std::make_unique<Windows>(*this);
  return *windows_;
}

}  // namespace xccl
