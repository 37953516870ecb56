// Barriers.cpp — barrier (a collective on the device the group runs on, or the host) and
// monitoredBarrier (store-based, naming the ranks that did not arrive).
#include <algorithm>
#include <sstream>

#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::barrier(const c10d::BarrierOptions& opts) {
  // The device, as ProcessGroupNCCL picks it (torch's dispatcher passes device_ids, not the
  // device): the first of device_ids, else the bound device, else the device the group
  // already uses. There the barrier is ordered after the group's device operations and its
  // wait() blocks the host until it is done; with none of them, the host communicator.
  LaunchExtra extra;
  auto bound = getBoundDeviceId();
  std::optional<c10::Device> inUse;
  {
    std::lock_guard<std::mutex> g(devMu_);
    if (devComm_) inUse = devComm_->device;
  }
  if (opts.device && isAccelerator(*opts.device)) {
    extra.device = opts.device;
  } else if (!opts.device_ids.empty()) {
    // device_ids name indices: of the bound device's type, else the one in use, else CUDA
    // where torch has it (as ProcessGroupNCCL), else xdev.
    c10::DeviceType type = bound && isAccelerator(*bound) ? bound->type()
                           : inUse                        ? inUse->type()
                           : at::hasCUDA()                ? c10::DeviceType::CUDA
                                                          : c10::DeviceType::PrivateUse1;
    extra.device = c10::Device(type, static_cast<c10::DeviceIndex>(opts.device_ids[0]));
  } else if (bound && isAccelerator(*bound)) {
    extra.device = bound;
  } else {
    extra.device = inUse;
  }
  extra.callerWaits = !opts.asyncOp;
  return launch({.name = "barrier",
                 .type = c10d::OpType::BARRIER,
                 .timeout = opts.timeout,
                 .enqueue = [&](const Target& tg) { return xcclBarrier(tg.comm, tg.stream); },
                 .extra = extra});
}

void ProcessGroupXCCL::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  // Store-based, like Gloo's: every rank checks in; rank 0 waits for each one (so it can name
  // the ranks that did not arrive), then releases the others.
  const char* op = "monitored_barrier";
  auto timeout = opTimeout(opts.timeout);
  uint64_t id = ++barrierCount_;
  std::string base = "xccl_mbarrier/" + std::to_string(id) + "/";
  int rank = getRank(), size = getSize();
  if (rank != 0) {
    store_->set(base + std::to_string(rank), std::vector<uint8_t>{1});
    try {
      store_->wait({base + "release"}, timeout);
    } catch (const std::exception& e) {
      throwDist(std::string("xccl ") + op + ": rank " + std::to_string(rank) +
                " was not released by rank 0 within " + std::to_string(timeout.count()) +
                " ms: " + e.what());
    }
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < size; ++r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      store_->wait({base + std::to_string(r)}, std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      missing.push_back(r);
      if (!waitAllRanks) break;
    }
  }
  if (!missing.empty()) {
    std::ostringstream os;
    os << "xccl " << op << ": rank(s) ";
    for (size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << missing[i];
    os << " failed to pass monitoredBarrier in " << timeout.count() << " ms";
    throwDist(os.str());
  }
  store_->set(base + "release", std::vector<uint8_t>{1});
}

}  // namespace torch_xccl
