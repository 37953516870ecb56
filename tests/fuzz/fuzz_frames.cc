// The progress engine reading a peer's byte stream (algorithms/exchange_progress.cc: frame headers,
// payloads, pads, abort frames, peer-read frames and their references), from any bytes.
// Rank 1 of 2 posts a receive, a reducing receive, a receive-from-any, or (mode 3) a receive
// on an xdev engine whose peer may send peer-read frames: references to xdev buffers, which a
// mutated input turns into references to anything; the peer's "stream" is the rest of the
// input, after which the peer has gone. wait() must complete or throw (bad frame, mismatch,
// bad reference, peer gone, timeout), never crash, hang or read outside the posted buffers.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "collectives/algorithms/exchange.h"
#include "collectives/device/device.h"
#include "common/error.h"
#include "fuzz.h"
#include "xdev_runtime.h"

namespace {

// The peer: everything it will ever send is `in`; what we send goes nowhere.
class FakeConnection : public xccl::Connection {
 public:
  explicit FakeConnection(std::string in) : in_(std::move(in)), sink_(1 << 16, '\0') {}
  size_t reserveSend(void** window, size_t want) override {
    *window = &sink_[0];
    return std::min(want, sink_.size());
  }
  void commitSend(size_t) override {}
  size_t peekRecv(const void** window) override {
    *window = in_.data() + pos_;
    return in_.size() - pos_;
  }
  void consumeRecv(size_t bytes) override {
    if (bytes > in_.size() - pos_) __builtin_trap();  // the engine consumed what it never saw
    pos_ += bytes;
  }
  bool progress() override { return false; }
  std::string peerGone() override { return "ended (fuzz input exhausted)"; }
  void close() override {}
  const char* kind() const override { return "SHM"; }
  int peer() const override { return 0; }
  // The peer is this very process (its xdev buffers are the seeds' references).
  bool peerReads() const override { return true; }
  int peerPid() const override { return static_cast<int>(getpid()); }

 private:
  std::string in_;
  std::string sink_;
  size_t pos_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool once = [] {
    setenv("XCCL_ALIVE_CHECK_US", "0", 1);  // notice the departed peer at once
    return true;
  }();
  (void)once;
  if (size < 2) return 0;
  const int mode = data[0] % 4;
  const size_t count = 1 + data[1] % 64;  // float32 elements posted
  FakeConnection conn(std::string(reinterpret_cast<const char*>(data) + 2, size - 2));
  std::atomic<bool> abortFlag{false};
  xccl::Exchange ex(1, 2, xccl::getDevice(mode == 3 ? "xdev" : "host", 0), {&conn, nullptr}, {0, 1},
                    abortFlag);
  xccl::CollArgs args;
  args.type = mode == 2 ? xccl::CollType::kRecvAny : xccl::CollType::kAllReduce;
  args.count = count;
  ex.beginOp(xccl::signatureOf(args), mode == 2 ? 0 : 7, xccl::Deadline::after(2000));
  std::vector<float> dst(count + 16, 0.0f), local(count, 1.0f);
  const float guard = 12345.0f;
  for (size_t i = count; i < dst.size(); ++i) dst[i] = guard;
  int any = -1;
  try {
    if (mode == 0 || mode == 3) ex.recv(0, dst.data(), count * sizeof(float));
    if (mode == 1) ex.recvReduce(0, dst.data(), local.data(), count, xcclFloat32, xcclSum);
    if (mode == 2) ex.recvAny(dst.data(), count * sizeof(float), &any);
    ex.wait();
  } catch (const xccl::Error&) {
  }
  for (size_t i = count; i < dst.size(); ++i) {
    if (dst[i] != guard) __builtin_trap();  // written past the posted buffer
  }
  return 0;
}

std::vector<std::string> xcclFuzzSeeds() {
  // Real streams: what rank 0's engine sends for the same calls, captured.
  class Capture : public xccl::Connection {
   public:
    std::string out;
    std::string buf = std::string(1 << 16, '\0');
    size_t reserveSend(void** w, size_t want) override {
      *w = &buf[0];
      return std::min(want, buf.size());
    }
    void commitSend(size_t bytes) override { out.append(buf.data(), bytes); }
    size_t peekRecv(const void**) override { return 0; }
    void consumeRecv(size_t) override {}
    bool progress() override { return false; }
    std::string peerGone() override { return ""; }
    void close() override {}
    const char* kind() const override { return "SHM"; }
    int peer() const override { return 1; }
    bool peerReads() const override { return true; }
    int peerPid() const override { return static_cast<int>(getpid()); }
  };
  std::vector<std::string> seeds;
  // Mode 3: peer-read frames naming xdev buffers of this process (kept for the whole run).
  setenv("XCCL_PEER_READ_MIN", "4", 1);
  for (size_t count : {size_t{1}, size_t{16}, size_t{64}}) {
    static std::vector<void*> buffers;
    void* src = nullptr;
    if (xdevMalloc(&src, count * sizeof(float)) != xdevSuccess) break;
    buffers.push_back(src);
    for (size_t i = 0; i < count; ++i) static_cast<float*>(src)[i] = 1.5f;
    Capture cap;
    std::atomic<bool> abortFlag{false};
    xccl::Exchange ex(0, 2, xccl::getDevice("xdev", 0), {nullptr, &cap}, {0, 1}, abortFlag);
    xccl::CollArgs args;
    args.count = count;
    ex.beginOp(xccl::signatureOf(args), 7, xccl::Deadline::after(200));
    ex.send(1, src, count * sizeof(float));
    try {
      ex.wait();  // never read by a peer: times out once the frame is out
    } catch (const xccl::Error&) {
    }
    std::string head(2, '\0');
    head[0] = 3;
    head[1] = static_cast<char>(count - 1);
    seeds.push_back(head + cap.out);
  }
  unsetenv("XCCL_PEER_READ_MIN");
  for (int mode = 0; mode < 3; ++mode) {
    for (size_t count : {size_t{1}, size_t{5}, size_t{16}}) {
      Capture cap;
      std::atomic<bool> abortFlag{false};
      xccl::Exchange ex(0, 2, xccl::getDevice("host", 0), {nullptr, &cap}, {0, 1}, abortFlag);
      xccl::CollArgs args;
      args.type = mode == 2 ? xccl::CollType::kSend : xccl::CollType::kAllReduce;
      args.count = count;
      ex.beginOp(xccl::signatureOf(args), mode == 2 ? 0 : 7, xccl::Deadline::after(2000));
      std::vector<float> src(count, 2.5f);
      if (mode == 2) {
        xccl::CollArgs recvSide = args;
        recvSide.type = xccl::CollType::kRecvAny;
        ex.setSignature(xccl::signatureOf(recvSide));
      }
      ex.send(1, src.data(), count * sizeof(float));
      ex.wait();
      std::string head(2, '\0');
      head[0] = static_cast<char>(mode);
      head[1] = static_cast<char>(count - 1);
      seeds.push_back(head + cap.out);
    }
  }
  return seeds;
}
