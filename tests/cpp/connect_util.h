// For tests of the transport: connectPeers, then every pair it left for first use connected
// at once, so that every peer has its Connection as after an eager set-up. Like an eager
// set-up it returns only when every rank has connected (a store barrier): a rank that
// returned and closed its arena while a slower peer had yet to open it made that peer's
// first-use connect fail (seen once under ASan, ShmLane.UsedWhenAskedFor...).
#pragma once

#include <atomic>
#include <string>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/device/device.h"

namespace xccl_test {

inline xccl::PeerSetup connectEveryPeer(xccl::Store& store, int rank, int nranks,
                                        const std::string& secret, xccl::Device& device,
                                        const xccl::Deadline& deadline,
                                        const std::atomic<bool>& abortFlag) {
  xccl::PeerSetup s = xccl::connectPeers(store, rank, nranks, secret, device, deadline, abortFlag);
  for (int p = 0; p < nranks; ++p) {
    if (s.onFirstUse[p]) {
      s.connections[p] = xccl::connectOnFirstUse(s, rank, p, device, deadline, abortFlag);
    }
  }
  store.set("test/connected/" + std::to_string(rank), "1");
  for (int p = 0; p < nranks; ++p) store.get("test/connected/" + std::to_string(p), deadline);
  return s;
}

}  // namespace xccl_test
