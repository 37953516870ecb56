// One case of one rank (rank_runner.h), per placement (out-of-place, in-place): guard and
// fill the buffers, the check pass, the timed pass, the guard count; then every rank's
// outcome travels to rank 0 (the out-of-band channel, not libxccl), which prints the row.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "rank_runner.h"

namespace xt {
namespace {

// Fixed-size part of a rank's per-case message; notes follow, NUL-separated.
struct CaseWire {
  uint8_t ran[2];
  double timeUs[2];
  int64_t wrong[2];
  int64_t oob[2];
};

}  // namespace

// Buffer i, re-guarded for a case of `bytes` bytes. Grows when a case needs more. On a device
// with streams it is sized up front for the largest layout any case can have (nranks x -e bytes),
// so it never grows mid-run (see GuardedBuffer for why a free there could deadlock).
GuardedBuffer& RankRunner::buffer(int i, size_t bytes) {
  if (!bufs_[i] || bufs_[i]->capacity() < bytes) {
    size_t most = opt_.maxBytes * (streams_ ? static_cast<size_t>(s_.nranks) : 1) + 4096;
    size_t cap = std::max(bytes, most);
    if (reg_[i] != nullptr && regComm_[i] == comm_)
      call(xcclCommDeregister(comm_, reg_[i]), "xcclCommDeregister");
    reg_[i] = nullptr;
    bufs_[i].reset();
    bufs_[i] = std::make_unique<GuardedBuffer>(cap, *dev_);
  }
  if (opt_.memAlloc && regComm_[i] != comm_) {
    call(xcclCommRegister(comm_, bufs_[i]->block(), bufs_[i]->blockBytes(), &reg_[i]),
         "xcclCommRegister");
    regComm_[i] = comm_;
  }
  bufs_[i]->prepare(bytes);
  return *bufs_[i];
}

void RankRunner::Place::upload() {
  sendBuf->upload();
  if (recvBuf) recvBuf->upload();
}

void RankRunner::Place::download() {
  sendBuf->download();
  if (recvBuf) recvBuf->download();
}

RankRunner::Place RankRunner::place(const OpArgs& a, const Layout& l, bool inPlace) {
  const size_t es = typeInfo(a.type).size;
  Place p;
  if (inPlace) {
    p.sendBuf = &buffer(0, l.inElems * es);
    p.send = p.sendBuf->host() + l.inSendOff * es;
    p.recv = p.sendBuf->host() + l.inRecvOff * es;
    p.devSend = p.sendBuf->device() + l.inSendOff * es;
    p.devRecv = p.sendBuf->device() + l.inRecvOff * es;
  } else {
    p.sendBuf = &buffer(0, l.sendElems * es);
    p.recvBuf = &buffer(1, l.recvElems * es);
    p.send = p.sendBuf->host();
    p.recv = p.recvBuf->host();
    p.devSend = p.sendBuf->device();
    p.devRecv = p.recvBuf->device();
  }
  return p;
}

void RankRunner::checkPass(const OpArgs& a, const Layout& l, const Generator& gen, bool inPlace,
                           Place& p, PlaceOut& out) {
  const size_t es = typeInfo(a.type).size;
  double t0 = nowUs();
  issueOrThrow(a, p.devSend, p.devRecv);
  waitAll();
  out.timeUs = nowUs() - t0;
  p.download();
  if (opt_.injectFault && !inPlace && s_.rank == s_.nranks - 1 && l.recvElems > 0) {
    p.recv[0] ^= 0x5a;              // a wrong element (if this rank's result is checked)
    p.recv[l.recvElems * es] ^= 1;  // and an out-of-bounds write just past the buffer
  }
  std::string firstBad;
  out.wrong = verifyRecv(a, l, gen, s_.rank, s_.nranks, p.recv, &firstBad);
  if (out.wrong) out.note = firstBad;
  if (!inPlace) {
    int64_t changed = gen.countDiffs(p.send, s_.rank, 0, l.sendElems);
    if (changed && out.note.empty()) {
      out.note = "send buffer modified (" + std::to_string(changed) + " elements)";
    }
    out.wrong += changed;
  }
}

double RankRunner::timedPass(const OpArgs& a, Place& p) {
  auto batch = [&] {
    if (opt_.aggIters > 1) call(xcclGroupStart(), "xcclGroupStart");
    for (int k = 0; k < opt_.aggIters; ++k) issueOrThrow(a, p.devSend, p.devRecv);
    if (opt_.aggIters > 1) call(xcclGroupEnd(), "xcclGroupEnd");
  };
  for (int w = 0; w < opt_.warmup; ++w) batch();
  if (opt_.warmup) waitAll();
  barrier();
  double t0 = nowUs();
  for (int it = 0; it < opt_.iters; ++it) batch();
  waitAll();
  const double us = (nowUs() - t0) / (static_cast<double>(opt_.iters) * opt_.aggIters);
  p.download();
  return us;
}

PlaceOut RankRunner::runPlace(const OpArgs& a, const Layout& l, bool inPlace, bool timed,
                              int caseNo) {
  const size_t es = typeInfo(a.type).size;
  Place p = place(a, l, inPlace);
  Generator gen(a.type, domainFor(collInfo(a.coll).hasOp, a.op),
                opt_.seed * 1000003ULL + static_cast<uint64_t>(caseNo));
  // Never 0 or 1, so an unwritten bool element is caught too.
  auto sentinel = static_cast<unsigned char>(0x80 | ((caseNo * 37 + (inPlace ? 11 : 0)) & 0x7f));
  if (inPlace) {
    std::memset(p.sendBuf->host(), sentinel, l.inElems * es);
  } else {
    std::memset(p.recv, sentinel, l.recvElems * es);
  }
  gen.fill(p.send, s_.rank, 0, l.sendElems);
  p.upload();

  PlaceOut out;
  out.ran = true;
  const char* where = inPlace ? "in-place" : "out-of-place";
  if (opt_.check || opt_.conformance) checkPass(a, l, gen, inPlace, p, out);
  if (timed && opt_.iters > 0) out.timeUs = timedPass(a, p);
  out.oob = p.sendBuf->damage() + (p.recvBuf ? p.recvBuf->damage() : 0);
  if (out.oob && out.note.empty()) {
    out.note = std::to_string(out.oob) + " guard bytes around the buffers were overwritten";
  }
  if (!out.note.empty())
    out.note = "rank " + std::to_string(s_.rank) + " " + where + ": " + out.note;
  return out;
}

bool RankRunner::runCase(const OpArgs& a, const Layout& l, bool timed, int caseNo, bool quiet) {
  const bool survivable = opt_.killRank >= 0;
  PlaceOut p[2];
  std::string failure;  // --kill: an operation failed here (a lost peer, presumably)
  const double t0 = nowUs();
  try {
    p[0] = runPlace(a, l, false, timed, caseNo);
    if (inPlaceSupported(a.coll)) p[1] = runPlace(a, l, true, timed, caseNo);
  } catch (const std::exception& e) {
    if (!survivable) throw;
    failure = e.what();
  }
  const double failMs = (nowUs() - t0) / 1e3;
  std::string mine;
  if (!failure.empty()) {
    mine = "!" + failure;  // a CaseWire starts with a 0 or 1 byte, never '!'
  } else {
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
    mine = std::string(reinterpret_cast<const char*>(&w), sizeof w) + notes;
  }
  // Indexed by the ranks of the run's start (the channel's numbering); members_ maps.
  std::vector<std::string> all = oob_.allgather(mine);
  if (survivable && !survive(a, l, caseNo, all, failure, failMs)) return false;
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
      std::memcpy(&rw, all[members_[r]].data(), sizeof rw);
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
    const std::string& m = all[members_[r]];
    size_t pos = sizeof(CaseWire);
    for (int k = 0; k < 2 && pos <= m.size(); ++k) {
      size_t end = m.find('\0', pos);
      if (end == std::string::npos) end = m.size();
      if (end > pos) row.notes.push_back(m.substr(pos, end - pos));
      pos = end + 1;
    }
  }
  report_.row(row, quiet);  // every rank keeps the tally; the printer prints
  return true;
}

void RankRunner::maybeDie() {
  if (opt_.killRank == firstRank_ && casesBegun_ == opt_.killCase) {
    std::fflush(stdout);
    std::fflush(stderr);
    raise(SIGKILL);
  }
  ++casesBegun_;
}

bool RankRunner::survive(const OpArgs& a, const Layout& l, int caseNo,
                         const std::vector<std::string>& all, const std::string& myFailure,
                         double failMs) {
  // The server's view of who left is the same on every survivor: it decides, not each
  // rank's own probe (two probes a moment apart could disagree).
  const std::vector<bool>& alive = oob_.alive();
  std::vector<int> gone;  // in the communicator's numbering
  std::string failure =
      myFailure.empty() ? "" : "rank " + std::to_string(s_.rank) + ": " + myFailure;
  for (int r = 0; r < s_.nranks; ++r) {
    const int orig = members_[r];
    if (!alive[orig]) {
      gone.push_back(r);
    } else if (failure.empty() && !all[orig].empty() && all[orig][0] == '!') {
      failure = "rank " + std::to_string(r) + ": " + all[orig].substr(1);
    }
  }
  if (gone.empty()) {
    if (failure.empty()) return true;
    throw std::runtime_error(failure + " (and no rank was lost)");
  }
  const double t0 = nowUs();
  xcclComm_t child = nullptr;
  call(xcclCommShrink(comm_, gone.data(), static_cast<int>(gone.size()), &child, nullptr,
                      XCCL_SHRINK_ABORT),
       "xcclCommShrink");
  Loss loss;
  loss.shrinkMs = (nowUs() - t0) / 1e3;
  loss.failMs = failMs;
  xcclCommAbort(comm_);  // its operations failed with the loss; nothing to wait for
  comm_ = child;
  for (auto it = gone.rbegin(); it != gone.rend(); ++it) {
    loss.ranks.insert(loss.ranks.begin(), members_[*it]);
    members_.erase(members_.begin() + *it);
  }
  loss.caseNo = caseNo;
  loss.coll = collInfo(a.coll).name;
  loss.bytes = l.bytes;
  loss.survivors = static_cast<int>(members_.size());
  s_.nranks = loss.survivors;
  for (int r = 0; r < s_.nranks; ++r) {
    if (members_[r] == firstRank_) s_.rank = r;
  }
  printer_ = s_.rank == 0;  // the lowest survivor prints from here (it kept the tally)
  report_.setPrinting(printer_);
  report_.lost(loss);
  return false;
}

}  // namespace xt
