// "slot": allreduces of up to XCCL_SLOT_MAX bytes between the processes of one host, in host
// memory, without a message (slot.h).
//
// Each rank owns a slot in memory the host's processes map (Device::allocPeerable): a control
// line, then two halves used in turn, each a 64-byte header and room for XCCL_SLOT_MAX bytes.
// To reduce, a rank copies its input into its half for this call, writes the call's signature
// in the header and raises the header's sequence word (a release store). It then folds the n
// inputs in rank order, ((in0 op in1) op in2) ..., reading each peer's half straight from the
// peer's slot once that peer's word shows this call (an acquire load), into its output. One
// copy in and one fold out; no frame, ring step or thread hand-off. The fold is the rank-order
// left fold, so the algorithm serves XCCL_REPRODUCIBLE=1 too.
//
// Reuse: a rank writes a half again two slot calls later, after it has read every peer's word
// for the call in between, which each peer raised only after its fold of this half was done.
//
// Checks: a peer whose half shows another call (collective, type, op, count) fails both ranks
// as a desync. While waiting (spin, then yield and nap: Backoff) a rank looks now and then at
// the abort flag, the operation's deadline, whether the peer's process is alive, and the
// peer's control line, where a rank whose communicator failed says so (markSlotsFailed).
//
// Set-up: the first slot allreduce of a communicator allocates the slot and sends each peer
// a record naming it (through the engine, as that call's messages); each rank maps the peers'
// slots. If any rank cannot share its slot, every rank learns it from the records, runs that
// call with "direct" and never chooses the slot again.
#include "slot.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "algorithm.h"
#include "collectives/device/device.h"
#include "collectives/device/dtype.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "common/process.h"
#include "exchange.h"

namespace xccl {

// The largest allreduce (bytes) the slot path takes, on one host in host memory; 0 = off.
// -1: chosen for the host (slotMaxBytes).
XCCL_PARAM(SlotMax, "SLOT_MAX", -1, -1, 16 << 20)
// 1 = never use shared memory between ranks (transport/connect.cc reads it too).
XCCL_PARAM(ShmDisable, "SHM_DISABLE", 0, 0, 1)

namespace algo {

namespace {

constexpr uint32_t kRecordMagic = 0x544f4c53;  // "SLOT"
constexpr size_t kLine = 64;
constexpr size_t kControl = 256;

struct Control {
  std::atomic<uint64_t> failed;  // 1: this rank's communicator failed, `why` says how
  char why[kControl - sizeof(uint64_t)];
};
static_assert(sizeof(Control) == kControl, "the control block is four lines");

struct alignas(kLine) Header {
  std::atomic<uint64_t> seq;  // the slot call whose input is in this half (0: none yet)
  uint32_t type, dtype, op, pad;
  uint64_t count;
  std::atomic<uint64_t> done;  // "mapped": the call whose slice this rank has written out
};
static_assert(sizeof(Header) == kLine, "a half's header is one line");

struct Record {
  uint32_t magic = kRecordMagic;
  uint32_t ok = 0;  // 1: `ref` names this rank's slot
  int32_t pid = 0;
  uint32_t pad = 0;
  uint64_t maxBytes = 0;
  PeerRef ref{};
};

// What a "mapped" call puts in its half: whether, and where, peers may reach its buffers.
struct MappedRecord {
  uint32_t ok = 0;  // 1: both references name memory peers can map
  uint32_t pad = 0;
  PeerRef send{}, recv{};
};

}  // namespace

struct SlotArea {
  Device* dev = nullptr;
  unsigned char* mine = nullptr;
  size_t maxBytes = 0, halfBytes = 0, total = 0;
  std::vector<const unsigned char*> slots;  // by rank, this rank's own included
  std::vector<int> pids;
  uint64_t calls = 0;
  bool usable = true;
  // "mapped" after a meeting where some rank's buffers could not be mapped: the next
  // `mappedSkip` such calls go straight to the next algorithm, without the meeting; each
  // refusal in a row doubles the skip (up to 64), a mapped call resets it. Every rank sees
  // the same records and the same calls, so every rank skips the same ones.
  uint32_t mappedSkip = 0, mappedBackoff = 0;

  Control* control(int rank) const {
    return reinterpret_cast<Control*>(const_cast<unsigned char*>(slots[rank]));
  }
  Header* header(int rank, uint64_t call) const {
    return reinterpret_cast<Header*>(const_cast<unsigned char*>(slots[rank]) + kControl +
                                     (call & 1) * halfBytes);
  }
  const unsigned char* data(int rank, uint64_t call) const {
    return reinterpret_cast<const unsigned char*>(header(rank, call)) + kLine;
  }
};

void SlotAreaDeleter::operator()(SlotArea* a) const {
  // The peers' slots stay mapped by the device (kept for reuse, like every imported buffer).
  if (a->mine != nullptr) a->dev->freePeerable(a->mine);
  delete a;
}

size_t slotMaxBytes(int localRanks, int cores) {
  const int64_t knob = xcclParamSlotMax();
  if (knob >= 0) return static_cast<size_t>(knob);
  return localRanks > cores ? size_t{64} << 10 : size_t{8} << 10;
}

void markSlotsFailed(SlotArea& area, const std::string& why) {
  if (area.mine == nullptr) return;
  auto* c = reinterpret_cast<Control*>(area.mine);
  uint64_t none = 0;  // 0 -> 2 (writing) -> 1 (said): the first reason stays, whole
  if (!c->failed.compare_exchange_strong(none, 2, std::memory_order_acq_rel)) return;
  const size_t n = std::min(why.size(), sizeof(c->why) - 1);
  std::memcpy(c->why, why.data(), n);
  c->why[n] = '\0';
  c->failed.store(1, std::memory_order_release);
}

namespace {

// Makes this communicator's slots (the first slot call; every rank is in it).
void setUp(Exchange& ex, SlotArea& area) {
  const int n = ex.nranks(), me = ex.rank();
  area.dev = &ex.device();
  area.maxBytes = ex.tuning().slotMax;
  const size_t room = std::max(area.maxBytes, sizeof(MappedRecord));
  area.halfBytes = kLine + (room + kLine - 1) / kLine * kLine;
  area.total = kControl + 2 * area.halfBytes;
  Record rec;
  rec.pid = static_cast<int32_t>(getpid());
  rec.maxBytes = area.maxBytes;
  try {
    area.mine = static_cast<unsigned char*>(area.dev->allocPeerable(area.total));
    std::memset(area.mine, 0, area.total);
    rec.ok = area.dev->exportBuffer(area.mine, area.total, &rec.ref) ? 1 : 0;
  } catch (const Error&) {
    rec.ok = 0;
  }
  std::vector<Record> all(n);
  for (int p = 0; p < n; ++p) {
    if (p != me) ex.send(p, &rec, sizeof(rec));
  }
  for (int p = 0; p < n; ++p) {
    if (p != me) ex.recv(p, &all[p], sizeof(Record));
  }
  ex.wait();
  all[me] = rec;
  area.slots.assign(n, nullptr);
  area.pids.assign(n, 0);
  for (int p = 0; p < n; ++p) {
    if (all[p].magic != kRecordMagic) {
      throw RemoteError(strCat("rank ", me, ": rank ", p, " sent no slot record"));
    }
    if (!all[p].ok || all[p].maxBytes != area.maxBytes) area.usable = false;
    area.pids[p] = all[p].pid;
  }
  if (!area.usable) return;  // every rank saw the same records: all fall back alike
  for (int p = 0; p < n; ++p) {
    area.slots[p] = p == me ? area.mine
                            : static_cast<const unsigned char*>(
                                  area.dev->importBuffer(all[p].ref, all[p].pid, area.total));
  }
}

std::string sigText(uint32_t type, uint32_t dtype, uint32_t op, uint64_t count) {
  return strCat(collName(static_cast<CollType>(type)), "(",
                xcclTypeName(static_cast<xcclDataType_t>(dtype)), ", ", count, ", ",
                xcclOpName(static_cast<xcclRedOp_t>(op)), ")");
}

// Waits until `peer`'s half shows this call, then checks that it is the same call. `done`:
// waits instead for the peer's done word ("mapped": its slice is written out everywhere).
void waitFor(Exchange& ex, const SlotArea& area, int peer, uint64_t call, const Header& mine,
             bool done = false) {
  const Header* h = area.header(peer, call);
  const std::atomic<uint64_t>& word = done ? h->done : h->seq;
  const char* reach = done ? "finished" : "reached";
  uint64_t seen = word.load(std::memory_order_acquire);
  auto published = [&] {
    seen = word.load(std::memory_order_acquire);
    return seen == call;
  };
  if (seen != call) {
    Backoff backoff(ex.yieldWhenIdle());
    Clock::time_point lastLive = Clock::now();
    for (uint32_t polls = 1;; ++polls) {
      _mm_pause();
      if (published()) break;
      backoff.idle();
      // The checks cost more than a poll: every 256 polls while spinning, every 8 once
      // napping (a nap is tens of microseconds).
      if ((polls & (backoff.napping() ? 7 : 255)) != 0) continue;
      const std::string what = sigText(mine.type, mine.dtype, mine.op, mine.count);
      if (ex.aborted()) {
        throw InvalidUsage(strCat("rank ", ex.rank(), ": communicator aborted during ", what));
      }
      // A sign of trouble from the peer counts only if its word still does not show this
      // call: a peer that published it may since have finished it and moved on (the next
      // operation's frames, a later failure, its exit) while this rank napped.
      try {
        if (area.control(peer)->failed.load(std::memory_order_acquire) == 1) {
          const Control* c = area.control(peer);
          const std::string why(c->why, strnlen(c->why, sizeof(c->why)));
          throw RemoteError(strCat("rank ", ex.rank(), ": rank ", peer, " failed before it ", reach,
                                   " ", what, " (slot call ", call, "): ", why));
        }
        ex.checkQuietPeer(peer);
        const Clock::time_point now = Clock::now();
        if (now - lastLive >= std::chrono::milliseconds(2)) {  // a syscall: every 2 ms
          lastLive = now;
          if (processDead(area.pids[peer])) {
            throw RemoteError(strCat("rank ", ex.rank(), ": rank ", peer, " (pid ", area.pids[peer],
                                     ") died before it ", reach, " ", what, " (slot call ", call,
                                     ")"));
          }
        }
      } catch (const Error&) {
        if (published()) break;
        throw;
      }
      if (ex.deadline().expired()) {
        throw Timeout(strCat("rank ", ex.rank(), ": ", what, " waited ", ex.deadline().budgetMs(),
                             " ms for rank ", peer, done ? " to write its slice" : "",
                             " (slot call ", call, "; it is at call ", seen, ")"));
      }
    }
  }
  if (done) return;
  if (h->type != mine.type || h->dtype != mine.dtype || h->op != mine.op ||
      h->count != mine.count) {
    throw RemoteError(strCat("rank ", ex.rank(), ": collective mismatch with rank ", peer,
                             " at slot call ", call, ": this rank called ",
                             sigText(mine.type, mine.dtype, mine.op, mine.count), ", rank ", peer,
                             " called ", sigText(h->type, h->dtype, h->op, h->count)));
  }
}

}  // namespace

bool slotSupports(const CollArgs& args, const Exchange& ex) {
  const SlotArea* area = ex.slotArea();
  return args.type == CollType::kAllReduce && ex.nranks() > 1 && ex.hosts().size() == 1 &&
         args.count * dtypeSize(args.dtype) <= ex.tuning().slotMax && !ex.checksums() &&
         xcclParamShmDisable() == 0 && std::strcmp(ex.device().name(), "host") == 0 &&
         (area == nullptr || area->usable);
}

namespace {

// One call through the slots (set up and usable): the input in, the fold out.
void throughSlots(Exchange& ex, SlotArea& area, const CollArgs& args) {
  const int n = ex.nranks(), me = ex.rank();
  const uint64_t call = ++area.calls;
  const size_t bytes = args.count * dtypeSize(args.dtype);
  Header& mine = *area.header(me, call);
  std::memcpy(const_cast<unsigned char*>(area.data(me, call)), args.sendbuf, bytes);
  mine.type = static_cast<uint32_t>(args.type);
  mine.dtype = static_cast<uint32_t>(args.dtype);
  mine.op = static_cast<uint32_t>(args.op);
  mine.count = args.count;
  mine.seq.store(call, std::memory_order_release);
  Device& dev = ex.device();
  waitFor(ex, area, 0, call, mine);
  waitFor(ex, area, 1, call, mine);
  if (args.count == 0) {  // a call that moves nothing, compared with every rank's all the same
    for (int q = 2; q < n; ++q) waitFor(ex, area, q, call, mine);
    return;
  }
  dev.reduce(args.recvbuf, area.data(0, call), area.data(1, call), args.count, args.dtype, args.op);
  for (int q = 2; q < n; ++q) {
    waitFor(ex, area, q, call, mine);
    dev.reduce(args.recvbuf, args.recvbuf, area.data(q, call), args.count, args.dtype, args.op);
  }
}

}  // namespace

namespace {

// The communicator's slots, made by the first call that needs them ("slot" or "mapped").
SlotArea& slotsOf(Exchange& ex) {
  if (ex.slotArea() == nullptr) {
    ex.setSlotArea(SlotAreaPtr(new SlotArea));
    setUp(ex, *ex.slotArea());
  }
  return *ex.slotArea();
}

}  // namespace

void slotRun(Exchange& ex, const CollArgs& args) {
  SlotArea& area = slotsOf(ex);
  if (!area.usable) {
    findAlgorithm(CollType::kAllReduce, "direct")->run(ex, args);
    return;
  }
  try {
    throughSlots(ex, area, args);
  } catch (const std::exception& e) {
    // As a failing engine does: peers reading frames get an abort frame with the reason,
    // peers waiting on the slots find it in the control block.
    ex.abandonOp(e.what());
    throw;
  }
}

bool mappedSupports(const CollArgs& args, const Exchange& ex) {
  const SlotArea* area = ex.slotArea();
  return args.type == CollType::kAllReduce && ex.nranks() > 1 && ex.hosts().size() == 1 &&
         ex.readsInPlace() && xcclParamShmDisable() == 0 && ex.device().hostAddressable() &&
         (area == nullptr || area->usable);
}

namespace {

// One "mapped" call (slots set up and usable). False when some rank's buffers are not memory
// the others can map: every rank reads the same records, so all return false alike, and no
// buffer has been touched.
// `forced`: XCCL_ALGO names "mapped", so a rank that cannot be mapped fails the call instead.
bool throughMapped(Exchange& ex, SlotArea& area, const CollArgs& args, bool forced) {
  const int n = ex.nranks(), me = ex.rank();
  const uint64_t call = ++area.calls;
  Device& dev = ex.device();
  const size_t es = dtypeSize(args.dtype), bytes = args.count * es;
  Header& mine = *area.header(me, call);
  auto* rec = reinterpret_cast<MappedRecord*>(const_cast<unsigned char*>(area.data(me, call)));
  rec->ok = dev.exportBuffer(args.sendbuf, bytes, &rec->send) &&
                    dev.exportBuffer(args.recvbuf, bytes, &rec->recv)
                ? 1
                : 0;
  mine.type = static_cast<uint32_t>(args.type);
  mine.dtype = static_cast<uint32_t>(args.dtype);
  mine.op = static_cast<uint32_t>(args.op);
  mine.count = args.count;
  mine.seq.store(call, std::memory_order_release);
  for (int q = 0; q < n; ++q) {
    if (q != me) waitFor(ex, area, q, call, mine);
  }
  auto record = [&](int q) { return reinterpret_cast<const MappedRecord*>(area.data(q, call)); };
  for (int q = 0; q < n; ++q) {
    if (record(q)->ok) continue;
    if (forced) {
      throw InvalidUsage(strCat("XCCL_ALGO forces allreduce algorithm 'mapped', but rank ", q,
                                "'s buffers (", bytes, " bytes) are not memory its peers can map: ",
                                "allocate them with xcclMemAlloc (torch: inside ",
                                "torch_xccl.peer_memory()), or unset XCCL_ALGO"));
    }
    if (ex.firstTime("mapped/declined")) {
      XCCL_INFO(COLL, "allreduce of ", bytes, " bytes: rank ", q,
                "'s buffers are not memory its peers can map, so this call (and every such one) ",
                "takes the next algorithm; xcclMemAlloc or torch_xccl.peer_memory() buffers ",
                "are reduced in place (docs/MEMORY.md)");
    }
    return false;
  }
  std::vector<const char*> in(n);
  std::vector<char*> out(n);
  for (int q = 0; q < n; ++q) {
    if (q == me) {
      in[q] = static_cast<const char*>(args.sendbuf);
      out[q] = static_cast<char*>(args.recvbuf);
      continue;
    }
    in[q] = static_cast<const char*>(dev.importBuffer(record(q)->send, area.pids[q], bytes));
    // The mapping is writable: peers write their slices of the result into this rank's output.
    out[q] = const_cast<char*>(
        static_cast<const char*>(dev.importBuffer(record(q)->recv, area.pids[q], bytes)));
  }
  // This rank's slice, whole lines apart from the last: folded straight out of every rank's
  // input and stored to every rank's output in one pass (Device::reduceCopy; in place is safe:
  // each block is read whole before it is written, and the slice is this rank's alone).
  const size_t align = std::max<size_t>(1, kLine / es);
  const size_t per = ((args.count + n - 1) / n + align - 1) / align * align;
  const size_t lo = std::min(args.count, per * static_cast<size_t>(me));
  const size_t hi = std::min(args.count, lo + per);
  if (hi > lo) {
    std::vector<const void*> srcs(n);
    std::vector<void*> dsts(n);
    for (int q = 0; q < n; ++q) {
      srcs[q] = in[q] + lo * es;
      dsts[q] = out[(me + 1 + q) % n] + lo * es;  // this rank's own output last
    }
    dev.reduceCopy(dsts.data(), n, srcs.data(), n, hi - lo, args.dtype, args.op);
  }
  mine.done.store(call, std::memory_order_release);
  for (int q = 0; q < n; ++q) {
    if (q != me) waitFor(ex, area, q, call, mine, /*done=*/true);
  }
  return true;
}

}  // namespace

void mappedRun(Exchange& ex, const CollArgs& args) {
  SlotArea& area = slotsOf(ex);
  const bool forced = ex.tuning().forced[static_cast<size_t>(CollType::kAllReduce)] == "mapped";
  bool ran = false;
  if (area.usable && area.mappedSkip > 0 && !forced) {
    --area.mappedSkip;  // plain buffers lately: spare this call the meeting (~4-8 % at 1 MiB)
  } else if (area.usable) {
    try {
      ran = throughMapped(ex, area, args, forced);
    } catch (const std::exception& e) {
      ex.abandonOp(e.what());
      throw;
    }
    area.mappedBackoff =
        ran ? 0 : std::min<uint32_t>(64, std::max<uint32_t>(1, 2 * area.mappedBackoff));
    area.mappedSkip = area.mappedBackoff;
  }
  if (!ran) selectAlgorithmAfter(args, ex, "mapped").run(ex, args);
}

}  // namespace algo
}  // namespace xccl
