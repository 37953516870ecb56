// Communicator creation and destruction. Creation waits for the other ranks (the unique-id
// store, the secret a store-based rendezvous publishes, the connections) no longer than the
// communicator's timeout: xcclConfig_t.timeout_ms when set, else XCCL_TIMEOUT_MS.
#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api_edge.h"
#include "collectives/bootstrap/bootstrap.h"
#include "collectives/bootstrap/bootstrap_internal.h"
#include "collectives/device/device.h"
#include "collectives/transport/tcp/socket.h"
#include "common/clock.h"

namespace xccl {
namespace {

void initComm(xcclComm_t* out, int nranks, int rank, Store& store, const std::string& secret,
              const xcclConfig_t* config) {
  xcclConfig_t cfg{};
  cfg.device = -1;
  if (config) cfg = *config;
  auto c = std::make_unique<xcclComm>();
  c->impl = std::make_unique<Comm>(store, rank, nranks, secret, cfg);
  *out = c.release();
}

void checkRankOf(int rank, int nranks) {
  XCCL_CHECK_ARG(nranks > 0 && rank >= 0 && rank < nranks, "rank ", rank, " / nranks ", nranks,
                 " out of range");
}

}  // namespace
}  // namespace xccl

using namespace xccl;  // NOLINT: this file is the API edge

extern "C" {

xcclResult_t xcclGetUniqueId(xcclUniqueId* id) {
  return guarded("xcclGetUniqueId", [&] {
    XCCL_CHECK_ARG(id != nullptr, "uniqueId is NULL");
    createUniqueId(id);
  });
}

xcclResult_t xcclCommInitRankConfig(xcclComm_t* comm, int nranks, xcclUniqueId commId, int rank,
                                    const xcclConfig_t* config) {
  return guarded("xcclCommInitRank", [&] {
    XCCL_CHECK_ARG(comm != nullptr, "comm is NULL");
    checkRankOf(rank, nranks);
    auto store = connectUniqueIdStore(commId, Deadline::after(timeoutMsOf(config)));
    initComm(comm, nranks, rank, *store, uniqueIdSecret(commId), config);
  });
}

xcclResult_t xcclCommInitRank(xcclComm_t* comm, int nranks, xcclUniqueId commId, int rank) {
  return xcclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

xcclResult_t xcclCommInitRankStore(xcclComm_t* comm, int nranks, int rank, const xcclStore_t* store,
                                   const char* prefix, const xcclConfig_t* config) {
  return guarded("xcclCommInitRankStore", [&] {
    XCCL_CHECK_ARG(comm != nullptr && store != nullptr && store->set && store->get,
                   "comm, store and its callbacks must be non-NULL");
    checkRankOf(rank, nranks);
    // A setting every rank gets wrong alike (XCCL_SOCKET_IFNAME naming no interface) fails
    // here, before the store: otherwise rank 0 failing first leaves the others waiting on
    // its secret and reporting a lost store instead of the real cause.
    net::localAddress();
    auto s = makeCallbackStore(*store, prefix ? prefix : "");
    // Rank 0 draws the communicator secret; the store is the trusted channel. The store may
    // still hold an earlier initialisation's records under this prefix (a re-initialisation,
    // or a restarted job whose store outlived its processes): the other ranks wait past a
    // stale secret record (bootstrap/rendezvous.cc), and every other record of this
    // initialisation lives under a scope derived from its secret, so holding the current
    // secret means reading only current records.
    std::string secret =
        rank == 0 ? publishSecret(*s) : awaitSecret(*s, rank, Deadline::after(timeoutMsOf(config)));
    auto scoped = makeScopedStore(*s, recordScope(secret));
    try {
      initComm(comm, nranks, rank, *scoped, secret, config);
    } catch (...) {
      retireSecret(secret);
      throw;
    }
    retireSecret(secret);
  });
}

xcclResult_t xcclCommInitAll(xcclComm_t* comms, int ndev, const int* devlist) {
  return xcclCommInitAllConfig(comms, ndev, devlist, nullptr);
}

xcclResult_t xcclCommInitAllConfig(xcclComm_t* comms, int ndev, const int* devlist,
                                   const xcclConfig_t* config) {
  return guarded("xcclCommInitAll", [&] {
    XCCL_CHECK_ARG(comms != nullptr, "comms is NULL");
    XCCL_CHECK_ARG(ndev > 0, "ndev ", ndev, " must be positive");
    for (int i = 0; devlist != nullptr && i < ndev; ++i) {
      for (int j = 0; j < i; ++j) {
        XCCL_CHECK_ARG(devlist[i] >= 0 && devlist[i] != devlist[j], "devlist[", i,
                       "] = ", devlist[i], ": devices must be distinct and non-negative");
      }
    }
    const xcclConfig_t base = config != nullptr ? *config : xcclConfig_t{};
    // A bad device fails here, before any rank waits for another.
    for (int i = 0; i < ndev; ++i) {
      getDevice(deviceKind(base.deviceType), devlist != nullptr ? devlist[i] : i);
    }
    // Initialisation is collective: every rank connects to every other, so each runs on
    // its own thread against one in-memory store.
    auto store = makeMemoryStore();
    const std::string secret = randomSecret();
    std::vector<xcclComm_t> made(ndev, nullptr);
    std::vector<std::string> errors(ndev);
    std::vector<std::thread> threads;
    threads.reserve(ndev);
    for (int i = 0; i < ndev; ++i) {
      threads.emplace_back([&, i] {
        xcclConfig_t cfg = base;
        cfg.device = devlist != nullptr ? devlist[i] : i;
        try {
          initComm(&made[i], ndev, i, *store, secret, &cfg);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < ndev; ++i) {
      if (errors[i].empty()) continue;
      for (xcclComm_t c : made) {
        if (c != nullptr) xcclCommAbort(c);
      }
      throw InvalidUsage(
          strCat("rank ", i, " (device ", devlist ? devlist[i] : i, "): ", errors[i]));
    }
    std::copy(made.begin(), made.end(), comms);
  });
}

xcclResult_t xcclCommDestroy(xcclComm_t comm) {
  return guarded("xcclCommDestroy", [&] {
    if (comm == nullptr) return;
    forgetGroupedOps(comm->impl.get());
    comm->impl.reset();
    delete comm;
  });
}

xcclResult_t xcclCommAbort(xcclComm_t comm) {
  return guarded("xcclCommAbort", [&] {
    if (comm == nullptr) return;
    forgetGroupedOps(comm->impl.get());
    if (comm->impl) comm->impl->abort();
    comm->impl.reset();
    delete comm;
  });
}

xcclResult_t xcclCommInterrupt(xcclComm_t comm) {
  return guarded("xcclCommInterrupt", [&] { commOf(comm).abort(); });
}

xcclResult_t xcclCommGetStats(xcclComm_t comm, xcclCommStats_t* stats) {
  return guarded("xcclCommGetStats", [&] {
    XCCL_CHECK_ARG(stats != nullptr, "stats is NULL");
    *stats = commOf(comm).stats();
  });
}

}  // extern "C"
