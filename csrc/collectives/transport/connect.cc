// connectPeers(): from a shared store to one authenticated Connection per peer.
//
//   1. listen on an ephemeral TCP port; publish PeerInfo under "peer/<rank>"
//   2. read every other rank's PeerInfo: from 8 ranks on through the bootstrap tree of the
//      ranks' own services (bootstrap/tree.cc: a rank reads only its parent's record from
//      the store, so the store serves 2n small requests instead of n^2 records), or with
//      XCCL_BOOTSTRAP_FANOUT=0 rank 0 reads them all and publishes the list under "peers"
//      (3n requests, but n copies of the whole list); below 8 ranks every rank reads each
//   3. for each peer on the same host (equal hostId, SHM allowed on both ends): create
//      our outgoing SHM ring, publish it under "shm/<rank>/<peer>"
//   4. TCP for the rest (or, with XCCL_NET_PLUGIN set, the network plugin: every remote pair
//      now, net/connection.h): by default nothing now, the pairs connect on first use (the lower
//      rank connects, the higher rank's Acceptor thread answers: tcp/lazy.cc); eagerly
//      (XCCL_RUNTIME_CONNECT=0), connect to every higher remote rank, then accept every
//      lower one (the highest rank only accepts, so by induction every connect gets answered)
//   5. open each local peer's ring ("shm/<peer>/<rank>") and pair it with ours
//   6. close the listener (or leave it to the Acceptor); mark "peer/done/<rank>" (lets the
//      unique-id server retire)
// Every wait honours the deadline and the abort flag.
#include <unistd.h>

#include <map>
#include <set>

#include "collectives/bootstrap/bootstrap_internal.h"
#include "collectives/device/device.h"
#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "common/process.h"
#include "common/wait_notice.h"
#include "net/connection.h"
#include "net/plugin.h"
#include "shm/arena.h"
#include "shm/connection.h"
#include "shm/ring.h"
#include "tcp/connection.h"
#include "tcp/socket.h"

namespace xccl {

// 1 = never use shared memory between ranks (TCP even on one host).
XCCL_PARAM(ShmDisable, "SHM_DISABLE", 0, 0, 1)
// 1 = ranks on one host connect when an operation first needs the pair (shm/arena.h);
// 0 = every pair at creation.
XCCL_PARAM(RuntimeConnect, "RUNTIME_CONNECT", 1, 0, 1)
// From 8 ranks on, the PeerInfo records travel through a tree of the ranks' bootstrap
// services with this many children per rank; 0 = rank 0 gathers them through the store.
XCCL_PARAM(BootstrapFanout, "BOOTSTRAP_FANOUT", 8, 0, 4096)

namespace {

// Store waits in short slices so that the abort flag is seen within a fraction of a second
// even when the store itself (a callback) only knows timeouts.
constexpr int64_t kStoreSliceMs = 250;
// From this many ranks on, rank 0 gathers the PeerInfo records for the others.
constexpr int kGatherFrom = 8;

// `awaited`: the rank that writes `key`, checked through `watch` (when given) every slice.
std::string storeGet(Store& store, const std::string& key, int rank, const Deadline& deadline,
                     const std::atomic<bool>& abortFlag, int awaited, const MemberWatch* watch) {
  WaitNotice notice(
      strCat("key '", key, "' in the store (rank ", rank, "; is the rank that writes it running?)"),
      BOOT);
  for (;;) {
    if (abortFlag.load())
      throw InvalidUsage(strCat("rank ", rank, ": aborted waiting for '", key, "' in the store"));
    int64_t left = deadline.remainingMs();
    int64_t slice = left < 0 ? kStoreSliceMs : std::min(left, kStoreSliceMs);
    try {
      return store.get(key, Deadline::after(slice));
    } catch (const Timeout&) {
      notice.tick();
      if (watch != nullptr) watch->check(rank, awaited, strCat("its key '", key, "'"));
      if (deadline.expired()) {
        throw Timeout(strCat("rank ", rank, ": key '", key, "' did not appear in the store within ",
                             deadline.budgetMs(), " ms (is that rank running, with the same id?)"));
      }
    }
  }
}

std::string hostName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

PeerSetup connectPeers(Store& store, int rank, int nranks, const std::string& secret,
                       Device& device, const Deadline& deadline, const std::atomic<bool>& abortFlag,
                       const std::string& hostTopology, const MemberWatch* watch) {
  XCCL_CHECK_ARG(nranks >= 1 && rank >= 0 && rank < nranks, "bad rank ", rank, " of ", nranks);
  XCCL_CHECK_ARG(!secret.empty(), "empty communicator secret");
  const bool noShm = xcclParamShmDisable() != 0;

  // 1. Publish ourselves (with our arena and doorbell when the pairs on this host connect
  // on first use; rings with payload lanes are made eagerly).
  auto listener = std::make_unique<tcp::Listener>(net::localAddress());
  PeerSetup setup;
  setup.secret = secret;
  setup.peers.resize(nranks);
  setup.connections.resize(nranks);
  setup.onFirstUse.assign(nranks, 0);
  if (!noShm && nranks > 1 && xcclParamRuntimeConnect() != 0 && !shm::laneWanted(device)) {
    setup.arena = std::make_unique<shm::Arena>(rank, nranks, secret);
    setup.bell = shm::Doorbell::create();
  }
  PeerInfo& me = setup.peers[rank];
  me = PeerInfo{rank,
                static_cast<int>(getpid()),
                localHostId(),
                hostName(),
                device.busId(),
                listener->address(),
                std::string(device.name()) == "host" ? -1 : device.ordinal(),
                hostTopology,
                processService(),
                setup.arena ? strCat(setup.arena->describe(), ";", setup.bell->describe()) : "",
                "",
                usableCores()};
  // With a network plugin, the remote pairs go through it: listen now, publish the handle.
  const xcclNet_v1_t* plugin = nranks > 1 ? net::activePlugin() : nullptr;
  std::unique_ptr<net::NetListener> netListener;
  if (plugin != nullptr) {
    netListener = std::make_unique<net::NetListener>(plugin);
    me.net = netListener->record();
  }
  const std::string mine = serializePeerInfo(me, noShm ? kPeerFlagNoShm : 0);
  store.set(strCat("peer/", rank), mine);

  // 2. Read everyone: from kGatherFrom ranks on through the bootstrap tree (the store gives
  // each rank its parent's record only), or (fanout 0) rank 0 reads the records and
  // publishes them as one value; decide the transport of each pair alike on both ends.
  std::vector<std::string> records(nranks);
  const int fanout = static_cast<int>(xcclParamBootstrapFanout());
  if (nranks >= kGatherFrom && fanout > 0) {
    std::string parentService;
    const BootstrapTreeNode node = bootstrapTreeNode(nranks, fanout, rank);
    if (node.parent >= 0) {
      parentService = parsePeerInfo(storeGet(store, strCat("peer/", node.parent), rank, deadline,
                                             abortFlag, node.parent, watch))
                          .service;
    }
    records = exchangeRecordsByTree(TreeExchange{rank, nranks, fanout, mine, parentService,
                                                 recordScope(secret), deadline, abortFlag, watch});
  } else if (nranks >= kGatherFrom && rank != 0) {
    records =
        splitPeerRecords(storeGet(store, "peers", rank, deadline, abortFlag, 0, watch), nranks);
  } else {
    try {
      for (int p = 0; p < nranks; ++p) {
        records[p] = p == rank
                         ? mine
                         : storeGet(store, strCat("peer/", p), rank, deadline, abortFlag, p, watch);
      }
    } catch (const RemoteError& e) {  // a member is gone: the others wait for the list
      if (nranks >= kGatherFrom) store.set("peers", failedPeerRecords(e.what()));
      throw;
    }
    if (nranks >= kGatherFrom) store.set("peers", joinPeerRecords(records));
  }
  std::vector<bool> local(nranks, false);
  for (int p = 0; p < nranks; ++p) {
    if (p == rank) continue;
    uint32_t flags = 0;
    setup.peers[p] = parsePeerInfo(records[p], &flags);
    if (setup.peers[p].rank != p) {
      throw RemoteError(
          strCat("rank ", rank, ": store entry 'peer/", p, "' claims rank ", setup.peers[p].rank));
    }
    local[p] = !noShm && !(flags & kPeerFlagNoShm) && setup.peers[p].hostId == me.hostId;
    // Both ends decide alike: on first use when both published an arena.
    if (local[p] && setup.arena && !setup.peers[p].shm.empty()) {
      setup.onFirstUse[p] = kFirstUseShm;
      setup.arena->prepare(p);
    }
  }

  // 3. Our outgoing rings towards local peers, and the doorbell they ring.
  std::map<int, std::unique_ptr<shm::OutgoingRing>> rings;
  for (int p = 0; p < nranks; ++p) {
    if (p == rank || !local[p] || setup.onFirstUse[p]) continue;
    rings[p] = std::make_unique<shm::OutgoingRing>(rank, p, secret, device);
    store.set(strCat("shm/", rank, "/", p), rings[p]->describe());
  }
  if (!rings.empty()) {
    if (!setup.bell) setup.bell = shm::Doorbell::create();
    store.set(strCat("bell/", rank), setup.bell->describe());
  }

  // 4. TCP: on first use (the lower rank connects then; our Acceptor thread answers the
  // lower ones), or eagerly: connect upwards, then accept from below.
  const bool tcpOnFirstUse = xcclParamRuntimeConnect() != 0 && !netListener;
  std::set<int> lower;
  bool remote = false;
  for (int p = 0; p < nranks; ++p) {
    if (p == rank || local[p]) continue;
    remote = true;
    if (netListener) continue;  // below
    if (tcpOnFirstUse) {
      setup.onFirstUse[p] = kFirstUseTcp;
      if (p < rank) lower.insert(p);
      continue;
    }
    if (p < rank) {
      lower.insert(p);
      continue;
    }
    const std::string& addr = setup.peers[p].tcpAddr;
    net::WaitCtx ctx{deadline, &abortFlag,
                     strCat("rank ", rank, ": TCP connect to rank ", p, " (", addr, ")")};
    setup.connections[p] = tcp::connectPeer(rank, p, addr, secret, device, ctx);
  }
  if (netListener) {  // every remote pair through the plugin, now
    std::set<int> remotes;
    std::vector<std::string> handles(nranks), names(nranks);
    for (int p = 0; p < nranks; ++p) {
      if (p == rank || local[p]) continue;
      remotes.insert(p);
      handles[p] = setup.peers[p].net;
      names[p] = setup.peers[p].hostname;
    }
    if (!remotes.empty()) {
      net::WaitCtx ctx{
          deadline, &abortFlag,
          strCat("rank ", rank, ": connecting through the ", plugin->name, " network plugin")};
      auto made = netListener->connectAll(rank, remotes, handles, names, secret, device, ctx);
      for (auto& [p, conn] : made) setup.connections[p] = std::move(conn);
    }
    netListener.reset();
    listener->close();
  } else if (tcpOnFirstUse && remote) {  // it also answers probes: keep listening for none
    setup.acceptor =
        std::make_shared<tcp::Acceptor>(std::move(listener), rank, lower, secret, device);
  } else {
    if (!lower.empty()) {
      net::WaitCtx ctx{
          deadline, &abortFlag,
          strCat("rank ", rank, ": accepting TCP connections on ", listener->address())};
      auto accepted = listener->acceptPeers(rank, lower, secret, device, ctx);
      for (auto& [p, conn] : accepted) setup.connections[p] = std::move(conn);
    }
    listener->close();
  }

  // 5. Map the local peers' rings.
  for (auto& [p, ring] : rings) {
    std::string desc =
        storeGet(store, strCat("shm/", p, "/", rank), rank, deadline, abortFlag, p, watch);
    auto peerBell = shm::Doorbell::open(
        storeGet(store, strCat("bell/", p), rank, deadline, abortFlag, p, watch), rank, p);
    setup.connections[p] = shm::makeConnection(rank, p, setup.peers[p].pid, *ring, desc, secret,
                                               device, std::move(peerBell));
  }

  for (int p = 0; p < nranks; ++p) {
    if (p == rank) continue;
    if (setup.onFirstUse[p] == kFirstUseTcp) {
      XCCL_INFO(INIT, "rank ", rank, " -> ", p, " via TCP ", setup.peers[p].tcpAddr,
                " on first use");
    } else if (setup.onFirstUse[p]) {
      XCCL_INFO(INIT, "rank ", rank, " -> ", p, " via SHM, connected on first use");
    } else if (local[p]) {
      XCCL_INFO(INIT, "rank ", rank, " -> ", p, " via SHM");
    } else if (plugin != nullptr) {
      XCCL_INFO(INIT, "rank ", rank, " -> ", p, " via NET (", plugin->name, " network plugin)");
    } else {
      XCCL_INFO(INIT, "rank ", rank, " -> ", p, " via TCP ", setup.peers[p].tcpAddr);
    }
  }
  // 6. Done with the store. 7. Wait until every local peer is done too: it opens our rings
  // through /proc/<our pid>/fd, so we must not return (and perhaps destroy the communicator,
  // closing them) before it has.
  store.set(strCat(kDoneKeyPrefix, rank), std::to_string(nranks));
  for (auto& [p, ring] : rings)
    storeGet(store, strCat(kDoneKeyPrefix, p), rank, deadline, abortFlag, p, watch);
  return setup;
}

std::unique_ptr<Connection> connectOnFirstUse(PeerSetup& setup, int rank, int peer, Device& device,
                                              const Deadline& deadline,
                                              const std::atomic<bool>& abortFlag,
                                              int64_t silentLimitMs) {
  XCCL_CHECK(
      peer >= 0 && peer < static_cast<int>(setup.onFirstUse.size()) && setup.onFirstUse[peer],
      "rank ", rank, ": rank ", peer, " is not connected on first use");
  const PeerInfo& info = setup.peers[peer];
  if (setup.onFirstUse[peer] == kFirstUseTcp) {
    // While waiting for the pair, the peer's process is watched as a derivation watches its
    // members (a probe of its bootstrap service).
    auto watch = std::make_shared<MemberWatch>();
    watch->services = {info.service};
    watch->who = {strCat("rank ", peer, " (pid ", info.pid, " on ", info.hostname, ")")};
    watch->silentLimitMs = silentLimitMs;
    watch->consequence = "";
    auto lost = [watch, rank]() -> std::string {
      try {
        watch->check(rank, 0, "its TCP connection (made on first use)");
        return "";
      } catch (const RemoteError& e) {
        return e.what();
      }
    };
    const int64_t left = deadline.remainingMs();
    const int64_t connectMs =
        silentLimitMs > 0 && (left < 0 || silentLimitMs < left) ? silentLimitMs : left;
    return tcp::makeLazyConnection(rank, peer, info.tcpAddr, setup.secret, device,
                                   setup.acceptor.get(), connectMs, lost);
  }
  XCCL_CHECK(setup.arena, "rank ", rank, ": rank ", peer, " has no arena to connect through");
  const size_t semi = info.shm.find(';');
  if (semi == std::string::npos) {
    throw RemoteError(strCat("rank ", rank, ": rank ", peer, "'s shared-memory record '",
                             info.shm.substr(0, 64), "' is malformed"));
  }
  try {
    auto peerBell = shm::Doorbell::open(info.shm.substr(semi + 1), rank, peer);
    return setup.arena->connect(peer, info.pid, info.shm.substr(0, semi), device,
                                std::move(peerBell), deadline, abortFlag);
  } catch (const IoError& e) {  // its memfds are gone: so is its communicator
    throw RemoteError(strCat("rank ", rank, ": rank ", peer, " (pid ", info.pid, ") ",
                             processDead(info.pid) ? "died" : "closed its communicator",
                             " before this rank first needed the pair (", e.what(), ")"));
  }
}

}  // namespace xccl
