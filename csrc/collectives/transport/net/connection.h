// Pairs on other hosts through a network plugin (xccl_net.h): a Connection (transport.h)
// over one send communicator and one receive communicator of an xcclNet_v1 table.
//
// Send side: a ring of XCCL_NET_BUFFSIZE bytes; what the engine commits is posted as
// messages of at most XCCL_NET_CHUNK bytes (never across the ring's end), a few in flight,
// released when the plugin says they are sent. Receive side: XCCL_NET_BUFFSIZE / chunk slots,
// each with a receive posted; the engine reads a completed slot in place, and the slot is
// posted again once read. The byte stream is cut where the sender's commits fell, so a frame
// header or an element may end up split between two slots: each slot keeps 64 bytes of room
// in front, where the few bytes left at the end of one slot are moved so that they join the
// next slot's bytes contiguously.
//
// Set-up (connectPeers, XCCL_NET_PLUGIN set): every rank listens and publishes the handle and
// a fresh nonce; each connects to every remote peer and sends a hello proving the
// communicator's secret for that direction; each accepts one connection per remote peer and
// checks its hello. All pairs are made at creation (no first use through a plugin).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "collectives/transport/tcp/socket.h"
#include "collectives/transport/transport.h"
#include "xccl_net.h"

namespace xccl {

class Device;

namespace net {

// This rank's listener on the plugin's device 0 for one communicator's set-up.
class NetListener {
 public:
  explicit NetListener(const xcclNet_v1_t* table);
  ~NetListener();
  NetListener(const NetListener&) = delete;
  NetListener& operator=(const NetListener&) = delete;

  // What PeerInfo::net carries: the handle and this set-up's nonce.
  const std::string& record() const { return record_; }

  // Connects to every rank in `peers` (records[p]: their PeerInfo::net) and accepts one
  // connection from each, checking that it proves `secret`. Returns one Connection per peer.
  std::map<int, std::unique_ptr<Connection>> connectAll(int rank, const std::set<int>& peers,
                                                        const std::vector<std::string>& records,
                                                        const std::vector<std::string>& names,
                                                        const std::string& secret, Device& device,
                                                        const WaitCtx& ctx);

 private:
  const xcclNet_v1_t* net_;
  void* listen_ = nullptr;
  std::string nonce_;
  std::string record_;
};

// A Connection over an established pair (takes both communicators).
std::unique_ptr<Connection> makeNetConnection(const xcclNet_v1_t* table, int rank, int peer,
                                              std::string name, void* sendComm, void* recvComm,
                                              Device& device);

}  // namespace net
}  // namespace xccl
