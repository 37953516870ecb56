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

#include "collectives/transport/shm/doorbell.h"
#include "collectives/transport/transport.h"
#include "common/clock.h"
#include "xccl.h"

namespace xccl {

class Device;

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until key exists; throws Timeout at the deadline.
  virtual std::string get(const std::string& key, const Deadline& deadline) = 0;
};

// Wraps the C callback store; every key is prefixed with `prefix`.
std::unique_ptr<Store> makeCallbackStore(const xcclStore_t& store, const std::string& prefix);
// A thread-safe store living in this process (tests that run ranks as threads).
std::unique_ptr<Store> makeMemoryStore();  // returns a handle sharing one map per call site
// Fills `id` and starts the rendezvous server thread in this process.
void createUniqueId(xcclUniqueId* id);
// A Store client talking to the server named in `id`.
std::unique_ptr<Store> connectUniqueIdStore(const xcclUniqueId& id, const Deadline& deadline);
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
std::unique_ptr<Store> connectService(const std::string& service, const Deadline& deadline);
// Whether the process behind `service` answers (connects and authenticates) before the
// deadline: false when it refused (the process is gone), reset, or stayed silent (stopped,
// cut off).
bool probeService(const std::string& service, const Deadline& deadline);

// A view of `inner` with every key under `prefix` (the caller keeps `inner` alive).
std::unique_ptr<Store> makeScopedStore(Store& inner, const std::string& prefix);

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
};

// The host identity of this process: XCCL_NODE_ID if set, else hostname + boot id + network
// and pid namespaces (two network namespaces on one machine are two hosts).
std::string localHostId();
// "net:[4026531840]": the inode naming this process's namespace of a kind ("net", "pid").
std::string namespaceId(const char* kind);

struct PeerSetup {
  std::vector<PeerInfo> peers;                           // indexed by rank
  std::vector<std::unique_ptr<Connection>> connections;  // indexed by rank; null for self
  // This rank's doorbell, which its shared-memory peers ring (null without such peers).
  std::unique_ptr<shm::Doorbell> bell;
};

// Exchanges PeerInfo through `store` (keys under "peer/<rank>") and connects to every
// other rank. `secret` authenticates every connection; `abortFlag` set by another thread
// stops the wait. Logs one "rank a -> b via SHM|TCP" line per connection (INFO, INIT).
// `hostTopology` is published as PeerInfo::topology.
PeerSetup connectPeers(Store& store, int rank, int nranks, const std::string& secret,
                       Device& device, const Deadline& deadline, const std::atomic<bool>& abortFlag,
                       const std::string& hostTopology = "");

// 32 random bytes, hex encoded, from the OS entropy source.
std::string randomSecret();

}  // namespace xccl
