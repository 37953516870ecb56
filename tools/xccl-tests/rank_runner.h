// One rank of xccl-tests, as its files share it (internal to runner*.cc): runner.cc sets
// up and tears down the rank and walks the sweep or the conformance matrix; runner_case.cc
// runs one case (the check pass, the timed pass, the guards) and gathers it for rank 0.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "colls.h"
#include "device_api.h"
#include "guarded_buffer.h"
#include "oob.h"
#include "options.h"
#include "report.h"
#include "runner.h"

namespace xt {

// Microseconds on the steady clock.
double nowUs();

// One placement's outcome (out-of-place or in-place) on this rank.
struct PlaceOut {
  bool ran = false;
  double timeUs = 0;
  int64_t wrong = 0;
  int64_t oob = 0;
  std::string note;  // first problem seen on this rank
};

class RankRunner {
 public:
  RankRunner(const Options& opt, const RankSetup& s)
      : opt_(opt),
        s_(s),
        report_(opt, s.nranks, s.rank == 0),
        printer_(s.rank == 0),
        firstRank_(s.rank) {
    for (int r = 0; r < s.nranks; ++r) members_.push_back(r);
  }
  int run();

 private:
  void init();
  void announce(int device);  // the header line of this rank, gathered for rank 0
  void call(xcclResult_t r, const std::string& what) const;
  void waitAll();
  void barrier();
  void issueOrThrow(const OpArgs& a, const void* send, void* recv);
  // One placement's buffers: host views to fill and check, what the library gets.
  struct Place {
    GuardedBuffer* sendBuf = nullptr;
    GuardedBuffer* recvBuf = nullptr;  // null in place: both live in sendBuf
    unsigned char *send = nullptr, *recv = nullptr;
    unsigned char *devSend = nullptr, *devRecv = nullptr;
    void upload();
    void download();
  };
  Place place(const OpArgs& a, const Layout& l, bool inPlace);
  // The check pass: one operation, then every output element against the host reference
  // and (out-of-place) the input untouched. Fills out.timeUs, wrong and note.
  void checkPass(const OpArgs& a, const Layout& l, const Generator& gen, bool inPlace, Place& p,
                 PlaceOut& out);
  // The timed pass: -w warmups, a barrier, -n iterations of -m operations; microseconds per
  // operation.
  double timedPass(const OpArgs& a, Place& p);
  PlaceOut runPlace(const OpArgs& a, const Layout& l, bool inPlace, bool timed, int caseNo);
  // One case on every rank; false when --kill lost a rank during it and the survivors shrank
  // (the caller lays the case out again for the smaller world and reruns it).
  bool runCase(const OpArgs& a, const Layout& l, bool timed, int caseNo, bool quiet);
  // --kill: the victim dies here before its case; run() counts the cases.
  void maybeDie();
  bool unsupportedAfterLoss(const OpArgs& a);
  // --kill: after a case's gather, the ranks the out-of-band server dropped (in the
  // communicator's numbering); shrinks them away. Throws on a failure without a loss.
  bool survive(const OpArgs& a, const Layout& l, int caseNo, const std::vector<std::string>& all,
               const std::string& myFailure, double failMs);
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
  // --mem-alloc: each buffer's registration, and the communicator that holds it (a shrink
  // replaces comm_; the old one's registrations went with it).
  void* reg_[2] = {nullptr, nullptr};
  xcclComm_t regComm_[2] = {nullptr, nullptr};
  GuardedBuffer& buffer(int i, size_t bytes);
  std::vector<std::string> rankLines_;
  // --kill: this process's rank at the start, the original rank of each current rank, and
  // the cases begun so far (the victim's clock).
  int firstRank_;
  std::vector<int> members_;
  int casesBegun_ = 0;
};

}  // namespace xt
