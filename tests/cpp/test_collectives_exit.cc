// The engine's rule for a peer that leaves: what it sent before leaving is consumed first,
// and its departure fails the operation only if something is still owed across the link.
// Deterministic: the peer's side is recorded from a real Exchange into memory and replayed
// through a connection whose peer has already left, so no timing decides the outcome.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithms/exchange.h"
#include "collectives/device/device.h"
#include "common/error.h"

namespace {

using xccl::CollType;
using xccl::Deadline;
using xccl::Exchange;

// A connection to a peer that already left: every byte sent to it is taken (and kept in
// `sent`), and it delivers exactly the bytes in `incoming`, then nothing more.
class DepartedPeer : public xccl::Connection {
 public:
  DepartedPeer(int peer, std::string incoming) : peer_(peer), in_(std::move(incoming)) {
    out_.resize(1 << 16);
  }
  size_t reserveSend(void** window, size_t want) override {
    *window = out_.data();
    return std::min(want, out_.size());
  }
  void commitSend(size_t bytes) override { sent.append(out_.data(), bytes); }
  size_t peekRecv(const void** window) override {
    *window = in_.data() + pos_;
    return in_.size() - pos_;
  }
  void consumeRecv(size_t bytes) override { pos_ += bytes; }
  bool progress() override { return false; }
  std::string peerGone() override { return gone ? "closed its end" : ""; }
  void close() override {}
  const char* kind() const override { return "TEST"; }
  int peer() const override { return peer_; }

  std::string sent;
  bool gone = true;

 private:
  int peer_;
  std::string in_;
  std::vector<char> out_;
  size_t pos_ = 0;
};

xccl::OpSignature barrierCall() {
  xccl::CollArgs a;
  a.type = CollType::kBarrier;
  return xccl::signatureOf(a);
}

// What rank 1 sends to rank 0 in one barrier round (recorded from a real Exchange).
std::string recordPeerFrames(size_t bytes) {
  std::atomic<bool> abortFlag{false};
  DepartedPeer sink(0, "");
  sink.gone = false;
  Exchange ex(1, 2, xccl::getDevice(-1), {&sink, nullptr}, {0, 1}, abortFlag);
  std::vector<char> payload(bytes, 7);
  ex.beginOp(barrierCall(), 1, Deadline::after(2000));
  ex.send(0, payload.data(), bytes);
  ex.wait();
  return sink.sent;
}

void exchangeWithDepartedPeer(const std::string& incoming, size_t bytes) {
  std::atomic<bool> abortFlag{false};
  DepartedPeer peer(1, incoming);
  Exchange ex(0, 2, xccl::getDevice(-1), {nullptr, &peer}, {0, 1}, abortFlag);
  std::vector<char> out(bytes, 1), in(bytes, 0);
  ex.beginOp(barrierCall(), 1, Deadline::after(2000));
  ex.send(1, out.data(), bytes);
  ex.recv(1, in.data(), bytes);
  ex.wait();
  EXPECT_TRUE(std::all_of(in.begin(), in.end(), [](char c) { return c == 7; }));
}

TEST(DepartedPeer, EverythingItSentBeforeLeavingCompletesTheOperation) {
  for (size_t bytes : {0, 1, 63, 64, 1000, 300000}) {
    SCOPED_TRACE(bytes);
    EXPECT_NO_THROW(exchangeWithDepartedPeer(recordPeerFrames(bytes), bytes));
  }
}

TEST(DepartedPeer, LeavingWithOurMessageUnsentFailsNamingThePeer) {
  for (size_t cut : {0, 10, 64, 100}) {  // nothing, half a header, a header, part payload
    SCOPED_TRACE(cut);
    std::string frames = recordPeerFrames(200).substr(0, cut);
    try {
      exchangeWithDepartedPeer(frames, 200);
      ADD_FAILURE() << "a peer that left owing bytes did not fail the operation";
    } catch (const xccl::RemoteError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("connection to rank 1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("closed its end"), std::string::npos) << msg;
      EXPECT_NE(msg.find("barrier()"), std::string::npos) << msg;
    }
  }
}

}  // namespace
