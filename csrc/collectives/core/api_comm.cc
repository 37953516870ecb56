// Communicator creation and destruction. Creation waits for the other ranks (the unique-id
// store, the secret a store-based rendezvous publishes, the connections) no longer than the
// communicator's timeout: xcclConfig_t.timeout_ms when set, else XCCL_TIMEOUT_MS.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
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
#include "common/param.h"

namespace xccl {
namespace {

// What xcclConfig_t.blocking = XCCL_CONFIG_UNDEF_INT, a zero-initialised config and a NULL
// one mean (NCCL_COMM_BLOCKING's role).
XCCL_PARAM(CommBlocking, "COMM_BLOCKING", 1, 0, 1)

bool blockingOf(const xcclConfig_t* config) {
  if (config != nullptr && XCCL_CONFIG_HAS(config, blocking) &&
      config->blocking != XCCL_CONFIG_UNDEF_INT) {
    XCCL_CHECK_ARG(config->blocking == 0 || config->blocking == 1, "config.blocking ",
                   config->blocking, " must be 0 or 1");
    return config->blocking == 1;
  }
  return xcclParamCommBlocking() != 0;
}

// Makes one rank's communicator: make(cancel) returns it (cancel: null when blocking). At once
// (returns false), or, non-blocking, on a thread that owns a copy of everything it reads but
// the caller's store callbacks (returns true: the caller answers xcclInProgress).
bool create(xcclComm_t* out, const xcclConfig_t* config, int rank,
            std::function<std::unique_ptr<Comm>(const std::atomic<bool>*)> make) {
  if (blockingOf(config)) {
    auto c = std::make_unique<xcclComm>();
    c->impl = make(nullptr);
    *out = c.release();
    return false;
  }
  auto c = std::make_unique<xcclComm>();
  c->pending = std::make_unique<PendingCreation>();
  xcclComm* h = c.get();
  PendingCreation* p = h->pending.get();
  p->thread = std::thread([h, p, rank, make = std::move(make)] {
    try {
      h->impl = make(&p->cancel);
      p->state.store(xcclSuccess, std::memory_order_release);
      return;
    } catch (const Error& e) {
      p->error = e.what();
      p->state.store(toResult(e.kind()), std::memory_order_release);
    } catch (const std::exception& e) {
      p->error = strCat("internal error: ", e.what());
      p->state.store(xcclInternalError, std::memory_order_release);
    }
    XCCL_WARN(INIT, "rank ", rank, ": non-blocking communicator creation failed: ", p->error);
  });
  *out = c.release();
  return true;
}

void checkRankOf(int rank, int nranks) {
  XCCL_CHECK_ARG(nranks > 0 && rank >= 0 && rank < nranks, "rank ", rank, " / nranks ", nranks,
                 " out of range");
}

// The config a creation thread keeps: its own copy of the name the caller's config points to.
struct OwnedConfig {
  xcclConfig_t cfg;
  std::string name;
  explicit OwnedConfig(const xcclConfig_t* config) : cfg(readConfig(config)) {
    if (cfg.name != nullptr) name = cfg.name;
  }
  xcclConfig_t get() const {
    xcclConfig_t c = cfg;
    c.name = cfg.name != nullptr ? name.c_str() : nullptr;
    return c;
  }
};

}  // namespace

void stopCreation(xcclComm_t comm) {
  if (comm == nullptr || !comm->pending || !comm->pending->thread.joinable()) return;
  comm->pending->cancel.store(true);
  comm->pending->thread.join();
}

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
  bool inProgress = false;
  xcclResult_t r = guarded("xcclCommInitRank", [&] {
    XCCL_CHECK_ARG(comm != nullptr, "comm is NULL");
    checkRankOf(rank, nranks);
    OwnedConfig owned(config);
    inProgress = create(comm, config, rank, [=](const std::atomic<bool>* cancel) {
      const xcclConfig_t cfg = owned.get();
      auto store = connectUniqueIdStore(commId, Deadline::after(timeoutMsOf(&cfg)), cancel);
      return std::make_unique<Comm>(*store, rank, nranks, uniqueIdSecret(commId), cfg, nullptr,
                                    cancel);
    });
  });
  return r == xcclSuccess && inProgress ? xcclInProgress : r;
}

xcclResult_t xcclCommInitRank(xcclComm_t* comm, int nranks, xcclUniqueId commId, int rank) {
  return xcclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

xcclResult_t xcclCommInitRankStore(xcclComm_t* comm, int nranks, int rank, const xcclStore_t* store,
                                   const char* prefix, const xcclConfig_t* config) {
  bool inProgress = false;
  xcclResult_t r = guarded("xcclCommInitRankStore", [&] {
    XCCL_CHECK_ARG(comm != nullptr && store != nullptr && store->set && store->get,
                   "comm, store and its callbacks must be non-NULL");
    checkRankOf(rank, nranks);
    // A setting every rank gets wrong alike (XCCL_SOCKET_IFNAME naming no interface) fails
    // here, before the store: otherwise rank 0 failing first leaves the others waiting on
    // its secret and reporting a lost store instead of the real cause.
    net::localAddress();
    OwnedConfig owned(config);
    const xcclStore_t callbacks = *store;  // the callbacks' ctx must outlive the creation
    const std::string scope = prefix ? prefix : "";
    inProgress = create(comm, config, rank, [=](const std::atomic<bool>* cancel) {
      const xcclConfig_t cfg = owned.get();
      auto s = makeCallbackStore(callbacks, scope);
      // Rank 0 draws the communicator secret; the store is the trusted channel. The store
      // may still hold an earlier initialisation's records under this prefix (a
      // re-initialisation, or a restarted job whose store outlived its processes): the other
      // ranks wait past a stale secret record (bootstrap/rendezvous.cc), and every other
      // record of this initialisation lives under a scope derived from its secret, so
      // holding the current secret means reading only current records.
      std::string secret;
      if (rank == 0) {
        secret = publishSecret(*s);
      } else {
        auto watched = makeCancellableStore(*s, cancel);
        secret = awaitSecret(*watched, rank, Deadline::after(timeoutMsOf(&cfg)));
      }
      auto scoped = makeScopedStore(*s, recordScope(secret));
      try {
        auto c = std::make_unique<Comm>(*scoped, rank, nranks, secret, cfg, nullptr, cancel);
        retireSecret(secret);
        return c;
      } catch (...) {
        retireSecret(secret);
        throw;
      }
    });
  });
  return r == xcclSuccess && inProgress ? xcclInProgress : r;
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
    const xcclConfig_t base = readConfig(config);
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
          auto c = std::make_unique<xcclComm>();
          c->impl = std::make_unique<Comm>(*store, i, ndev, secret, cfg);
          made[i] = c.release();
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
    stopCreation(comm);
    forgetGroupedOps(comm->impl.get());
    comm->impl.reset();
    delete comm;
  });
}

xcclResult_t xcclCommAbort(xcclComm_t comm) {
  return guarded("xcclCommAbort", [&] {
    if (comm == nullptr) return;
    stopCreation(comm);
    forgetGroupedOps(comm->impl.get());
    if (comm->impl) comm->impl->abort();
    comm->impl.reset();
    delete comm;
  });
}

xcclResult_t xcclCommInterrupt(xcclComm_t comm) {
  return guarded("xcclCommInterrupt", [&] {
    // A non-blocking creation still running is cancelled (it fails soon after).
    if (comm != nullptr && comm->pending &&
        comm->pending->state.load(std::memory_order_acquire) == xcclInProgress) {
      comm->pending->cancel.store(true);
      return;
    }
    commOf(comm).abort();
  });
}

xcclResult_t xcclCommQueryProperties(xcclComm_t comm, xcclCommProperties_t* props) {
  return guarded("xcclCommQueryProperties", [&] {
    XCCL_CHECK_ARG(props != nullptr, "props is NULL");
    XCCL_CHECK_ARG(props->magic == XCCL_COMM_PROPERTIES_MAGIC &&
                       props->size >= offsetof(xcclCommProperties_t, rank),
                   "props was not made by XCCL_COMM_PROPERTIES_INITIALIZER (magic ", props->magic,
                   ", size ", props->size, ")");
    const xcclCommProperties_t full = commOf(comm).properties();
    // The caller's fields only: the first `size` bytes, its header, kept as it wrote them.
    const size_t head = offsetof(xcclCommProperties_t, rank);
    const size_t n = std::min(props->size, sizeof(full));
    std::memcpy(reinterpret_cast<char*>(props) + head, reinterpret_cast<const char*>(&full) + head,
                n - head);
  });
}

xcclResult_t xcclCommGetStats(xcclComm_t comm, xcclCommStats_t* stats) {
  return guarded("xcclCommGetStats", [&] {
    XCCL_CHECK_ARG(stats != nullptr, "stats is NULL");
    *stats = commOf(comm).stats();
  });
}

}  // extern "C"
