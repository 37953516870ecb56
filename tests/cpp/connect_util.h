// For tests of the transport: connectPeers, then every pair it left for first use connected
// at once, so that every peer has its Connection as after an eager set-up.
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
  return s;
}

}  // namespace xccl_test
