// ThreadWorld: thread-ranks that keep their communicators across many operations.
#include <thread>

#include "collectives/bootstrap/bootstrap_internal.h"
#include "test_collectives_common.h"

namespace xccl_coll_test {

ThreadWorld::ThreadWorld(int n, std::function<std::string(int)> hostOf, int64_t timeoutMs)
    : n_(n), comms_(n, nullptr) {
  xccl_test::runThreads(n, [&](int rank) {
    if (hostOf) xccl::setThreadHostIdOverride(hostOf(rank));
    comms_[rank] = xccl_test::initThreadComm(store_, n, rank, "world/", timeoutMs);
    if (hostOf) xccl::setThreadHostIdOverride("");
  });
}

ThreadWorld::~ThreadWorld() {
  std::vector<std::thread> threads;
  for (xcclComm_t c : comms_) {
    if (c != nullptr) threads.emplace_back([c] { xcclCommDestroy(c); });
  }
  for (auto& t : threads) t.join();
}

void ThreadWorld::run(const std::function<void(int, xcclComm_t)>& fn, int timeoutSec) {
  xccl_test::runThreads(
      n_, [&](int rank) { fn(rank, comms_[rank]); }, timeoutSec);
}

}  // namespace xccl_coll_test
