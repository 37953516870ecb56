// The communicator's connections to its peers: made on first use (the arena's pairs,
// transport/connect.cc), noted and closed when it fails or is revoked, and counted
// (xcclCommGetStats). peers_.connections is guarded by connMu_ from creation on.
#include <dirent.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/device/device.h"
#include "collectives/transport/tcp/connection.h"
#include "comm.h"
#include "common/error.h"

namespace xccl {

namespace {

// Entries of a /proc directory, less "." and ".."; -1 when it cannot be read.
int countDirEntries(const char* path) {
  DIR* d = ::opendir(path);
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

}  // namespace

Connection* Comm::connectOnFirstUse(int peer) {
  std::lock_guard<std::mutex> g(connMu_);
  if (closed_) {
    throw InvalidUsage(
        strCat("rank ", rank_, ": communicator closed; not connecting to rank ", peer));
  }
  auto& slot = peers_.connections[peer];
  if (!slot) {
    slot = xccl::connectOnFirstUse(peers_, rank_, peer, *engine_, Deadline::after(timeoutMs_),
                                   abort_, silenceLimitMs());
    heartbeat_->add(peer, slot.get());
  }
  return slot.get();
}

xcclCommStats_t Comm::stats() {
  xcclCommStats_t st{};
  st.peers = nranks_ - 1;
  {
    std::lock_guard<std::mutex> g(connMu_);
    for (int p = 0; p < nranks_; ++p) {
      const auto& c = peers_.connections[p];
      if (!c || !c->connected()) {  // a TCP pair made on first use waits for its handshake
        if (p != rank_ && peers_.onFirstUse[p]) ++st.onFirstUse;
        continue;
      }
      (std::string(c->kind()) == "SHM" ? st.shmConnected : st.tcpConnected)++;
      st.shmBytes += static_cast<int64_t>(c->ownedSharedBytes());
    }
    if (peers_.arena) st.shmBytes += static_cast<int64_t>(peers_.arena->residentBytes());
  }
  st.processFds = countDirEntries("/proc/self/fd");
  st.processThreads = countDirEntries("/proc/self/task");
  return st;
}

xcclCommProperties_t Comm::properties() const {
  xcclCommProperties_t p{};
  p.rank = rank_;
  p.nRanks = nranks_;
  const std::string kind = device_->name();
  p.deviceType = kind == "cuda" ? xcclDeviceCuda : kind == "xdev" ? xcclDeviceXdev : xcclDeviceHost;
  p.device = device_->ordinal();
  std::vector<std::string> hostIds;
  for (const PeerInfo& info : peers_.peers) hostIds.push_back(info.hostId);
  const std::vector<int> hostOf = hostIndexOf(hostIds);
  for (int r = 0; r < nranks_; ++r) {
    p.nHosts = std::max(p.nHosts, hostOf[r] + 1);
    if (hostOf[r] != hostOf[rank_]) continue;
    if (r < rank_) ++p.localRank;
    ++p.localRanks;
  }
  p.reproducible = exchange_->tuning().reproducible ? 1 : 0;
  p.registeredInPlace = p.deviceType != xcclDeviceCuda ? 1 : 0;
  p.windows = device_->hostAddressable() ? 1 : 0;
  p.timeoutMs = timeoutMs_;
  return p;
}

void Comm::revoke() {
  const std::string why = strCat("rank ", rank_, " revoked the communicator");
  // The note first: a peer that finds the connection closed reads why.
  {
    std::lock_guard<std::mutex> g(connMu_);
    for (auto& c : peers_.connections) {
      if (!c) continue;
      try {
        c->leaveNote(why);
      } catch (const std::exception&) {
      }
    }
    if (peers_.arena) peers_.arena->leaveNoteAll(why);
  }
  fail(xcclInvalidUsage, why);
  abort();
}

void Comm::noteUnconnected(const std::string& why) {
  struct Target {
    int peer;
    std::string addr;
  };
  std::vector<Target> up;
  {
    std::lock_guard<std::mutex> g(connMu_);
    if (closed_ || !peers_.acceptor) return;  // no TCP pairs on first use
    // Lower peers connecting later get it from our acceptor; higher ones wait for us.
    peers_.acceptor->leaveNote(why);
    for (int p = rank_ + 1; p < nranks_; ++p) {
      const auto& c = peers_.connections[p];
      if (peers_.onFirstUse[p] == kFirstUseTcp && (!c || !c->connected())) {
        up.push_back({p, peers_.peers[p].tcpAddr});
      }
    }
  }
  if (up.empty() || noteThread_.joinable()) return;
  // Off the failing thread: a connect to a stopped peer may take the heartbeat timeout.
  const int64_t limit = silenceLimitMs();
  const int64_t ms = limit > 0 ? std::min<int64_t>(limit, 2000) : 2000;
  noteThread_ = std::thread([up, why, ms, rank = rank_, secret = peers_.secret, device = engine_] {
    for (const Target& t : up) tcp::deliverNote(rank, t.peer, t.addr, secret, *device, ms, why);
  });
}

void Comm::closeConnections() {
  std::lock_guard<std::mutex> g(connMu_);
  closed_ = true;
  if (peers_.acceptor) peers_.acceptor->close();  // a peer connecting now is refused
  for (auto& c : peers_.connections) {
    if (c) c->close();
  }
  if (peers_.arena) peers_.arena->closeAll();  // the peers that never connected see it too
}

}  // namespace xccl
