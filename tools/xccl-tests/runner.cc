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
// prints the row. The case itself is runner_case.cc; the buffers guarded_buffer.h.
#include "runner.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "rank_runner.h"

namespace xt {

double nowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

std::string hostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

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
  dev_ = DeviceApi::make(opt_.device, opt_.memAlloc);
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
  if (!streams_ && opt_.blocking) stream_ = XCCL_STREAM_CALLER;
  // --kill: a failed operation must not fail the stream the survivors go on with.
  if (opt_.killRank >= 0) cfg.streamErrors = xcclStreamErrorsReport;
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

// --kill: a world the losses made too small for the collective (sendrecv on one rank).
bool RankRunner::unsupportedAfterLoss(const OpArgs& a) {
  const std::string whyNot = worldUnsupportedReason(a.coll, s_.nranks);
  if (whyNot.empty()) return false;
  report_.skipped(a.coll, a.type, collInfo(a.coll).hasOp ? opName(a.op) : "none",
                  whyNot + " (after a lost rank)");
  return true;
}

void RankRunner::perfMode() {
  for (Coll c : opt_.colls) {
    const CollInfo& ci = collInfo(c);
    if (printer_) report_.tableHeader(c);
    int caseNo = 0;
    std::string whyNot = worldUnsupportedReason(c, s_.nranks);
    if (!whyNot.empty()) {
      report_.skipped(c, opt_.types.front(), "none", whyNot);
      continue;
    }
    for (xcclDataType_t t : opt_.types) {
      std::vector<xcclRedOp_t> ops = ci.hasOp ? opt_.ops : std::vector<xcclRedOp_t>{xcclSum};
      for (xcclRedOp_t op : ops) {
        std::string why = unsupportedReason(c, t, op);
        if (!why.empty()) {  // explicit requests were rejected in main(); this is an "all"
          report_.skipped(c, t, opName(op), why);
          continue;
        }
        OpArgs a{c, t, op, ci.hasRoot ? opt_.root : 0, 0};
        size_t bytes = opt_.minBytes;
        for (;;) {
          maybeDie();
          for (bool done = false; !done;) {  // again on the survivors after a --kill loss
            if (ci.hasRoot) a.root = opt_.root % s_.nranks;
            Layout l = layoutFromBytes(c, bytes, typeInfo(t).size, s_.nranks, s_.rank);
            a.count = l.count;
            done = unsupportedAfterLoss(a) || runCase(a, l, true, caseNo, false);
          }
          ++caseNo;
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
      report_.skipped(c, opt_.types.front(), "none", whyNot);
      if (printer_) std::printf("# %-15s skipped: %s\n", ci.name, whyNot.c_str());
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
          report_.skipped(c, t, opName(op), why);
          continue;
        }
        size_t es = typeInfo(t).size;
        for (size_t count :
             {size_t{0}, size_t{1}, size_t{3}, size_t{17}, 1024 / es + 5, 65536 / es}) {
          maybeDie();
          for (bool done = false; !done;) {  // again on the survivors after a --kill loss
            int root = ci.hasRoot ? (opt_.rootGiven ? opt_.root : caseNo) % s_.nranks : 0;
            OpArgs a{c, t, op, root, count};
            Layout l = layoutFromCount(c, count, es, s_.nranks, s_.rank);
            done = unsupportedAfterLoss(a) || runCase(a, l, false, caseNo, !opt_.verbose);
          }
          ++caseNo;
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
    if (opt_.killRank >= 0 && casesBegun_ <= opt_.killCase) {
      if (printer_) {
        std::fprintf(stderr, "xccl-tests: --kill %d:%d: the run has only %d cases\n", opt_.killRank,
                     opt_.killCase, casesBegun_);
      }
      code = kExitUsage;
    }
    // Everyone exits with rank 0's verdict (the lowest survivor's after a --kill loss).
    std::vector<std::string> verdict = oob_.allgather(printer_ ? std::to_string(code) : "");
    code = std::atoi(verdict[members_[0]].c_str());
    call(xcclCommDestroy(comm_), "xcclCommDestroy");
    comm_ = nullptr;
    bufs_[0].reset();
    bufs_[1].reset();
    if (streams_ && stream_ != nullptr) dev_->streamDestroy(stream_);
    oob_.close(true);
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xccl-tests: rank %d: %s\n", s_.rank, e.what());
    std::fflush(stderr);
    oob_.close(false);  // tells every other rank to stop
    if (comm_) xcclCommAbort(comm_);
    comm_ = nullptr;
    if (streams_ && stream_ != nullptr) dev_->streamDestroy(stream_);
    return kExitFailure;
  }
}

int runRank(const Options& opt, const RankSetup& setup) {
  RankRunner r(opt, setup);
  return r.run();
}

}  // namespace xt
