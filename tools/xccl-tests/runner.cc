// One rank of xccl-tests (see runner.h).
//
// Per test case and per placement (out-of-place, in-place), every rank:
//   1. allocates its buffers with guard regions (kGuard bytes of a known pattern) on both
//      sides, fills its input from the Generator and the output with a sentinel byte;
//   2. (check) issues the operation once, waits, and compares every output element with
//      the host reference, and (out-of-place) that the input is untouched;
//   3. (timed) runs -w warmup iterations, an xcclBarrier, then -n iterations of -m
//      operations each and waits on the last event: time per operation;
//   4. counts damaged guard bytes ("out of bounds values").
// The results travel to global rank 0 through the out-of-band channel (not libxccl), which
// prints the row.
#include "runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "device_api.h"
#include "oob.h"
#include "report.h"

namespace xt {
namespace {

constexpr size_t kGuard = 256;

// A buffer on the run's device (-D) with guard regions of a known pattern on both sides of
// the region a case uses. A rank keeps its buffers for the whole run and re-guards them per
// case (prepare), as nccl-tests allocates once: freeing device memory synchronises the
// device, and with several ranks sharing a device a free between cases could wait for a
// peer's stream that holds a collective needing this rank. Filling and checking work on
// host(): the memory itself where the host can address it (host, xdev), else a host mirror
// that upload() copies to the device before an operation and download() copies back after
// (cuda); every read of a result comes after the rank's stream is synchronised.
class GuardedBuffer {
 public:
  GuardedBuffer(size_t capacity, DeviceApi& api) : capacity_(capacity), api_(api) {
    dev_ = static_cast<unsigned char*>(api_.alloc(capacity + 2 * kGuard));
    if (api_.hostAddressable()) {
      base_ = dev_;
    } else {
      void* p = nullptr;
      if (posix_memalign(&p, 64, capacity + 2 * kGuard) != 0) throw std::bad_alloc();
      base_ = static_cast<unsigned char*>(p);
    }
    for (size_t i = 0; i < kGuard; ++i) base_[i] = pattern(i);
  }
  ~GuardedBuffer() {
    if (base_ != dev_) std::free(base_);
    api_.free(dev_);
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  size_t capacity() const { return capacity_; }
  // The next case uses `bytes` bytes: the trailing guard goes right after them.
  void prepare(size_t bytes) {
    bytes_ = bytes;
    for (size_t i = 0; i < kGuard; ++i) base_[kGuard + bytes_ + i] = pattern(kGuard + i);
  }
  unsigned char* host() { return base_ + kGuard; }   // fill and check here
  unsigned char* device() { return dev_ + kGuard; }  // give the library this
  void upload() {
    if (base_ != dev_) api_.copyIn(dev_, base_, bytes_ + 2 * kGuard);
  }
  void download() {
    if (base_ != dev_) api_.copyOut(base_, dev_, bytes_ + 2 * kGuard);
  }
  int64_t damage() const {
    int64_t bad = 0;
    for (size_t i = 0; i < kGuard; ++i) {
      bad += base_[i] != pattern(i);
      bad += base_[kGuard + bytes_ + i] != pattern(kGuard + i);
    }
    return bad;
  }

 private:
  static unsigned char pattern(size_t i) { return static_cast<unsigned char>(0xA5 ^ (i * 0x3B)); }
  unsigned char* base_ = nullptr;
  unsigned char* dev_ = nullptr;
  size_t capacity_;
  size_t bytes_ = 0;
  DeviceApi& api_;
};

struct PlaceOut {
  bool ran = false;
  double timeUs = 0;
  int64_t wrong = 0;
  int64_t oob = 0;
  std::string note;  // first problem seen on this rank
};

// Fixed-size part of a rank's per-case message; notes follow, NUL-separated.
struct CaseWire {
  uint8_t ran[2];
  double timeUs[2];
  int64_t wrong[2];
  int64_t oob[2];
};

double nowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string hostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

class RankRunner {
 public:
  RankRunner(const Options& opt, const RankSetup& s)
      : opt_(opt), s_(s), report_(opt, s.nranks), printer_(s.rank == 0) {}
  int run();

 private:
  void init();
  void announce(int device);  // the header line of this rank, gathered for rank 0
  void call(xcclResult_t r, const std::string& what) const;
  void waitAll();
  void barrier();
  void issueOrThrow(const OpArgs& a, const void* send, void* recv);
  PlaceOut runPlace(const OpArgs& a, const Layout& l, bool inPlace, bool timed, int caseNo);
  void runCase(const OpArgs& a, const Layout& l, bool timed, int caseNo, bool quiet);
  void perfMode();
  void conformanceMode();

  const Options& opt_;
  RankSetup s_;
  Report report_;
  bool printer_;
  OobClient oob_;
  xcclComm_t comm_ = nullptr;
  std::unique_ptr<DeviceApi> dev_;  // -D: where buffers live
  void* stream_ = nullptr;          // -D xdev|cuda: every operation is ordered on this stream
  bool streams_ = false;            // the device has streams
  std::unique_ptr<GuardedBuffer> bufs_[2];  // kept for the run (see GuardedBuffer)
  GuardedBuffer& buffer(int i, size_t bytes);
  std::vector<std::string> rankLines_;
};

void RankRunner::call(xcclResult_t r, const std::string& what) const {
  if (r == xcclSuccess) return;
  const char* detail = xcclGetLastError(comm_);
  throw std::runtime_error(what + " failed: " + xcclGetErrorString(r) +
                           (detail && *detail ? std::string(": ") + detail : std::string()));
}

// Everything issued so far is complete: the communicator's operations and (devices with
// streams) the work the stream holds behind them.
void RankRunner::waitAll() {
  xcclEvent_t ev;
  call(xcclEventRecord(&ev, comm_), "xcclEventRecord");
  call(xcclEventWait(&ev, -1), "xcclEventWait");
  if (streams_) dev_->streamSync(stream_);
}

void RankRunner::barrier() {
  call(xcclBarrier(comm_, stream_), "xcclBarrier");
  waitAll();
}

void RankRunner::issueOrThrow(const OpArgs& a, const void* send, void* recv) {
  const char* what = "?";
  xcclResult_t r = issue(a, send, recv, comm_, s_.rank, s_.nranks, &what, stream_);
  call(r, what);
}

void RankRunner::init() {
  oob_.connect(s_.oobHost, s_.oobPort, s_.rank, s_.nranks, s_.oobTimeoutSec);
  dev_ = DeviceApi::make(opt_.device);
  streams_ = opt_.device != "host";
  if (s_.comm != nullptr) {  // -g: xcclCommInitAllConfig made it on device s_.device
    comm_ = s_.comm;
    const int device = streams_ ? s_.device % dev_->count() : s_.device;  // as main.cc's devlist
    if (streams_) {
      dev_->setDevice(device);
      stream_ = dev_->streamCreate();
    }
    announce(device);
    return;
  }
  xcclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (s_.rank == 0) call(xcclGetUniqueId(&id), "xcclGetUniqueId");
  std::vector<std::string> ids =
      oob_.allgather(s_.rank == 0 ? std::string(id.internal, sizeof id.internal) : std::string());
  if (ids[0].size() != sizeof id.internal) throw std::runtime_error("bad unique id from rank 0");
  std::memcpy(id.internal, ids[0].data(), sizeof id.internal);
  xcclConfig_t cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.timeout_ms = static_cast<int64_t>(opt_.timeoutSec) * 1000;
  cfg.device = s_.device;
  cfg.name = "xccl-tests";
  if (streams_) {
    cfg.device = s_.device % dev_->count();  // more ranks than devices share them
    cfg.deviceType = dev_->type();
    dev_->setDevice(cfg.device);
    stream_ = dev_->streamCreate();
  }
  call(xcclCommInitRankConfig(&comm_, s_.nranks, id, s_.rank, &cfg), "xcclCommInitRankConfig");
  announce(cfg.device);
}

void RankRunner::announce(int device) {
  char line[512];
  std::snprintf(line, sizeof line, "Rank %3d Group %3d Pid %7d on %12s device %3d [%s]", s_.rank,
                s_.group, static_cast<int>(getpid()), hostName().c_str(), device,
                streams_                ? opt_.device.c_str()
                : getenv("XCCL_DEVICE") ? getenv("XCCL_DEVICE")
                                        : "host");
  rankLines_ = oob_.allgather(line);
}

// Buffer i, re-guarded for a case of `bytes` bytes. Grows when a case needs more. On a device
// with streams it is sized up front for the largest layout any case can have (nranks x -e bytes),
// so it never grows mid-run (see GuardedBuffer for why a free there could deadlock).
GuardedBuffer& RankRunner::buffer(int i, size_t bytes) {
  if (!bufs_[i] || bufs_[i]->capacity() < bytes) {
    size_t most = opt_.maxBytes * (streams_ ? static_cast<size_t>(s_.nranks) : 1) + 4096;
    size_t cap = std::max(bytes, most);
    bufs_[i].reset();
    bufs_[i] = std::make_unique<GuardedBuffer>(cap, *dev_);
  }
  bufs_[i]->prepare(bytes);
  return *bufs_[i];
}

PlaceOut RankRunner::runPlace(const OpArgs& a, const Layout& l, bool inPlace, bool timed,
                              int caseNo) {
  const size_t es = typeInfo(a.type).size;
  GuardedBuffer* sendBuf = nullptr;
  GuardedBuffer* recvBuf = nullptr;
  unsigned char *send, *recv;        // host views: fill and check
  unsigned char *devSend, *devRecv;  // what the library gets
  if (inPlace) {
    sendBuf = &buffer(0, l.inElems * es);
    send = sendBuf->host() + l.inSendOff * es;
    recv = sendBuf->host() + l.inRecvOff * es;
    devSend = sendBuf->device() + l.inSendOff * es;
    devRecv = sendBuf->device() + l.inRecvOff * es;
  } else {
    sendBuf = &buffer(0, l.sendElems * es);
    recvBuf = &buffer(1, l.recvElems * es);
    send = sendBuf->host();
    recv = recvBuf->host();
    devSend = sendBuf->device();
    devRecv = recvBuf->device();
  }
  auto upload = [&] {
    sendBuf->upload();
    if (recvBuf) recvBuf->upload();
  };
  auto download = [&] {
    sendBuf->download();
    if (recvBuf) recvBuf->download();
  };
  Generator gen(a.type, domainFor(collInfo(a.coll).hasOp, a.op),
                opt_.seed * 1000003ULL + static_cast<uint64_t>(caseNo));
  // Never 0 or 1, so an unwritten bool element is caught too.
  auto sentinel = static_cast<unsigned char>(0x80 | ((caseNo * 37 + (inPlace ? 11 : 0)) & 0x7f));
  if (inPlace) {
    std::memset(sendBuf->host(), sentinel, l.inElems * es);
  } else {
    std::memset(recv, sentinel, l.recvElems * es);
  }
  gen.fill(send, s_.rank, 0, l.sendElems);
  upload();

  PlaceOut out;
  out.ran = true;
  const char* where = inPlace ? "in-place" : "out-of-place";
  if (opt_.check || opt_.conformance) {
    double t0 = nowUs();
    issueOrThrow(a, devSend, devRecv);
    waitAll();
    out.timeUs = nowUs() - t0;
    download();
    if (opt_.injectFault && !inPlace && s_.rank == s_.nranks - 1 && l.recvElems > 0) {
      recv[0] ^= 0x5a;              // a wrong element (if this rank's result is checked)
      recv[l.recvElems * es] ^= 1;  // and an out-of-bounds write just past the buffer
    }
    std::string firstBad;
    out.wrong = verifyRecv(a, l, gen, s_.rank, s_.nranks, recv, &firstBad);
    if (out.wrong) out.note = firstBad;
    if (!inPlace) {
      int64_t changed = gen.countDiffs(send, s_.rank, 0, l.sendElems);
      if (changed && out.note.empty()) {
        out.note = "send buffer modified (" + std::to_string(changed) + " elements)";
      }
      out.wrong += changed;
    }
  }
  if (timed && opt_.iters > 0) {
    auto batch = [&] {
      if (opt_.aggIters > 1) call(xcclGroupStart(), "xcclGroupStart");
      for (int k = 0; k < opt_.aggIters; ++k) issueOrThrow(a, devSend, devRecv);
      if (opt_.aggIters > 1) call(xcclGroupEnd(), "xcclGroupEnd");
    };
    for (int w = 0; w < opt_.warmup; ++w) batch();
    if (opt_.warmup) waitAll();
    barrier();
    double t0 = nowUs();
    for (int it = 0; it < opt_.iters; ++it) batch();
    waitAll();
    out.timeUs = (nowUs() - t0) / (static_cast<double>(opt_.iters) * opt_.aggIters);
    download();
  }
  out.oob = sendBuf->damage() + (recvBuf ? recvBuf->damage() : 0);
  if (out.oob && out.note.empty()) {
    out.note = std::to_string(out.oob) + " guard bytes around the buffers were overwritten";
  }
  if (!out.note.empty())
    out.note = "rank " + std::to_string(s_.rank) + " " + where + ": " + out.note;
  return out;
}

void RankRunner::runCase(const OpArgs& a, const Layout& l, bool timed, int caseNo, bool quiet) {
  PlaceOut p[2] = {runPlace(a, l, false, timed, caseNo),
                   inPlaceSupported(a.coll) ? runPlace(a, l, true, timed, caseNo) : PlaceOut()};
  CaseWire w;
  std::memset(&w, 0, sizeof w);
  std::string notes;
  for (int k = 0; k < 2; ++k) {
    w.ran[k] = p[k].ran;
    w.timeUs[k] = p[k].timeUs;
    w.wrong[k] = p[k].wrong;
    w.oob[k] = p[k].oob;
    notes += p[k].note;
    notes += '\0';
  }
  std::vector<std::string> all =
      oob_.allgather(std::string(reinterpret_cast<const char*>(&w), sizeof w) + notes);
  if (!printer_) return;
  Row row;
  row.coll = a.coll;
  row.bytes = l.bytes;
  row.count = l.count;
  row.type = a.type;
  row.redop = collInfo(a.coll).hasOp ? opName(a.op) : "none";
  row.root = collInfo(a.coll).hasRoot ? a.root : -1;
  for (int k = 0; k < 2; ++k) {
    PlaceStats& ps = row.place[k];
    double sum = 0, mn = 0, mx = 0;
    for (int r = 0; r < s_.nranks; ++r) {
      CaseWire rw;
      std::memcpy(&rw, all[r].data(), sizeof rw);
      ps.ran = rw.ran[k];
      ps.wrong += rw.wrong[k];
      ps.oob += rw.oob[k];
      double t = rw.timeUs[k];
      sum += t;
      mn = r == 0 || t < mn ? t : mn;
      mx = r == 0 || t > mx ? t : mx;
      if (r == 0) ps.timeUs = t;
    }
    if (opt_.average == 1) ps.timeUs = sum / s_.nranks;
    if (opt_.average == 2) ps.timeUs = mn;
    if (opt_.average == 3) ps.timeUs = mx;
    ps.algbw = ps.timeUs > 0 ? static_cast<double>(l.bytes) / ps.timeUs / 1e3 : 0;
    ps.busbw = ps.algbw * busFactor(a.coll, s_.nranks);
  }
  for (int r = 0; r < s_.nranks; ++r) {
    const std::string& m = all[r];
    size_t pos = sizeof(CaseWire);
    for (int k = 0; k < 2 && pos <= m.size(); ++k) {
      size_t end = m.find('\0', pos);
      if (end == std::string::npos) end = m.size();
      if (end > pos) row.notes.push_back(m.substr(pos, end - pos));
      pos = end + 1;
    }
  }
  report_.row(row, quiet);
}

void RankRunner::perfMode() {
  for (Coll c : opt_.colls) {
    const CollInfo& ci = collInfo(c);
    if (printer_) report_.tableHeader(c);
    int caseNo = 0;
    std::string whyNot = worldUnsupportedReason(c, s_.nranks);
    if (!whyNot.empty()) {
      if (printer_) report_.skipped(c, opt_.types.front(), "none", whyNot);
      continue;
    }
    for (xcclDataType_t t : opt_.types) {
      std::vector<xcclRedOp_t> ops = ci.hasOp ? opt_.ops : std::vector<xcclRedOp_t>{xcclSum};
      for (xcclRedOp_t op : ops) {
        std::string why = unsupportedReason(c, t, op);
        if (!why.empty()) {  // explicit requests were rejected in main(); this is an "all"
          if (printer_) report_.skipped(c, t, opName(op), why);
          continue;
        }
        OpArgs a{c, t, op, ci.hasRoot ? opt_.root : 0, 0};
        size_t bytes = opt_.minBytes;
        for (;;) {
          Layout l = layoutFromBytes(c, bytes, typeInfo(t).size, s_.nranks, s_.rank);
          a.count = l.count;
          runCase(a, l, true, caseNo++, false);
          if (bytes >= opt_.maxBytes) break;
          size_t next = opt_.additiveStep
                            ? bytes + opt_.stepBytes
                            : static_cast<size_t>(static_cast<double>(bytes) * opt_.stepFactor);
          bytes = next > bytes ? (next < opt_.maxBytes ? next : opt_.maxBytes) : bytes + 1;
        }
      }
    }
  }
}

void RankRunner::conformanceMode() {
  int caseNo = 0;
  for (Coll c : opt_.colls) {
    const CollInfo& ci = collInfo(c);
    std::string whyNot = worldUnsupportedReason(c, s_.nranks);
    if (!whyNot.empty()) {
      if (printer_) {
        report_.skipped(c, opt_.types.front(), "none", whyNot);
        std::printf("# %-15s skipped: %s\n", ci.name, whyNot.c_str());
      }
      continue;
    }
    if (printer_ && opt_.verbose) report_.tableHeader(c);
    int64_t checksBefore = report_.failedChecks();
    double t0 = nowUs();
    int cases = 0;
    for (xcclDataType_t t : opt_.types) {
      std::vector<xcclRedOp_t> ops = ci.hasOp ? opt_.ops : std::vector<xcclRedOp_t>{xcclSum};
      for (xcclRedOp_t op : ops) {
        std::string why = unsupportedReason(c, t, op);
        if (!why.empty()) {
          if (printer_) report_.skipped(c, t, opName(op), why);
          continue;
        }
        size_t es = typeInfo(t).size;
        for (size_t count :
             {size_t{0}, size_t{1}, size_t{3}, size_t{17}, 1024 / es + 5, 65536 / es}) {
          int root = ci.hasRoot ? (opt_.rootGiven ? opt_.root : caseNo % s_.nranks) : 0;
          OpArgs a{c, t, op, root, count};
          Layout l = layoutFromCount(c, count, es, s_.nranks, s_.rank);
          runCase(a, l, false, caseNo++, !opt_.verbose);
          cases += inPlaceSupported(c) ? 2 : 1;
        }
      }
    }
    if (printer_) {
      std::printf("# %-15s %5d checks, %lld wrong  (%.2f s)\n", ci.name, cases,
                  static_cast<long long>(report_.failedChecks() - checksBefore),
                  (nowUs() - t0) / 1e6);
      std::fflush(stdout);
    }
  }
}

int RankRunner::run() {
  try {
    init();
    if (printer_) {
      report_.header(rankLines_, opt_.device);
    }
    if (opt_.conformance)
      conformanceMode();
    else
      perfMode();
    int code = kExitOk;
    if (printer_) {
      report_.footer();
      if (report_.totalWrong() > 0 || report_.totalOob() > 0) code = kExitWrong;
      if (!opt_.jsonFile.empty() && !report_.writeJson(opt_.jsonFile, rankLines_)) {
        std::fprintf(stderr, "xccl-tests: cannot write %s\n", opt_.jsonFile.c_str());
        code = kExitFailure;
      }
    }
    // Everyone exits with rank 0's verdict.
    std::vector<std::string> verdict = oob_.allgather(printer_ ? std::to_string(code) : "");
    code = std::atoi(verdict[0].c_str());
    call(xcclCommDestroy(comm_), "xcclCommDestroy");
    comm_ = nullptr;
    bufs_[0].reset();
    bufs_[1].reset();
    if (stream_ != nullptr) dev_->streamDestroy(stream_);
    oob_.close(true);
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xccl-tests: rank %d: %s\n", s_.rank, e.what());
    std::fflush(stderr);
    oob_.close(false);  // tells every other rank to stop
    if (comm_) xcclCommAbort(comm_);
    comm_ = nullptr;
    if (stream_ != nullptr) dev_->streamDestroy(stream_);
    return kExitFailure;
  }
}

}  // namespace

int runRank(const Options& opt, const RankSetup& setup) {
  RankRunner r(opt, setup);
  return r.run();
}

}  // namespace xt
