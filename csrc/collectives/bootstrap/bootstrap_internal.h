// Internals of the bootstrap shared with the transports' connect step and the tests.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap.h"
#include "collectives/transport/tcp/socket.h"

namespace xccl {

// Wire form of PeerInfo: "XPI6", then rank, pid, flags and device ordinal (u32 LE), then eight
// length-prefixed strings (host id, hostname, bus id, TCP address, topology, service, shm, net)
// (u32 LE length + bytes; the topology text up to 64 KiB, the others up to 4 KiB), then the
// core count (u32 LE). parsePeerInfo
// throws RemoteError on anything malformed (truncated, oversized field, trailing bytes) and never
// reads out of bounds. `flags` carries per-rank transport choices that both ends of a pair must
// agree on (bit 0: this rank has XCCL_SHM_DISABLE set).
std::string serializePeerInfo(const PeerInfo& info, uint32_t flags = 0);
PeerInfo parsePeerInfo(const std::string& bytes, uint32_t* flags = nullptr);
constexpr uint32_t kPeerFlagNoShm = 1;
// Every rank's PeerInfo record in one value (rank 0 gathers them for the others, so the store
// serves 3n requests instead of n^2): "XPL1", the count (u32 LE), then each record as u32 LE
// length + bytes. splitPeerRecords throws RemoteError on anything malformed.
std::string joinPeerRecords(const std::vector<std::string>& records);
std::vector<std::string> splitPeerRecords(const std::string& bytes, size_t expected);
// What the gathering rank publishes instead when it cannot gather (a member is gone):
// splitPeerRecords of it throws RemoteError carrying `why`, so no rank waits for a list
// that will never come.
std::string failedPeerRecords(const std::string& why);
// The reason carried by a failedPeerRecords() value; "" for anything else.
std::string peerRecordsFailure(const std::string& bytes);

// The bootstrap tree (tree.cc): rank lo heads the ranks [lo, hi); it splits [lo + 1, hi)
// into at most `fanout` consecutive chunks of nearly equal size, each headed by its first
// rank. Depth about log_fanout(nranks); rank 0 heads [0, nranks).
struct BootstrapTreeNode {
  int parent = -1;                            // -1 for rank 0
  int hi = 0;                                 // this rank heads [rank, hi)
  int depth = 0;                              // 0 for rank 0
  std::vector<std::pair<int, int>> children;  // [first, end) of each chunk, in rank order
};
BootstrapTreeNode bootstrapTreeNode(int nranks, int fanout, int rank);

// Every rank's PeerInfo record through the tree of the ranks' bootstrap services: each rank
// takes its children's slices from its own service, sets its slice [rank, hi) in its
// parent's, then takes the whole list from its parent's service and leaves a copy for each
// child in its own. 2 x depth round trips, a rank moves the list 1 + fanout times, and the
// caller's store only gives each rank its parent's service. A failure anywhere reaches every
// rank as RemoteError carrying the first reason (a rank passes failedPeerRecords on, up and
// down, in place of what it owes). Waits look at `abortFlag` and, with `watch`, at the member
// they wait for; `watch->silentLimitMs` also bounds each request to a service.
struct TreeExchange {
  int rank = 0, nranks = 1, fanout = 8;
  std::string mine;           // this rank's serialized PeerInfo
  std::string parentService;  // the parent's PeerInfo::service ("" for rank 0)
  std::string scope;          // key prefix of this initialisation (recordScope)
  const Deadline& deadline;
  const std::atomic<bool>& abortFlag;
  const MemberWatch* watch = nullptr;
};
std::vector<std::string> exchangeRecordsByTree(const TreeExchange& x);

// Test hook: while set (non-empty) on a thread, localHostId() on that thread returns it,
// ahead of XCCL_NODE_ID. Lets ranks that are threads of one process pretend to live on
// different hosts. Pass "" to clear.
void setThreadHostIdOverride(const std::string& hostId);

// Key under which connectPeers marks "rank r has read everything it needs from the
// store". The unique-id store server counts these marks (the value is nranks) and shuts
// down once every rank has marked and every client has disconnected.
constexpr const char* kDoneKeyPrefix = "peer/done/";

// The record rank 0 of a store-based initialisation publishes under "secret": the
// communicator secret and who wrote it, so that a rank reading it can tell a record left by an
// earlier initialisation (a process that has exited, or a communicator this process already
// made) from the current one. Wire form, one line of text:
//   "XSR1 <secret: 64 lowercase hex> <pid> <start time, clock ticks since boot; 0 = unknown>
//    <host id: the rest, 1 to 4096 bytes>"
// with decimal numbers without leading zeros. parseSecretRecord throws RemoteError on anything
// else, so a parsed record formats back to the same bytes.
struct SecretRecord {
  std::string secret;
  int pid = 0;
  int64_t startTime = 0;
  std::string hostId;
};
std::string formatSecretRecord(const SecretRecord& rec);
SecretRecord parseSecretRecord(const std::string& bytes);
// This process as the writer of a secret record.
SecretRecord localSecretRecord(const std::string& secret);
// Why `rec` must not be used by this process ("" when nothing says it is stale): this process
// already used its secret for a communicator (the record is from an earlier initialisation
// under the same store prefix), or it names a process on this host that has exited (or whose
// pid now belongs to another process). A writer on another host cannot be checked from here.
std::string staleSecretReason(const SecretRecord& rec);
// Marks a secret as used by this process: a later initialisation that reads it again from a
// store is reading a stale record (staleSecretReason says so). Keeps the last 4096.
void retireSecret(const std::string& secret);

// Hex helpers for secrets.
std::string toHex(const std::string& raw);
std::string fromHex(const std::string& hex);  // "" when hex is malformed

// The store server's wire (unique_id.cc describes it; store_server.cc serves it).
namespace storewire {
constexpr char kHelloMagic[4] = {'X', 'C', 'S', 'B'};
constexpr uint32_t kVersion = 2;
constexpr size_t kHelloBytes = 8 + 16;  // magic, version, the client's nonce (auth.h)
constexpr uint32_t kMaxKey = 1024;
constexpr uint32_t kMaxValue = 64u << 20;
constexpr uint32_t kMaxWaitMs = 60000;  // the longest a get or take is parked
}  // namespace storewire

// One request to the unique-id store server (after the handshake): 'S' | key length | key |
// value length | value, or 'G' (get) / 'T' (take) | key length | key | wait ms. Key up to
// 1 KiB, value up to 64 MiB, both checked before anything is buffered. kDone fills *req and
// *used (bytes consumed).
struct StoreRequest {
  char op = 0;
  std::string key, value;
  uint32_t waitMs = 0;  // a get or take: how long the server may hold it for an absent key
};
enum class StoreParse { kNeedMore, kDone, kBad };
StoreParse parseStoreRequest(const std::string& in, StoreRequest* req, size_t* used,
                             std::string* why);

// The store server (unique_id.cc) on `listener`, authenticating clients with `secret` (raw
// bytes), in a detached thread. forever: it never retires (the process's bootstrap
// service); otherwise it retires once every rank of a unique-id rendezvous marked done.
void startStoreServer(net::Fd listener, const std::string& secret, bool forever);
// A client of the store server at `addr` (connect, then the mutual challenge-response).
// knownUp: the server listened before its address was given out, so a refusal is a
// RemoteError at once (its process is gone) instead of a retry until the deadline.
// roundTripMs: how long one request may wait for its answer (0: 60 s), whatever the
// deadline of the wait it serves (a request cut short would leave the stream out of step).
// abortFlag (may be null), set by another thread, ends the connecting.
std::unique_ptr<Store> connectStoreAt(const net::SockAddr& addr, const std::string& secret,
                                      const std::string& what, const Deadline& deadline,
                                      bool knownUp = false, int64_t roundTripMs = 0,
                                      const std::atomic<bool>* abortFlag = nullptr);
// The client's half of the challenge-response on a connected socket; throws RemoteError
// when the server does not know the secret or refuses our proof.
void authenticateClient(int fd, const std::string& secret, const net::WaitCtx& ctx);

}  // namespace xccl
