// Bootstrap: how ranks of a communicator find each other and agree on a secret.
//
// Two entry points, one mechanism: a Store (key-value rendezvous).
//  - xcclCommInitRankStore: the caller's xcclStore_t (the torch plugin wraps c10d's Store).
//  - xcclGetUniqueId / xcclCommInitRank: the process that calls xcclGetUniqueId starts a
//    small authenticated TCP store server; the id carries its address and the secret.
// On top of the store, connectPeers() publishes each rank's PeerInfo, reads everyone
// else's, and builds a Connection to every peer (shared memory on the same host, TCP
// otherwise), authenticating each with the communicator secret.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "collectives/transport/shm/arena.h"
#include "collectives/transport/shm/doorbell.h"
#include "collectives/transport/transport.h"
#include "common/clock.h"
#include "xccl.h"

namespace xccl {

class Device;
namespace tcp {
class Acceptor;
}

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until key exists; throws Timeout at the deadline.
  virtual std::string get(const std::string& key, const Deadline& deadline) = 0;
  // get() that also removes the key where the store can (the bootstrap services: a value
  // meant for one reader does not stay in a process-long server); elsewhere get().
  virtual std::string take(const std::string& key, const Deadline& deadline) {
    return get(key, deadline);
  }
};

// Wraps the C callback store; every key is prefixed with `prefix`.
std::unique_ptr<Store> makeCallbackStore(const xcclStore_t& store, const std::string& prefix);
// A thread-safe store living in this process (tests that run ranks as threads).
std::unique_ptr<Store> makeMemoryStore();  // returns a handle sharing one map per call site
// Fills `id` and starts the rendezvous server thread in this process.
void createUniqueId(xcclUniqueId* id);
// A Store client talking to the server named in `id`; abortFlag (may be null), set by another
// thread, ends the connecting.
std::unique_ptr<Store> connectUniqueIdStore(const xcclUniqueId& id, const Deadline& deadline,
                                            const std::atomic<bool>* abortFlag = nullptr);
// The secret carried by a unique id.
std::string uniqueIdSecret(const xcclUniqueId& id);

// The process's bootstrap service: the same authenticated key-value server, one per
// process, started by its first communicator and kept for the life of the process.
// Returns its description, "ip:port <secret hex>", which every communicator publishes in
// PeerInfo::service, so that its members can rendezvous again without the caller's store:
// xcclCommSplit and xcclCommShrink build the child over the lowest member's service, and
// xcclCommProbeAlive asks each peer's service whether its process still answers. A forked
// child starts its own.
std::string processService();
// A Store client of the service `service` describes.
// roundTripMs (0: 60 s): how long one request may wait for the service's answer: a process
// stopped (or cut off) while serving would otherwise hold its clients for that long.
std::unique_ptr<Store> connectService(const std::string& service, const Deadline& deadline,
                                      int64_t roundTripMs = 0);

// A grow id (xcclCommGetUniqueId, for xcclCommGrow): where the members of the grown
// communicator meet (the bootstrap service of the process that made the id), the grown
// communicator's secret, and the size of the communicator it grows (a joining rank's rank
// must be at least that). 128 bytes: "XCGR" | u32 version | IPv4 addr | port | 2 zero |
// service secret (32) | communicator secret (32) | u32 old size | zeros. It is not a unique
// id: xcclCommInitRank refuses it, and xcclCommGrow refuses a unique id.
struct GrowId {
  std::string service;  // processService()'s format
  std::string secret;   // the grown communicator's secret (hex, as randomSecret())
  int oldRanks = 0;
};
void makeGrowId(int oldRanks, xcclUniqueId* id);
// false when `id` is not a grow id at all; throws InvalidArgument on a damaged one.
bool parseGrowId(const xcclUniqueId& id, GrowId* out);
// What a probe of the process behind `service` found: it connected and authenticated
// before the deadline (kAnswers); it refused, reset or closed (kGone: the process has exited,
// and its kernel closed its sockets); or nothing came before the deadline, or the route
// failed (kSilent: stopped, descheduled or cut off: no verdict).
enum class ServiceState { kAnswers, kGone, kSilent };
ServiceState probeServiceState(const std::string& service, const Deadline& deadline);
// probeServiceState() == kAnswers (xcclCommProbeAlive: silent counts as not alive).
bool probeService(const std::string& service, const Deadline& deadline);

// The members a communicator in creation waits for, when their processes are known from a
// parent (split, shrink, grow): their bootstrap services by new rank ("" where unknown, as
// for a rank joining by grow). A wait for a member's record probes its service every slice
// and fails, naming it, when its process is gone (at once) or has not answered for
// silentLimitMs (stopped or cut off: the heartbeat's rule; 0 = wait for a silent member
// until the deadline), instead of at the deadline.
struct MemberWatch {
  std::vector<std::string> services;
  std::vector<std::string> who;  // for messages, by rank ("" = "rank <r>")
  int64_t silentLimitMs = 0;
  std::string consequence = "the new communicator cannot be made";  // ends the message
  // Throws RemoteError when member `rank` is gone or silent too long (`self`, `waitingFor`:
  // for the message); a probe of at most 100 ms. One thread at a time.
  void check(int self, int rank, const std::string& waitingFor) const;

 private:
  mutable std::vector<Clock::time_point> silentSince_;  // by rank; epoch = answered last time
};

// A view of `inner` with every key under `prefix` (the caller keeps `inner` alive).
std::unique_ptr<Store> makeScopedStore(Store& inner, const std::string& prefix);
// A view of `inner` whose waits run in slices of at most 100 ms and end (InvalidUsage) soon
// after *cancel is set (cancel may be null: never).
std::unique_ptr<Store> makeCancellableStore(Store& inner, const std::atomic<bool>* cancel);

// Store-based rendezvous of one communicator (xcclCommInitRankStore): rank 0 draws the
// secret and publishes it (with who wrote it) under "secret"; every other rank waits for a
// record that is not stale (bootstrap_internal.h, staleSecretReason), waiting past stale ones
// until `deadline`. Returns the secret.
std::string publishSecret(Store& store);
std::string awaitSecret(Store& store, int rank, const Deadline& deadline);
// The key prefix, derived from the secret (it reveals nothing about it), under which one
// initialisation writes all its other records: a rank holding this initialisation's secret
// never reads a record another initialisation wrote, whatever the store still holds.
std::string recordScope(const std::string& secret);

// What every rank publishes about itself.
struct PeerInfo {
  int rank = -1;
  int pid = 0;
  std::string hostId;    // same string <=> same host (XCCL_NODE_ID overrides)
  std::string hostname;  // for logs
  std::string busId;     // the Device's busId
  std::string tcpAddr;   // "ip:port" of this rank's data listener
  int device = -1;       // the device's ordinal on its host (-1: host memory, no device)
  std::string topology;  // this host as detected (topology/detect.h, topo_file.h text) or ""
  std::string service;   // the process's bootstrap service (processService())
  // Shared memory reached on first use: "<arena>;<doorbell>" (shm/arena.h, shm/doorbell.h),
  // "" when this rank makes its rings eagerly (XCCL_RUNTIME_CONNECT=0, payload lanes, no SHM).
  std::string shm;
  // Through a network plugin (XCCL_NET_PLUGIN): its listen handle and this set-up's nonce
  // (transport/net/connection.h); "" without a plugin.
  std::string net;
  // CPUs this process may run on (usableCores()): with the ranks per host, whether a host's
  // ranks outnumber its cores, which every rank of the host then decides alike.
  int cores = 0;
};

// The host identity of this process: XCCL_NODE_ID if set, else hostname + boot id + network
// and pid namespaces (two network namespaces on one machine are two hosts).
std::string localHostId();
// "net:[4026531840]": the inode naming this process's namespace of a kind ("net", "pid").
std::string namespaceId(const char* kind);

struct PeerSetup {
  std::vector<PeerInfo> peers;  // indexed by rank
  // This rank's rings towards the peers it reaches on first use (null without any); before
  // the connections, which map its slots and so must go first.
  std::unique_ptr<shm::Arena> arena;
  // This rank's doorbell, which its shared-memory peers ring (null without such peers).
  std::unique_ptr<shm::Doorbell> bell;
  std::vector<std::unique_ptr<Connection>> connections;  // indexed by rank; null for self
  // By rank: connected on first use (connectOnFirstUse), null in `connections` until then:
  // kFirstUseShm through the arena, kFirstUseTcp by the lower rank of the pair.
  std::vector<char> onFirstUse;
  // The listener of TCP pairs made on first use, and the higher rank's side of them (null
  // without remote peers, or with XCCL_RUNTIME_CONNECT=0).
  std::shared_ptr<tcp::Acceptor> acceptor;
  std::string secret;  // the communicator's, for those handshakes
};
constexpr char kFirstUseShm = 1, kFirstUseTcp = 2;

// Exchanges PeerInfo through `store` (keys under "peer/<rank>") and connects to the other
// ranks: TCP peers and eagerly made shared-memory rings at once; with XCCL_RUNTIME_CONNECT=1
// (the default) the pairs on one host whose ranks both publish an arena are left for
// connectOnFirstUse. `secret` authenticates every connection; `abortFlag` set by another
// thread stops the wait. Logs one "rank a -> b via SHM|TCP" line per peer (INFO, INIT).
// `hostTopology` is published as PeerInfo::topology. `watch` (when given) ends a wait for
// a member whose process is gone (MemberWatch).
PeerSetup connectPeers(Store& store, int rank, int nranks, const std::string& secret,
                       Device& device, const Deadline& deadline, const std::atomic<bool>& abortFlag,
                       const std::string& hostTopology = "", const MemberWatch* watch = nullptr);

// The connection with `peer` (setup.onFirstUse[peer]). SHM: maps the peer's ring towards us
// from its arena and pairs it with ours (shm/arena.h); one-sided, the peer need not be in an
// operation; throws as Arena::connect. TCP: a connection that connects (lower rank) or is
// answered (higher rank) as the engine first moves bytes on it (tcp/lazy.cc); never throws
// for the peer's state, it reports it through peerGone() (a peer silent for silentLimitMs
// too, 0 = until the deadline).
std::unique_ptr<Connection> connectOnFirstUse(PeerSetup& setup, int rank, int peer, Device& device,
                                              const Deadline& deadline,
                                              const std::atomic<bool>& abortFlag,
                                              int64_t silentLimitMs = 0);

// 32 random bytes, hex encoded, from the OS entropy source.
std::string randomSecret();

}  // namespace xccl
