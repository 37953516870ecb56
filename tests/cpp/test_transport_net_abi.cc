// The network plugin ABI (xccl_net.h) exercised through the table only, so that any
// xcclNet_v1_t passes the same suite: the libfabric plugin loaded with dlopen from
// XCCL_NET_LIBFABRIC_PATH, and (one row in kNets) the built-in socket table. The cases run
// their peers as two forked worker processes; net_abi_harness.h has how, and the helpers.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collectives/transport/net/plugin.h"
#include "net_abi_harness.h"
#include "xccl_net.h"

namespace xccl_net_abi_test {
namespace {

const NetCase kNets[] = {
    {"libfabric", libfabricTable},
    {"socket", [](std::string*) { return xccl::net::builtinSocketNet(); }},
};

// ---- the cases ----

// Both directions connect at once; each side says hello through registered buffers.
TEST_P(NetAbi, ConnectBothWaysAndHello) {
  auto side = [](Worker& w) {
    startNet(w);
    char mine[XCCL_NET_HANDLE_MAXSIZE], theirs[XCCL_NET_HANDLE_MAXSIZE];
    void* listen = listenAndSwap(w, mine, theirs);
    void *send = nullptr, *recv = nullptr;
    connectAccept(w.net, theirs, &send, listen, &recv);

    char out[64], in[64];
    memset(in, 0, sizeof(in));
    int n = snprintf(out, sizeof(out), "hello from %s", gRole) + 1;
    void *mhOut = nullptr, *mhIn = nullptr;
    WORKER_OK(w.net->regMr(send, out, sizeof(out), XCCL_NET_PTR_HOST, &mhOut));
    WORKER_OK(w.net->regMr(recv, in, sizeof(in), XCCL_NET_PTR_HOST, &mhIn));
    WORKER_CHECK(mhOut != nullptr && mhIn != nullptr, "regMr gave a NULL handle");
    void* rr = postRecv(w.net, recv, in, sizeof(in), mhIn);
    void* sr = postSend(w.net, send, out, static_cast<size_t>(n), mhOut);
    size_t got = 0, sent = 0;
    WORKER_OK(waitReq(w.net, sr, &sent, 20));
    WORKER_OK(waitReq(w.net, rr, &got, 20));
    char expect[64];
    int m = snprintf(expect, sizeof(expect), "hello from %s", gRole[0] == 'A' ? "B" : "A") + 1;
    WORKER_CHECK(sent == static_cast<size_t>(n), "send reported %zu bytes, not %d", sent, n);
    WORKER_CHECK(got == static_cast<size_t>(m), "received %zu bytes, expected %d", got, m);
    WORKER_CHECK(strcmp(in, expect) == 0, "received \"%s\"", in);
    w.barrier();  // the peer has its hello before anything closes
    WORKER_OK(w.net->deregMr(send, mhOut));
    WORKER_OK(w.net->deregMr(recv, mhIn));
    WORKER_OK(w.net->closeSend(send));
    WORKER_OK(w.net->closeRecv(recv));
    WORKER_OK(w.net->closeListen(listen));
  };
  runPair(GetParam(), side, side, 60);
}

// 1000 messages B -> A of sizes from 0 B to 8 MiB (or maxMessageBytes), several receives and
// sends posted ahead: every one arrives in order, with its exact size and bytes.
TEST_P(NetAbi, ThousandMessagesInOrder) {
  constexpr int kCount = 1000;
  constexpr int kDepth = 8;
  // Message i's size: mostly small and medium, every 50th the largest.
  auto sizeOf = [](int i, size_t maxBytes) -> size_t {
    static const size_t kSizes[] = {0, 1, 31, 4096, 65537, 1 << 20};
    size_t s = (i % 50 == 49) ? maxBytes : kSizes[i % 6];
    return std::min(s, maxBytes);
  };
  auto receiver = [&](Worker& w) {
    xcclNetProperties_v1_t props = startNet(w);
    size_t maxBytes = std::min<size_t>(props.maxMessageBytes, 8u << 20);
    char mine[XCCL_NET_HANDLE_MAXSIZE], theirs[XCCL_NET_HANDLE_MAXSIZE];
    void* listen = listenAndSwap(w, mine, theirs);
    void* recv = nullptr;
    connectAccept(w.net, nullptr, nullptr, listen, &recv);
    std::vector<std::vector<uint8_t>> bufs(kDepth, std::vector<uint8_t>(maxBytes));
    std::vector<void*> mh(kDepth), reqs(kDepth);
    for (int k = 0; k < kDepth; k++)
      WORKER_OK(w.net->regMr(recv, bufs[k].data(), maxBytes, XCCL_NET_PTR_HOST, &mh[k]));
    for (int i = 0; i < kDepth; i++)
      reqs[i] = postRecv(w.net, recv, bufs[i].data(), maxBytes, mh[i]);
    for (int i = 0; i < kCount; i++) {
      int k = i % kDepth;
      size_t got = 0;
      WORKER_OK(waitReq(w.net, reqs[k], &got, 60));
      size_t want = sizeOf(i, maxBytes), bad = 0;
      WORKER_CHECK(got == want, "message %d: %zu bytes, expected %zu", i, got, want);
      WORKER_CHECK(matches(bufs[k].data(), static_cast<uint64_t>(i), got, &bad),
                   "message %d: byte %zu differs", i, bad);
      if (i + kDepth < kCount) reqs[k] = postRecv(w.net, recv, bufs[k].data(), maxBytes, mh[k]);
    }
    w.barrier();
    for (int k = 0; k < kDepth; k++) WORKER_OK(w.net->deregMr(recv, mh[k]));
    WORKER_OK(w.net->closeRecv(recv));
    WORKER_OK(w.net->closeListen(listen));
  };
  auto sender = [&](Worker& w) {
    xcclNetProperties_v1_t props = startNet(w);
    size_t maxBytes = std::min<size_t>(props.maxMessageBytes, 8u << 20);
    char mine[XCCL_NET_HANDLE_MAXSIZE], theirs[XCCL_NET_HANDLE_MAXSIZE];
    void* listen = listenAndSwap(w, mine, theirs);
    void* send = nullptr;
    connectAccept(w.net, theirs, &send, nullptr, nullptr);
    std::vector<std::vector<uint8_t>> bufs(kDepth, std::vector<uint8_t>(maxBytes));
    std::vector<void*> mh(kDepth), reqs(kDepth, nullptr);
    for (int k = 0; k < kDepth; k++)
      WORKER_OK(w.net->regMr(send, bufs[k].data(), maxBytes, XCCL_NET_PTR_HOST, &mh[k]));
    for (int i = 0; i < kCount + kDepth; i++) {
      int k = i % kDepth;
      if (reqs[k] != nullptr) {  // message i - kDepth's buffer is free once its send is done
        size_t sent = 0;
        WORKER_OK(waitReq(w.net, reqs[k], &sent, 60));
        WORKER_CHECK(sent == sizeOf(i - kDepth, maxBytes), "send %d reported %zu bytes", i - kDepth,
                     sent);
        reqs[k] = nullptr;
      }
      if (i >= kCount) continue;
      size_t n = sizeOf(i, maxBytes);
      fill(bufs[k].data(), static_cast<uint64_t>(i), n);
      reqs[k] = postSend(w.net, send, bufs[k].data(), n, mh[k]);
    }
    w.barrier();
    for (int k = 0; k < kDepth; k++) WORKER_OK(w.net->deregMr(send, mh[k]));
    WORKER_OK(w.net->closeSend(send));
    WORKER_OK(w.net->closeListen(listen));
  };
  runPair(GetParam(), receiver, sender, 240);
}

// A receive larger than the message takes it and reports the message's size.
TEST_P(NetAbi, LargerReceiveReportsMessageSize) {
  static const size_t kSizes[] = {100, 0, 4096, 1};
  auto receiver = [](Worker& w) {
    startNet(w);
    char mine[XCCL_NET_HANDLE_MAXSIZE], theirs[XCCL_NET_HANDLE_MAXSIZE];
    void* listen = listenAndSwap(w, mine, theirs);
    void* recv = nullptr;
    connectAccept(w.net, nullptr, nullptr, listen, &recv);
    std::vector<uint8_t> buf(64 << 10);
    void* mh = nullptr;
    WORKER_OK(w.net->regMr(recv, buf.data(), buf.size(), XCCL_NET_PTR_HOST, &mh));
    for (size_t i = 0; i < sizeof(kSizes) / sizeof(kSizes[0]); i++) {
      void* r = postRecv(w.net, recv, buf.data(), buf.size(), mh);
      size_t got = 12345, bad = 0;
      WORKER_OK(waitReq(w.net, r, &got, 20));
      WORKER_CHECK(got == kSizes[i], "message %zu: reported %zu bytes, sent %zu", i, got,
                   kSizes[i]);
      WORKER_CHECK(matches(buf.data(), i, got, &bad), "message %zu: byte %zu differs", i, bad);
    }
    w.barrier();
    WORKER_OK(w.net->deregMr(recv, mh));
    WORKER_OK(w.net->closeRecv(recv));
    WORKER_OK(w.net->closeListen(listen));
  };
  auto sender = [](Worker& w) {
    startNet(w);
    char mine[XCCL_NET_HANDLE_MAXSIZE], theirs[XCCL_NET_HANDLE_MAXSIZE];
    void* listen = listenAndSwap(w, mine, theirs);
    void* send = nullptr;
    connectAccept(w.net, theirs, &send, nullptr, nullptr);
    std::vector<uint8_t> buf(4096);
    void* mh = nullptr;
    WORKER_OK(w.net->regMr(send, buf.data(), buf.size(), XCCL_NET_PTR_HOST, &mh));
    for (size_t i = 0; i < sizeof(kSizes) / sizeof(kSizes[0]); i++) {
      fill(buf.data(), i, kSizes[i]);
      size_t sent = 0;
      WORKER_OK(waitReq(w.net, postSend(w.net, send, buf.data(), kSizes[i], mh), &sent, 20));
      WORKER_CHECK(sent == kSizes[i], "send reported %zu bytes, not %zu", sent, kSizes[i]);
    }
    w.barrier();
    WORKER_OK(w.net->deregMr(send, mh));
    WORKER_OK(w.net->closeSend(send));
    WORKER_OK(w.net->closeListen(listen));
  };
  runPair(GetParam(), receiver, sender, 60);
}

// Four connections A -> B to one listener, opened interleaved from one thread, used
// interleaved by A's thread and each received by its own thread in B: every stream stays in
// order and apart. (Which accepted comm is which sender's, B learns from a first hello.)
TEST_P(NetAbi, ManyPairsInterleaved) {
  constexpr int kPairs = 4;
  constexpr int kMsgs = 200;
  constexpr size_t kMax = 70000;
  // Message i of stream k: a header {k, i} and a pattern; sizes vary per stream and message.
  auto sizeOf = [](int k, int i) -> size_t {
    return 8 + (static_cast<size_t>(k) * 9973 + static_cast<size_t>(i) * 613) % 60000;
  };
  auto sender = [&](Worker& w) {
    startNet(w);
    char theirs[XCCL_NET_HANDLE_MAXSIZE];
    w.get(theirs, sizeof(theirs));
    void* send[kPairs] = {};
    spin(
        [&] {
          bool all = true;
          for (int k = 0; k < kPairs; k++) {
            if (send[k] == nullptr) WORKER_OK(w.net->connect(0, theirs, &send[k]));
            all = all && send[k] != nullptr;
          }
          return all;
        },
        30, "four connects");
    for (int k = 0; k < kPairs; k++) {
      uint32_t hello = static_cast<uint32_t>(k);
      void* mh = regHost(w.net, send[k], &hello, sizeof(hello));
      WORKER_OK(waitReq(w.net, postSend(w.net, send[k], &hello, sizeof(hello), mh), nullptr, 20));
      WORKER_OK(w.net->deregMr(send[k], mh));
    }
    // Two sends in flight per stream; streams round-robin.
    std::vector<std::vector<uint8_t>> bufs(kPairs * 2, std::vector<uint8_t>(kMax));
    std::vector<void*> reqs(kPairs * 2, nullptr), mhs(kPairs * 2);
    for (int slot = 0; slot < kPairs * 2; slot++)
      mhs[slot] = regHost(w.net, send[slot / 2], bufs[slot].data(), kMax);
    for (int i = 0; i < kMsgs + 2; i++) {
      for (int k = 0; k < kPairs; k++) {
        int slot = k * 2 + i % 2;
        if (reqs[slot] != nullptr) WORKER_OK(waitReq(w.net, reqs[slot], nullptr, 30));
        reqs[slot] = nullptr;
        if (i >= kMsgs) continue;
        size_t n = sizeOf(k, i);
        uint8_t* p = bufs[slot].data();
        fill(p, static_cast<uint64_t>(k * kMsgs + i), n);
        uint32_t hdr[2] = {static_cast<uint32_t>(k), static_cast<uint32_t>(i)};
        memcpy(p, hdr, sizeof(hdr));
        reqs[slot] = postSend(w.net, send[k], p, n, mhs[slot]);
      }
    }
    w.barrier();
    for (int k = 0; k < kPairs; k++) WORKER_OK(w.net->closeSend(send[k]));
  };
  auto receiver = [&](Worker& w) {
    startNet(w);
    char mine[XCCL_NET_HANDLE_MAXSIZE];
    void* listen = nullptr;
    WORKER_OK(w.net->listen(0, mine, &listen));
    w.put(mine, sizeof(mine));
    void* recv[kPairs] = {};
    for (int k = 0; k < kPairs; k++) connectAccept(w.net, nullptr, nullptr, listen, &recv[k]);
    void* byStream[kPairs] = {};
    for (int k = 0; k < kPairs; k++) {
      uint32_t hello = 99;
      size_t got = 0;
      void* mh = regHost(w.net, recv[k], &hello, sizeof(hello));
      WORKER_OK(waitReq(w.net, postRecv(w.net, recv[k], &hello, sizeof(hello), mh), &got, 20));
      WORKER_OK(w.net->deregMr(recv[k], mh));
      WORKER_CHECK(got == sizeof(hello) && hello < kPairs && byStream[hello] == nullptr,
                   "bad hello %u (%zu bytes)", hello, got);
      byStream[hello] = recv[k];
    }
    // One thread per stream, as libxccl drives different comms from different threads.
    std::vector<std::thread> threads;
    for (int k = 0; k < kPairs; k++) {
      threads.emplace_back([&, k] {
        std::vector<std::vector<uint8_t>> bufs(2, std::vector<uint8_t>(kMax));
        std::vector<uint8_t> expect;
        void* mh[2] = {regHost(w.net, byStream[k], bufs[0].data(), kMax),
                       regHost(w.net, byStream[k], bufs[1].data(), kMax)};
        void* reqs[2] = {postRecv(w.net, byStream[k], bufs[0].data(), kMax, mh[0]),
                         postRecv(w.net, byStream[k], bufs[1].data(), kMax, mh[1])};
        for (int i = 0; i < kMsgs; i++) {
          size_t got = 0, bad = 0;
          WORKER_OK(waitReq(w.net, reqs[i % 2], &got, 60));
          uint8_t* p = bufs[i % 2].data();
          uint32_t hdr[2];
          memcpy(hdr, p, sizeof(hdr));
          WORKER_CHECK(hdr[0] == static_cast<uint32_t>(k) && hdr[1] == static_cast<uint32_t>(i),
                       "stream %d message %d: got stream %u message %u", k, i, hdr[0], hdr[1]);
          WORKER_CHECK(got == sizeOf(k, i), "stream %d message %d: %zu bytes", k, i, got);
          // The payload after the header is the sender's pattern.
          expect.resize(got);
          fill(expect.data(), static_cast<uint64_t>(k * kMsgs + i), got);
          auto diff = std::mismatch(p + 8, p + got, expect.data() + 8);
          bad = static_cast<size_t>(diff.first - p);
          WORKER_CHECK(diff.first == p + got, "stream %d message %d: byte %zu differs", k, i, bad);
          if (i + 2 < kMsgs)
            reqs[i % 2] = postRecv(w.net, byStream[k], bufs[i % 2].data(), kMax, mh[i % 2]);
        }
      });
    }
    for (auto& t : threads) t.join();
    w.barrier();
    for (int k = 0; k < kPairs; k++) WORKER_OK(w.net->closeRecv(recv[k]));
    WORKER_OK(w.net->closeListen(listen));
  };
  runPair(GetParam(), sender, receiver, 120);
}

// The peer is SIGKILLed while A waits in a receive from it (and, on the other pair, has a
// large send to it in flight): test returns a non-success result within a few seconds.
TEST_P(NetAbi, PeerKilledWhileReceiving) {
  constexpr double kDetectSeconds = 10;
  auto a = [&](Worker& w) {
    startNet(w);
    char mine[XCCL_NET_HANDLE_MAXSIZE], theirs[XCCL_NET_HANDLE_MAXSIZE];
    void* listen = listenAndSwap(w, mine, theirs);
    void *send = nullptr, *recv = nullptr;
    connectAccept(w.net, theirs, &send, listen, &recv);
    // One message each way, so both pairs are in use before the peer dies.
    char in[16] = {}, out[16] = "ping";
    void* mhIn = regHost(w.net, recv, in, sizeof(in));
    void* mhOut = regHost(w.net, send, out, sizeof(out));
    void* rr = postRecv(w.net, recv, in, sizeof(in), mhIn);
    WORKER_OK(waitReq(w.net, postSend(w.net, send, out, sizeof(out), mhOut), nullptr, 20));
    WORKER_OK(waitReq(w.net, rr, nullptr, 20));
    rr = postRecv(w.net, recv, in, sizeof(in), mhIn);
    // Larger than any socket buffer, so it cannot complete while B does not receive.
    std::vector<uint8_t> big(32 << 20, 1);
    void* sr =
        postSend(w.net, send, big.data(), big.size(), regHost(w.net, send, big.data(), big.size()));
    w.tellParent();  // the parent kills B now
    double t0 = nowSec();
    xcclResult_t recvRes = xcclSuccess, sendRes = xcclSuccess;
    bool recvDone = false, sendDone = false;
    while ((!recvDone || !sendDone) && nowSec() - t0 < kDetectSeconds) {
      int done = 0;
      if (!recvDone) {
        recvRes = w.net->test(rr, &done, nullptr);
        recvDone = recvRes != xcclSuccess || done;
        if (recvDone)
          fprintf(stderr, "[worker A] the receive ended after %.2f s with result %d\n",
                  nowSec() - t0, static_cast<int>(recvRes));
      }
      if (!sendDone) {
        sendRes = w.net->test(sr, &done, nullptr);
        sendDone = sendRes != xcclSuccess || done;
        if (sendDone)
          fprintf(stderr, "[worker A] the 32 MiB send ended after %.2f s with result %d\n",
                  nowSec() - t0, static_cast<int>(sendRes));
      }
    }
    WORKER_CHECK(recvDone, "the receive from the killed peer still pending after %.0f s",
                 kDetectSeconds);
    WORKER_CHECK(recvRes != xcclSuccess, "the receive from the killed peer reported success");
    WORKER_CHECK(sendDone, "the send to the killed peer still pending after %.0f s",
                 kDetectSeconds);
    WORKER_CHECK(sendRes != xcclSuccess, "the 32 MiB send to the killed peer reported success");
    // Closing after the peer died neither blocks nor fails.
    WORKER_OK(w.net->closeSend(send));
    WORKER_OK(w.net->closeRecv(recv));
    WORKER_OK(w.net->closeListen(listen));
  };
  auto b = [](Worker& w) {
    startNet(w);
    char mine[XCCL_NET_HANDLE_MAXSIZE], theirs[XCCL_NET_HANDLE_MAXSIZE];
    void* listen = listenAndSwap(w, mine, theirs);
    void *send = nullptr, *recv = nullptr;
    connectAccept(w.net, theirs, &send, listen, &recv);
    char in[16] = {}, out[16] = "pong";
    void* mhIn = regHost(w.net, recv, in, sizeof(in));
    void* rr = postRecv(w.net, recv, in, sizeof(in), mhIn);
    WORKER_OK(waitReq(
        w.net, postSend(w.net, send, out, sizeof(out), regHost(w.net, send, out, sizeof(out))),
        nullptr, 20));
    WORKER_OK(waitReq(w.net, rr, nullptr, 20));
    // Wait to be killed with nothing posted: a receive posted here could take A's 32 MiB
    // send (truncated, or whole once large enough), and A's send must stay in flight. Not
    // progressing also keeps the provider from completing it (its socket buffers fill).
    for (;;) pause();
  };
  runPair(
      GetParam(), a, b, 60,
      [](pid_t, pid_t pb, int fromA) {
        ASSERT_TRUE(readByte(fromA, 40)) << "worker A never posted its receive";
        kill(pb, SIGKILL);
      },
      /*bMayDie=*/true);
}

// Closing communicators with requests still posted neither blocks nor breaks the other pairs:
// A closes a receive comm with three receives posted, B a send comm with a 32 MiB send that
// A never receives; the second pair between them keeps working.
TEST_P(NetAbi, CloseWithPostedRequests) {
  constexpr double kCloseLimit = 1.0;  // "never blocks": far below any network timeout
  auto a = [&](Worker& w) {
    startNet(w);
    char mine[XCCL_NET_HANDLE_MAXSIZE];
    void* listen = nullptr;
    WORKER_OK(w.net->listen(0, mine, &listen));
    w.put(mine, sizeof(mine));
    void* recv[2] = {};
    for (auto& r : recv) connectAccept(w.net, nullptr, nullptr, listen, &r);
    // Which is which: B says its index first on each.
    void* byIndex[2] = {};
    for (void* r : recv) {
      uint32_t k = 9;
      void* mh = regHost(w.net, r, &k, sizeof(k));
      WORKER_OK(waitReq(w.net, postRecv(w.net, r, &k, sizeof(k), mh), nullptr, 20));
      WORKER_CHECK(k < 2 && byIndex[k] == nullptr, "bad hello %u", k);
      byIndex[k] = r;
    }
    std::vector<uint8_t> bufs(3 * 4096);
    void* mh = regHost(w.net, byIndex[0], bufs.data(), bufs.size());
    for (int i = 0; i < 3; i++) postRecv(w.net, byIndex[0], bufs.data() + i * 4096, 4096, mh);
    double t0 = nowSec();
    // Abandoned requests: success, or in progress (their memory is then kept: `bufs` lives
    // until the worker exits, as the ABI asks).
    xcclResult_t rc = w.net->closeRecv(byIndex[0]);
    WORKER_CHECK(rc == xcclSuccess || rc == xcclInProgress, "closeRecv: result %d", rc);
    WORKER_CHECK(nowSec() - t0 < kCloseLimit, "closeRecv took %.2f s", nowSec() - t0);
    w.barrier();  // B closes its side now
    char in[32] = {};
    void* r = postRecv(w.net, byIndex[1], in, sizeof(in), regHost(w.net, byIndex[1], in, 32));
    size_t got = 0;
    WORKER_OK(waitReq(w.net, r, &got, 20));
    WORKER_CHECK(got == 6 && strcmp(in, "after") == 0, "got \"%s\" (%zu bytes)", in, got);
    w.barrier();
    WORKER_OK(w.net->closeRecv(byIndex[1]));
    WORKER_OK(w.net->closeListen(listen));
  };
  auto b = [&](Worker& w) {
    startNet(w);
    char theirs[XCCL_NET_HANDLE_MAXSIZE];
    w.get(theirs, sizeof(theirs));
    void* send[2] = {};
    for (auto& s : send) connectAccept(w.net, theirs, &s, nullptr, nullptr);
    uint32_t idx[2] = {0, 1};
    for (int k = 0; k < 2; k++) {
      void* mh = regHost(w.net, send[k], &idx[k], sizeof(idx[k]));
      WORKER_OK(waitReq(w.net, postSend(w.net, send[k], &idx[k], sizeof(idx[k]), mh), nullptr, 20));
    }
    w.barrier();
    // Kept until the worker exits: the close may leave the send with the provider.
    auto& big = *new std::vector<uint8_t>(32 << 20, 7);
    postSend(w.net, send[0], big.data(), big.size(),
             regHost(w.net, send[0], big.data(), big.size()));
    double t0 = nowSec();
    xcclResult_t rc = w.net->closeSend(send[0]);
    WORKER_CHECK(rc == xcclSuccess || rc == xcclInProgress, "closeSend: result %d", rc);
    WORKER_CHECK(nowSec() - t0 < kCloseLimit, "closeSend took %.2f s", nowSec() - t0);
    char out[32] = "after";
    void* mh = regHost(w.net, send[1], out, sizeof(out));
    WORKER_OK(waitReq(w.net, postSend(w.net, send[1], out, 6, mh), nullptr, 20));
    w.barrier();
    WORKER_OK(w.net->closeSend(send[1]));
  };
  runPair(GetParam(), a, b, 60);
}

// Bad calls are xcclInvalidArgument, never a crash or a comm. Only A works; B has nothing to
// do. A connects to its own listener for valid comms to misuse.
TEST_P(NetAbi, BadInputIsInvalidArgument) {
  auto a = [](Worker& w) {
    const xcclNet_v1_t* n = w.net;
    WORKER_OK(n->init(testLogger));
    WORKER_CHECK(n->devices(nullptr) == xcclInvalidArgument, "devices(NULL)");
    int ndev = 0;
    WORKER_OK(n->devices(&ndev));
    WORKER_CHECK(ndev >= 1, "no device");
    xcclNetProperties_v1_t props;
    WORKER_CHECK(n->getProperties(0, nullptr) == xcclInvalidArgument, "getProperties(0, NULL)");
    WORKER_CHECK(n->getProperties(-1, &props) == xcclInvalidArgument, "getProperties(-1)");
    WORKER_CHECK(n->getProperties(ndev, &props) == xcclInvalidArgument, "getProperties(ndev)");

    char h[XCCL_NET_HANDLE_MAXSIZE];
    void* listen = nullptr;
    WORKER_CHECK(n->listen(0, nullptr, &listen) == xcclInvalidArgument, "listen(handle NULL)");
    WORKER_CHECK(n->listen(0, h, nullptr) == xcclInvalidArgument, "listen(comm NULL)");
    WORKER_CHECK(n->listen(ndev, h, &listen) == xcclInvalidArgument, "listen(dev ndev)");
    WORKER_OK(n->listen(0, h, &listen));

    void* comm = nullptr;
    WORKER_CHECK(n->connect(0, nullptr, &comm) == xcclInvalidArgument, "connect(handle NULL)");
    WORKER_CHECK(n->connect(0, h, nullptr) == xcclInvalidArgument, "connect(comm NULL)");
    // Handles that are not this plugin's: a plugin must tell them apart (a magic) at once.
    char junk[XCCL_NET_HANDLE_MAXSIZE];
    for (int fillByte : {0x00, 0xa5, 0xff}) {
      memset(junk, fillByte, sizeof(junk));
      comm = nullptr;
      WORKER_CHECK(n->connect(0, junk, &comm) == xcclInvalidArgument && comm == nullptr,
                   "connect(handle of bytes %#x)", fillByte);
    }
    WORKER_CHECK(n->accept(nullptr, &comm) == xcclInvalidArgument, "accept(NULL)");
    WORKER_CHECK(n->accept(listen, nullptr) == xcclInvalidArgument, "accept(comm NULL)");

    void *send = nullptr, *recv = nullptr;
    connectAccept(n, h, &send, listen, &recv);
    char buf[64];
    void *mh = nullptr, *req = nullptr;
    WORKER_CHECK(n->regMr(nullptr, buf, sizeof(buf), XCCL_NET_PTR_HOST, &mh) == xcclInvalidArgument,
                 "regMr(comm NULL)");
    WORKER_CHECK(
        n->regMr(send, buf, sizeof(buf), XCCL_NET_PTR_HOST, nullptr) == xcclInvalidArgument,
        "regMr(mhandle NULL)");
    WORKER_CHECK(
        n->regMr(send, nullptr, sizeof(buf), XCCL_NET_PTR_HOST, &mh) == xcclInvalidArgument,
        "regMr(data NULL)");
    WORKER_CHECK(n->deregMr(send, nullptr) == xcclInvalidArgument, "deregMr(NULL)");
    void* mhS = regHost(n, send, buf, sizeof(buf));
    void* mhR = regHost(n, recv, buf, sizeof(buf));
    WORKER_CHECK(n->isend(nullptr, buf, 1, mhS, &req) == xcclInvalidArgument, "isend(NULL)");
    WORKER_CHECK(n->isend(send, buf, 1, mhS, nullptr) == xcclInvalidArgument,
                 "isend(request NULL)");
    WORKER_CHECK(n->isend(send, nullptr, 10, mhS, &req) == xcclInvalidArgument, "isend(data NULL)");
    WORKER_CHECK(n->irecv(nullptr, buf, 1, mhR, &req) == xcclInvalidArgument, "irecv(NULL)");
    WORKER_CHECK(n->irecv(recv, buf, 1, mhR, nullptr) == xcclInvalidArgument,
                 "irecv(request NULL)");
    WORKER_CHECK(n->irecv(recv, nullptr, 10, mhR, &req) == xcclInvalidArgument, "irecv(data NULL)");
    int done = 0;
    size_t size = 0;
    WORKER_CHECK(n->test(nullptr, &done, &size) == xcclInvalidArgument, "test(NULL)");
    WORKER_CHECK(n->closeSend(nullptr) == xcclInvalidArgument, "closeSend(NULL)");
    WORKER_CHECK(n->closeRecv(nullptr) == xcclInvalidArgument, "closeRecv(NULL)");
    WORKER_CHECK(n->closeListen(nullptr) == xcclInvalidArgument, "closeListen(NULL)");

    // The comms still work after all that.
    strcpy(buf, "still fine");
    char in[64] = {};
    void* rr = postRecv(n, recv, in, sizeof(in), regHost(n, recv, in, sizeof(in)));
    WORKER_OK(waitReq(n, postSend(n, send, buf, strlen(buf) + 1, mhS), nullptr, 20));
    size_t got = 0;
    WORKER_OK(waitReq(n, rr, &got, 20));
    WORKER_CHECK(got == strlen(buf) + 1 && strcmp(in, buf) == 0, "loopback message \"%s\"", in);
    WORKER_OK(n->closeSend(send));
    WORKER_OK(n->closeRecv(recv));
    WORKER_OK(n->closeListen(listen));
  };
  runPair(
      GetParam(), a, [](Worker&) {}, 60);
}

INSTANTIATE_TEST_SUITE_P(Nets, NetAbi, testing::ValuesIn(kNets),
                         [](const testing::TestParamInfo<NetCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace xccl_net_abi_test
