// For tests of the transport: connectPeers, then every pair it left for first use connected
// at once, so that every peer has its Connection as after an eager set-up. Like an eager
// set-up it returns only when every rank has connected (a store barrier): a rank that
// returned and closed its arena while a slower peer had yet to open it made that peer's
// first-use connect fail (seen once under ASan, ShmLane.UsedWhenAskedFor...).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/device/device.h"
#include "common/error.h"
#include "test_util.h"

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

// Two ranks (threads) holding different secrets try to connect (connectEveryPeer, waiting up
// to deadlineMs); the error each saw, "" for a rank that connected.
inline std::vector<std::string> connectWithDifferentSecrets(xccl::Store& store,
                                                            int64_t deadlineMs) {
  std::atomic<bool> abortFlag{false};
  std::vector<std::string> errors(2);
  runThreads(
      2,
      [&](int rank) {
        try {
          connectEveryPeer(store, rank, 2, rank == 0 ? "secret-a" : "secret-b", xccl::getDevice(-1),
                           xccl::Deadline::after(deadlineMs), abortFlag);
        } catch (const xccl::Error& e) {
          errors[rank] = e.what();
        }
      },
      60);
  return errors;
}

}  // namespace xccl_test
