// Bootstrap tests: the in-memory and callback stores, PeerInfo wire format, secrets,
// and the unique-id store server (threads, processes, hostile clients).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <array>

#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/bootstrap/bootstrap_internal.h"
#include "collectives/transport/tcp/socket.h"
#include "common/auth.h"
#include "common/error.h"
#include "common/sha256.h"
#include "test_util.h"

namespace {

using xccl::Deadline;

TEST(MemoryStore, SetGetAndTimeout) {
  auto store = xccl::makeMemoryStore();
  store->set("a", "1");
  store->set("b", std::string("\0x\0", 3));
  EXPECT_EQ(store->get("a", Deadline::after(10)), "1");
  EXPECT_EQ(store->get("b", Deadline::after(10)), std::string("\0x\0", 3));
  store->set("a", "2");
  EXPECT_EQ(store->get("a", Deadline::after(10)), "2");
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(store->get("missing", Deadline::after(50)), xccl::Timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(45));
}

TEST(MemoryStore, GetWaitsForSetFromAnotherThread) {
  auto store = xccl::makeMemoryStore();
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    store->set("late", "here");
  });
  EXPECT_EQ(store->get("late", Deadline::after(5000)), "here");
  t.join();
}

TEST(CallbackStore, PrefixesKeysAndFetchesLargeValues) {
  xccl_test::MemoryStore backing;
  auto a = xccl::makeCallbackStore(*backing.c(), "pg0/");
  auto b = xccl::makeCallbackStore(*backing.c(), "pg1/");
  a->set("k", "from a");
  b->set("k", "from b");
  EXPECT_EQ(a->get("k", Deadline::after(100)), "from a");
  EXPECT_EQ(b->get("k", Deadline::after(100)), "from b");
  // Read through the raw C store: the prefix is really part of the key.
  char buf[16];
  size_t len = 0;
  ASSERT_EQ(backing.c()->get(backing.c()->ctx, "pg0/k", buf, sizeof(buf), &len, 0), 0);
  EXPECT_EQ(std::string(buf, len), "from a");

  std::string big(100000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  a->set("big", big);  // larger than the first read buffer: needs the retry path
  EXPECT_EQ(a->get("big", Deadline::after(100)), big);
  a->set("empty", "");
  EXPECT_EQ(a->get("empty", Deadline::after(100)), "");
  EXPECT_THROW(a->get("absent", Deadline::after(30)), xccl::Timeout);
}

TEST(CallbackStore, FailingSetIsAnIoError) {
  xcclStore_t broken{};
  broken.set = [](void*, const char*, const void*, size_t) { return 1; };
  broken.get = [](void*, const char*, void*, size_t, size_t*, int64_t) { return 1; };
  auto s = xccl::makeCallbackStore(broken, "x/");
  EXPECT_THROW(s->set("k", "v"), xccl::IoError);
  EXPECT_THROW(s->get("k", Deadline::after(10)), xccl::Timeout);  // 1: timed out
  broken.get = [](void*, const char*, void*, size_t, size_t*, int64_t) { return 2; };
  auto gone = xccl::makeCallbackStore(broken, "x/");
  EXPECT_THROW(gone->get("k", Deadline::after(10)), xccl::IoError);  // the store failed: at once
}

TEST(PeerInfo, ListsRoundTripAndRejectEveryTruncation) {
  const std::vector<std::string> records = {"XPI4a", "", std::string(1000, 'x')};
  const std::string wire = xccl::joinPeerRecords(records);
  EXPECT_EQ(xccl::splitPeerRecords(wire, 3), records);
  EXPECT_THROW(xccl::splitPeerRecords(wire, 4), xccl::RemoteError);  // another world size
  for (size_t n = 0; n < wire.size(); ++n) {
    EXPECT_THROW(xccl::splitPeerRecords(wire.substr(0, n), 3), xccl::RemoteError) << n;
  }
  EXPECT_THROW(xccl::splitPeerRecords(wire + "x", 3), xccl::RemoteError);
}

TEST(PeerInfo, RoundTripsAndRejectsEveryTruncation) {
  xccl::PeerInfo in{3,
                    4242,
                    "node-a/boot",
                    "host-a",
                    "host:0",
                    "10.1.2.3:5555",
                    5,
                    "host a\ndevices 8\n",
                    "10.1.2.3:6000 00ff",
                    "4242 9 1048576 8;4242 10"};
  in.cores = 16;
  std::string wire = xccl::serializePeerInfo(in, xccl::kPeerFlagNoShm);
  uint32_t flags = 0;
  xccl::PeerInfo out = xccl::parsePeerInfo(wire, &flags);
  EXPECT_EQ(out.cores, 16);
  EXPECT_EQ(out.rank, 3);
  EXPECT_EQ(out.pid, 4242);
  EXPECT_EQ(out.hostId, in.hostId);
  EXPECT_EQ(out.hostname, in.hostname);
  EXPECT_EQ(out.busId, in.busId);
  EXPECT_EQ(out.tcpAddr, in.tcpAddr);
  EXPECT_EQ(out.device, 5);
  EXPECT_EQ(out.topology, in.topology);
  EXPECT_EQ(out.service, in.service);
  EXPECT_EQ(out.shm, in.shm);
  EXPECT_EQ(flags, xccl::kPeerFlagNoShm);
  for (size_t n = 0; n < wire.size(); ++n) {
    EXPECT_THROW(xccl::parsePeerInfo(wire.substr(0, n)), xccl::RemoteError) << "length " << n;
  }
  EXPECT_THROW(xccl::parsePeerInfo(wire + "x"), xccl::RemoteError);
  std::string huge = wire;
  huge[20] = '\xff';  // first string length becomes enormous
  huge[21] = '\xff';
  EXPECT_THROW(xccl::parsePeerInfo(huge), xccl::RemoteError);
}

TEST(Secret, RandomHexAndDistinct) {
  std::string a = xccl::randomSecret(), b = xccl::randomSecret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(xccl::fromHex(a).size(), 32u);
  EXPECT_EQ(xccl::toHex(xccl::fromHex(a)), a);
  EXPECT_EQ(xccl::fromHex("zz"), "");
}

TEST(HostId, NodeIdEnvAndThreadOverride) {
  std::string real = xccl::localHostId();
  EXPECT_FALSE(real.empty());
  {
    xccl_test::ScopedEnv env("XCCL_NODE_ID", "fake-node");
    EXPECT_EQ(xccl::localHostId(), "fake-node");
    xccl::setThreadHostIdOverride("thread-node");
    EXPECT_EQ(xccl::localHostId(), "thread-node");
    xccl::setThreadHostIdOverride("");
    EXPECT_EQ(xccl::localHostId(), "fake-node");
  }
  EXPECT_EQ(xccl::localHostId(), real);
}

// ---- unique-id store server ----

xccl::net::SockAddr idAddress(const xcclUniqueId& id) {
  const auto* p = reinterpret_cast<const unsigned char*>(id.internal);
  return xccl::net::getIdAddr(p + 8, p + 48);
}

int rawConnect(const xccl::net::SockAddr& addr) {
  int fd = socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(connect(fd, addr.sa(), addr.len()), 0);
  return fd;
}

std::string hello(const std::string& nonce) {
  std::string h = "XCSB";
  xccl::net::putU32(h, 2);
  return h + nonce;
}

void sendStr(int fd, const std::string& s) {
  ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
}

std::string recvExactly(int fd, size_t n) {
  std::string got(n, '\0');
  size_t have = 0;
  while (have < n) {
    ssize_t r = recv(fd, &got[have], n - have, 0);
    if (r <= 0) return got.substr(0, have);
    have += static_cast<size_t>(r);
  }
  return got;
}

// A raw client through the challenge-response with `proofSecret` (the raw 32 bytes). Returns
// the server's nonce and proof in *challenge.
int handshake(const xccl::net::SockAddr& addr, const std::string& proofSecret,
              std::string* challenge, char* status) {
  int fd = rawConnect(addr);
  std::string mine = xccl::auth::nonce();
  sendStr(fd, hello(mine));
  *challenge = recvExactly(fd, 48);
  std::string proof =
      xccl::auth::proof(proofSecret, "store-client", challenge->substr(0, 16), mine, "xccl-store");
  sendStr(fd, proof);
  std::string s = recvExactly(fd, 1);
  *status = s.empty() ? '?' : s[0];
  return fd;
}

TEST(UniqueIdStore, ThreadsShareKeys) {
  xcclUniqueId id;
  xccl::createUniqueId(&id);
  EXPECT_EQ(xccl::uniqueIdSecret(id).size(), 64u);
  const int n = 4;
  xccl_test::runThreads(
      n,
      [&](int rank) {
        auto store = xccl::connectUniqueIdStore(id, Deadline::after(10000));
        store->set("k/" + std::to_string(rank), std::string(rank * 1000, 'a' + rank));
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(store->get("k/" + std::to_string(r), Deadline::after(10000)),
                    std::string(r * 1000, 'a' + r));
        }
        EXPECT_THROW(store->get("never", Deadline::after(50)), xccl::Timeout);
      },
      60);
}

TEST(UniqueIdStore, ProcessesShareKeys) {
  xcclUniqueId id;
  xccl::createUniqueId(&id);  // server thread lives in this (parent) process
  const int n = 3;
  xccl_test::runProcesses(
      n,
      [&](int rank) {
        auto store = xccl::connectUniqueIdStore(id, Deadline::after(10000));
        store->set("p/" + std::to_string(rank), std::to_string(getpid()));
        std::set<std::string> pids;
        for (int r = 0; r < n; ++r)
          pids.insert(store->get("p/" + std::to_string(r), Deadline::after(10000)));
        EXPECT_EQ(pids.size(), static_cast<size_t>(n));
      },
      60);
}

TEST(UniqueIdStore, WrongSecretIsRefused) {
  xcclUniqueId id;
  xccl::createUniqueId(&id);
  xcclUniqueId forged = id;
  forged.internal[20] ^= 0x5a;
  EXPECT_THROW(xccl::connectUniqueIdStore(forged, Deadline::after(5000)), xccl::RemoteError);
  testing::internal::CaptureStderr();
  std::string challenge;
  char status = 0;
  int fd = handshake(idAddress(id), std::string(32, 'x'), &challenge, &status);
  EXPECT_EQ(status, '\1');                     // "refused"
  EXPECT_EQ(xccl_test::readUntilEof(fd), "");  // then closed
  close(fd);
  // The secret never travels: the challenge is a fresh nonce and an HMAC.
  const std::string secret = xccl::fromHex(xccl::uniqueIdSecret(id));
  EXPECT_EQ(challenge.size(), 48u);
  EXPECT_EQ(challenge.find(secret), std::string::npos);
  // A proof recorded from one exchange fails the next (the server's nonce is new).
  std::string c1, c2;
  char s1 = 0;
  int a = rawConnect(idAddress(id));
  std::string mine = xccl::auth::nonce();
  sendStr(a, hello(mine));
  c1 = recvExactly(a, 48);
  std::string recorded =
      xccl::auth::proof(secret, "store-client", c1.substr(0, 16), mine, "xccl-store");
  close(a);
  int b = rawConnect(idAddress(id));
  sendStr(b, hello(mine));
  c2 = recvExactly(b, 48);
  EXPECT_NE(c1.substr(0, 16), c2.substr(0, 16));
  sendStr(b, recorded);
  std::string sb = recvExactly(b, 1);
  s1 = sb.empty() ? '?' : sb[0];
  EXPECT_EQ(s1, '\1');
  close(b);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("bad proof"), std::string::npos) << err;
  // The legitimate client still works.
  auto store = xccl::connectUniqueIdStore(id, Deadline::after(5000));
  store->set("x", "y");
  EXPECT_EQ(store->get("x", Deadline::after(1000)), "y");
}

TEST(UniqueIdStore, SurvivesMalformedAndTruncatedRequests) {
  xcclUniqueId id;
  xccl::createUniqueId(&id);
  std::string secret = xccl::fromHex(xccl::uniqueIdSecret(id));
  auto legit = xccl::connectUniqueIdStore(id, Deadline::after(5000));
  legit->set("before", "1");
  const xccl::net::SockAddr addr = idAddress(id);
  // Each attack: bytes sent before (raw) or after (authed) a completed handshake.
  struct Attack {
    bool authed;
    std::string bytes;
    bool hangUp;  // the client vanishes after sending
  };
  std::vector<Attack> attacks;
  attacks.push_back(
      {false, "GET / HTTP/1.0\r\n\r\n" + std::string(40, 'z'), false});  // garbage hello
  attacks.push_back({false, "XCS", true});                               // truncated hello
  std::string hugeKey = "G";
  xccl::net::putU32(hugeKey, 0xffffffffu);  // key length far over the limit
  attacks.push_back({true, hugeKey, false});
  std::string hugeVal = "S";
  xccl::net::putU32(hugeVal, 1);
  hugeVal += "k";
  xccl::net::putU32(hugeVal, 0xfffffff0u);  // value length over the limit
  attacks.push_back({true, hugeVal, false});
  std::string badOp = "Q";
  xccl::net::putU32(badOp, 1);
  attacks.push_back({true, badOp + "k", false});
  std::string truncated = "S";
  xccl::net::putU32(truncated, 5);
  attacks.push_back({true, truncated + "ab", true});  // then the client vanishes mid-request
  for (const Attack& a : attacks) {
    int fd;
    if (a.authed) {
      std::string challenge;
      char status = 1;
      fd = handshake(addr, secret, &challenge, &status);
      EXPECT_EQ(status, '\0');
    } else {
      fd = rawConnect(addr);
    }
    sendStr(fd, a.bytes);
    if (a.hangUp) shutdown(fd, SHUT_WR);
    std::string got = xccl_test::readUntilEof(fd);
    EXPECT_NE(got, "TIMEOUT") << "server kept a malformed client open";
    close(fd);
  }
  // Still alive and serving, on the old connection and on a new one.
  EXPECT_EQ(legit->get("before", Deadline::after(1000)), "1");
  auto again = xccl::connectUniqueIdStore(id, Deadline::after(5000));
  again->set("after", "2");
  EXPECT_EQ(legit->get("after", Deadline::after(1000)), "2");
}

TEST(UniqueIdStore, RejectsForeignIdBytes) {
  xcclUniqueId junk;
  std::memset(&junk, 0x41, sizeof(junk));
  EXPECT_THROW(xccl::connectUniqueIdStore(junk, Deadline::after(100)), xccl::InvalidArgument);
  EXPECT_THROW(xccl::uniqueIdSecret(junk), xccl::InvalidArgument);
}

TEST(UniqueIdStore, CommIdOverrideFixesTheAddress) {
  // Find a free port, then ask for it explicitly.
  xccl::net::Fd probe = xccl::net::listenOn(xccl::net::parseAddr("127.0.0.1:0"));
  std::string addr = xccl::net::formatAddr(xccl::net::boundAddr(probe.get()));
  probe.reset();
  xccl_test::ScopedEnv env("XCCL_COMM_ID", addr.c_str());
  xcclUniqueId id;
  xccl::createUniqueId(&id);
  EXPECT_EQ(xccl::net::formatAddr(idAddress(id)), addr);
  auto store = xccl::connectUniqueIdStore(id, Deadline::after(5000));
  store->set("a", "b");
  EXPECT_EQ(store->get("a", Deadline::after(1000)), "b");
}

TEST(UniqueIdStore, ListensOnIPv6WhenTheFamilySaysSo) {
  bool loopbackV6 = false;
  for (const auto& i : xccl::net::listInterfaces(AF_INET6)) loopbackV6 = loopbackV6 || i.loopback;
  if (!loopbackV6) GTEST_SKIP() << "no IPv6 on the loopback here";
  xccl_test::ScopedEnv family("XCCL_SOCKET_FAMILY", "AF_INET6");
  xccl_test::ScopedEnv lo("XCCL_SOCKET_IFNAME", "lo");
  xcclUniqueId id;
  xccl::createUniqueId(&id);
  EXPECT_EQ(idAddress(id).family(), AF_INET6);
  EXPECT_EQ(xccl::net::formatAddr(idAddress(id)).rfind("[::1]:", 0), 0u);
  auto store = xccl::connectUniqueIdStore(id, Deadline::after(5000));
  store->set("v6", "yes");
  EXPECT_EQ(store->get("v6", Deadline::after(1000)), "yes");
  // And an explicit IPv6 XCCL_COMM_ID.
  xccl_test::ScopedEnv fixed("XCCL_COMM_ID", "[::1]:0");
  xcclUniqueId id2;
  xccl::createUniqueId(&id2);
  EXPECT_EQ(idAddress(id2).family(), AF_INET6);
  EXPECT_NE(idAddress(id2).port(), 0);
}

}  // namespace

namespace {

std::string hex(const std::array<uint8_t, 32>& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

// FIPS 180-2 appendix B and RFC 4231 (HMAC-SHA256 test cases 1, 2, 6: short key, short key
// with short text, key longer than a block).
TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(hex(xccl::sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(xccl::sha256("", 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // 56 bytes
  EXPECT_EQ(hex(xccl::sha256(two.data(), two.size())),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(hex(xccl::sha256(million.data(), million.size())),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(hex(xccl::hmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(xccl::hmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(xccl::hmacSha256(std::string(131, '\xaa'),
                                 "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

}  // namespace
