// Pairs through a network plugin (transport/net/): connectPeers with XCCL_NET_PLUGIN=socket
// (the built-in table behind the ABI), bytes moved through the Connection in irregular
// windows (with tiny messages, so the stream is cut everywhere and short tails are joined),
// a wrong secret refused, and the loader's refusals naming the file and the symbol.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/device/device.h"
#include "collectives/transport/net/plugin.h"
#include "common/error.h"
#include "connect_util.h"
#include "test_util.h"

namespace {

using xccl::Deadline;

unsigned char patternByte(int from, int to, uint64_t i) {
  return static_cast<unsigned char>((i * 131 + static_cast<uint64_t>(from) * 7 + to) & 0xff);
}

// Every rank sends `bytes` to every peer and checks what it receives, windows of odd sizes.
void exchange(xccl::PeerSetup& s, int rank, int nranks, uint64_t bytes) {
  std::vector<uint64_t> sent(nranks, 0), got(nranks, 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  uint64_t step = 0;
  for (;;) {
    bool done = true;
    for (int p = 0; p < nranks; ++p) {
      if (p == rank) continue;
      xccl::Connection& c = *s.connections[p];
      c.progress();
      if (sent[p] < bytes) {
        void* w = nullptr;
        const size_t want = std::min<uint64_t>(bytes - sent[p], 1 + (step++ * 977) % 70001);
        const size_t n = c.reserveSend(&w, want);
        auto* out = static_cast<unsigned char*>(w);
        for (size_t i = 0; i < n; ++i) out[i] = patternByte(rank, p, sent[p] + i);
        if (n > 0) c.commitSend(n);
        sent[p] += n;
      }
      const void* r = nullptr;
      size_t n = std::min<uint64_t>(c.peekRecv(&r), bytes - got[p]);  // the next round's
      if (n > 0) {                                                    // bytes stay there
        n = std::min<size_t>(n, 1 + (step++ * 613) % 50000);
        const auto* in = static_cast<const unsigned char*>(r);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(in[i], patternByte(p, rank, got[p] + i))
              << "rank " << rank << " byte " << got[p] + i << " from " << p;
        }
        c.consumeRecv(n);
        got[p] += n;
      }
      ASSERT_EQ(c.peerGone(), "") << "rank " << rank << " from " << p;
      if (sent[p] < bytes || got[p] < bytes || c.sendPending()) done = false;
    }
    if (done) return;
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "rank " << rank << " stuck";
  }
}

void moveBytes(int nranks, uint64_t bytes) {
  auto store = xccl::makeMemoryStore();
  const std::string secret = xccl::randomSecret();
  xccl_test::runThreads(nranks, [&](int rank) {
    std::atomic<bool> abortFlag{false};
    xccl::PeerSetup s = xccl_test::connectEveryPeer(
        *store, rank, nranks, secret, xccl::getDevice(-1), Deadline::after(30000), abortFlag);
    for (int p = 0; p < nranks; ++p) {
      if (p == rank) continue;
      ASSERT_TRUE(s.connections[p]);
      EXPECT_STREQ(s.connections[p]->kind(), "NET");
      EXPECT_EQ(s.connections[p]->peer(), p);
    }
    for (uint64_t b : {uint64_t(0), uint64_t(1), uint64_t(1237), bytes}) {
      exchange(s, rank, nranks, b);
      if (testing::Test::HasFatalFailure()) return;
    }
    // Nobody closes before everybody has read everything.
    store->set("test/moved/" + std::to_string(rank), "1");
    for (int p = 0; p < nranks; ++p) {
      store->get("test/moved/" + std::to_string(p), Deadline::after(30000));
    }
  });
}

TEST(NetPlugin, SocketTableMovesEveryByteInOrder) {
  xccl_test::ScopedEnv plugin("XCCL_NET_PLUGIN", "socket");
  xccl_test::ScopedEnv noShm("XCCL_SHM_DISABLE", "1");
  moveBytes(3, (4u << 20) + 48);
}

// 1 KiB messages and 4 KiB of buffering: every window is cut, tails are joined.
TEST(NetPlugin, TinyMessagesCutTheStreamAnywhere) {
  xccl_test::ScopedEnv plugin("XCCL_NET_PLUGIN", "socket");
  xccl_test::ScopedEnv noShm("XCCL_SHM_DISABLE", "1");
  xccl_test::ScopedEnv chunk("XCCL_NET_CHUNK", "1024");
  xccl_test::ScopedEnv buff("XCCL_NET_BUFFSIZE", "4096");
  moveBytes(2, (1u << 20) + 17);
}

TEST(NetPlugin, AWrongSecretIsRefused) {
  xccl_test::ScopedEnv plugin("XCCL_NET_PLUGIN", "socket");
  xccl_test::ScopedEnv noShm("XCCL_SHM_DISABLE", "1");
  auto store = xccl::makeMemoryStore();
  const std::vector<std::string> errors = xccl_test::connectWithDifferentSecrets(*store, 3000);
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("pairs not made"), std::string::npos) << e;
  }
}

TEST(NetPlugin, LoaderNamesTheMissingFileAndTheMissingSymbol) {
  try {
    xccl::net::loadPlugin("/nonexistent/libxccl-net-x.so");
    FAIL() << "loaded a file that does not exist";
  } catch (const xccl::InvalidUsage& e) {
    EXPECT_NE(std::string(e.what()).find("cannot load '/nonexistent/libxccl-net-x.so'"),
              std::string::npos)
        << e.what();
  }
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&strlen), &info), 0);
  ASSERT_NE(info.dli_fname, nullptr);
  try {
    xccl::net::loadPlugin(info.dli_fname);  // libc: a library, not a plugin
    FAIL() << "took " << info.dli_fname << " for a plugin";
  } catch (const xccl::InvalidUsage& e) {
    EXPECT_NE(std::string(e.what()).find("has no symbol xcclNetPlugin_v1"), std::string::npos)
        << e.what();
  }
  EXPECT_STREQ(xccl::net::builtinSocketNet()->name, "socket");
}

}  // namespace
