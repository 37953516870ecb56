// DeviceComms.cpp — the group's communicators beyond the host one: which one an operation
// uses (deviceOf, commFor), making xdev and CUDA communicators (lazily, or eagerly for
// init_process_group(device_id=...)), dist.split_group and dist.shrink_group.
#include <algorithm>
#include <future>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

c10::Device ProcessGroupXCCL::deviceOf(const char* opName, const std::vector<at::Tensor>& outputs,
                                       const std::vector<at::Tensor>& inputs,
                                       const LaunchExtra& extra) {
  // The data tensors decide; a cpu tensor beside device data can only be a host-side scalar
  // (the PREMUL_SUM factor) — the collectives already required their data on one device.
  std::optional<c10::Device> dev;
  if (extra.device && isAccelerator(*extra.device)) dev = *extra.device;
  for (const auto* list : {&outputs, &inputs}) {
    for (const auto& t : *list) {
      if (!onAccelerator(t)) continue;
      if (!dev) dev = t.device();
      TORCH_CHECK(t.device() == *dev, "xccl ", opName, ": tensors must be on one device, got ",
                  *dev, " and ", t.device());
    }
  }
  if (!dev) return c10::Device(c10::kCPU);
  TORCH_CHECK(dev->has_index(), "xccl ", opName, ": device ", *dev, " has no index");
  auto bound = getBoundDeviceId();
  TORCH_CHECK(!bound || !isAccelerator(*bound) || *bound == *dev, "xccl ", opName,
              ": the tensors are on ", *dev, " but group '", state_->name, "' is bound to ", *bound,
              " (init_process_group(device_id=...)); move them to ", *bound);
  return *dev;
}

std::shared_ptr<DeviceComm> ProcessGroupXCCL::commFor(const char* opName,
                                                      const c10::Device& device) {
  std::lock_guard<std::mutex> g(devMu_);
  TORCH_CHECK(!devComm_ || devComm_->device == device, "xccl ", opName, ": group '", state_->name,
              "' already runs on ", devComm_ ? devComm_->device.str() : "",
              " in this process, and a process drives one device per group (as with NCCL); "
              "this call is on ",
              device);
  if (!devComm_) devComm_ = makeDeviceComm(device);
  return devComm_;
}

// Every rank of the group makes it at the same point: its first operation on the device
// (point-to-point included: all ranks must reach one, as NCCL requires of a group's first
// batch_isend_irecv), or eagerly at init_process_group(device_id=...). One communicator for
// collectives and point-to-point keeps them ordered with each other and avoids the init
// cycles that per-pair communicators made lazily by a ring of sends would have.
// It is a split of the host communicator (every rank, colour 0, same order) with the device's
// configuration: no round through torch's store, and a member that dies meanwhile fails the
// creation on the others at once, naming it (libxccl watches the members' processes), where
// a rendezvous through the store could only wait for its record until the timeout.
std::shared_ptr<DeviceComm> ProcessGroupXCCL::makeDeviceComm(const c10::Device& device) {
  auto dc = std::make_shared<DeviceComm>();
  dc->state = std::make_shared<CommState>();
  dc->state->rank = getRank();
  dc->state->size = getSize();
  dc->state->name = state_->name + "/" + device.str();
  dc->state->desync = state_->desync;
  dc->device = device;

  xcclConfig_t cfg{};
  cfg.timeout_ms = options_->timeout.count() > 0 ? options_->timeout.count() : 0;
  cfg.device = device.index();
  cfg.deviceType = device.is_cuda() ? xcclDeviceCuda : xcclDeviceXdev;
  cfg.streamErrors = options_->reportStreamErrors ? xcclStreamErrorsReport : xcclStreamErrorsFail;
  cfg.name = dc->state->name.c_str();
  xcclComm_t comm = nullptr;
  xcclResult_t r = xcclSuccess;
  const bool had =
      state_->useEvenClosed([&](xcclComm_t host) { r = xcclCommSplit(host, 0, 0, &comm, &cfg); });
  TORCH_CHECK(had, "xccl init on ", device, ": group '", state_->name,
              "' has no host communicator any more (destroyed)");
  if (r != xcclSuccess) {
    throwDist("xccl init on " + device.str() + ": rank " + std::to_string(getRank()) + " of " +
              std::to_string(getSize()) + " (group '" + state_->name +
              "'): " + libError(r, xcclGetLastError(nullptr)));
  }
  dc->state->comm = comm;
  dc->stream = poolStream(device);
  dc->ready = std::make_unique<DeviceEvent>(device);
  return dc;
}

std::vector<std::shared_ptr<CommState>> ProcessGroupXCCL::allComms() {
  std::vector<std::shared_ptr<CommState>> out{state_};
  std::lock_guard<std::mutex> g(devMu_);
  if (devComm_) out.push_back(devComm_->state);
  return out;
}

std::string ProcessGroupXCCL::deviceCommDevice() {
  std::lock_guard<std::mutex> g(devMu_);
  return devComm_ ? devComm_->device.str() : std::string();
}

void ProcessGroupXCCL::eagerConnectSingleDevice(at::Device device) {
  if (!isAccelerator(device)) return;  // the host communicator exists from the start
  TORCH_CHECK(device.has_index(), "xccl eager_connect_single_device: ", device, " has no index");
  commFor("eager_connect_single_device", device);
}

// dist.split_group: every rank of this group calls it, with the ranks of its own new group
// (a rank in none of them gets some other group's list). One xcclCommSplit per communicator of
// the group, colour = the lowest rank of the new group (groups are disjoint, so colours
// differ), NOCOLOR for a rank outside `ranks`: no store round. torch asks once per device type
// of the group; the first call splits, a later one with the same name returns its result.
c10::intrusive_ptr<c10d::Backend> ProcessGroupXCCL::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  const std::string name = opts ? opts->group_name : std::string();
  std::lock_guard<std::mutex> g(splitMu_);
  auto cached = splits_.find(name);
  if (cached != splits_.end()) return cached->second.lock();  // null for a non-member
  auto it = std::find(ranks.begin(), ranks.end(), getRank());
  const bool member = it != ranks.end();
  const int color = member ? *std::min_element(ranks.begin(), ranks.end()) : XCCL_SPLIT_NOCOLOR;
  const int key = getRank();  // ranks are sorted: the new rank is the position
  auto splitOne = [&](CommState& st) -> xcclComm_t {
    xcclComm_t out = nullptr;
    xcclResult_t r = xcclSuccess;
    bool had =
        st.useEvenClosed([&](xcclComm_t c) { r = xcclCommSplit(c, color, key, &out, nullptr); });
    TORCH_CHECK(had, "xccl split of group '", st.name, "': its communicator was destroyed");
    if (r != xcclSuccess) {
      throwDist("xccl split of group '" + st.name + "' into '" + name + "' (rank " +
                std::to_string(getRank()) + "): " + libError(r, xcclGetLastError(nullptr)));
    }
    return out;
  };
  Adopted adopted;
  adopted.host = splitOne(*state_);
  std::shared_ptr<DeviceComm> dev;
  {
    std::lock_guard<std::mutex> d(devMu_);
    dev = devComm_;
  }
  if (dev) {
    adopted.device = splitOne(*dev->state);
    adopted.deviceOf = dev->device;
  }
  ++splitCount_;
  if (!member) {
    splits_.emplace(name,
                    c10::weak_intrusive_ptr<c10d::Backend>(c10::intrusive_ptr<c10d::Backend>()));
    return nullptr;
  }
  auto o = c10::make_intrusive<Options>(opts ? opts->timeout : options_->timeout);
  o->group_name = name;
  for (int r : ranks) {
    const auto& parent = options_->global_ranks_in_group;
    o->global_ranks_in_group.push_back(parent.empty() ? static_cast<uint64_t>(r) : parent.at(r));
  }
  auto child = c10::make_intrusive<ProcessGroupXCCL>(store, static_cast<int>(it - ranks.begin()),
                                                     static_cast<int>(ranks.size()), o, adopted);
  if (auto bound = getBoundDeviceId()) {
    child->setBoundDeviceId(bound);
    child->eagerConnectSingleDevice(*bound);  // made above when the parent had one
  }
  splits_.emplace(name,
                  c10::weak_intrusive_ptr<c10d::Backend>(c10::intrusive_ptr<c10d::Backend>(child)));
  return child;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupXCCL::shrink(
    const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
    const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) {
  // torch validated the list (shrink_group); a direct call gets libxccl's checks.
  if (coalescing_) abandonCoalescing("the group is being shrunk");
  std::vector<int> exclude(ranksToExclude.begin(), ranksToExclude.end());
  std::sort(exclude.begin(), exclude.end());
  const int flags = (shrinkFlags & 1) != 0 ? XCCL_SHRINK_ABORT : XCCL_SHRINK_DEFAULT;
  Adopted adopted;
  std::shared_ptr<DeviceComm> dev;
  {
    std::lock_guard<std::mutex> g(devMu_);
    dev = devComm_;
  }
  // The device communicator's shrink beside the host one's: two independent rendezvous
  // (each communicator numbers its own derivations), so their waits overlap.
  std::future<xcclComm_t> devShrink;
  if (dev) {
    devShrink = std::async(std::launch::async, [&] { return dev->state->shrink(exclude, flags); });
  }
  std::exception_ptr failed;
  try {
    adopted.host = state_->shrink(exclude, flags);
  } catch (...) {
    failed = std::current_exception();
  }
  if (dev) {
    try {
      adopted.device = devShrink.get();
      adopted.deviceOf = dev->device;
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) {
    if (adopted.host != nullptr) xcclCommAbort(adopted.host);
    if (adopted.device != nullptr) xcclCommAbort(adopted.device);
    std::rethrow_exception(failed);
  }
  const int below = static_cast<int>(std::lower_bound(exclude.begin(), exclude.end(), getRank()) -
                                     exclude.begin());
  const int newRank = getRank() - below;
  const int newSize = getSize() - static_cast<int>(exclude.size());
  auto o = c10::make_intrusive<Options>(optsOverride ? optsOverride->timeout : options_->timeout);
  o->group_name = optsOverride && !optsOverride->group_name.empty() ? optsOverride->group_name
                                                                    : state_->name + ":shrunk";
  const auto& parentRanks = options_->global_ranks_in_group;
  for (int r = 0; r < getSize(); ++r) {
    if (std::binary_search(exclude.begin(), exclude.end(), r)) continue;
    o->global_ranks_in_group.push_back(parentRanks.empty() ? static_cast<uint64_t>(r)
                                                           : parentRanks.at(r));
  }
  uint64_t n;
  {
    std::lock_guard<std::mutex> g(splitMu_);
    n = shrinkCount_++;
  }
  // The child's own records (monitored barriers, desync reports) under a scope of its own.
  auto store = c10::make_intrusive<c10d::PrefixStore>("shrink" + std::to_string(n), store_);
  auto child = c10::make_intrusive<ProcessGroupXCCL>(store, newRank, newSize, o, adopted);
  if (auto bound = getBoundDeviceId()) child->setBoundDeviceId(bound);
  return child;
}

std::vector<bool> ProcessGroupXCCL::probeAlive(int64_t timeoutMs) {
  std::vector<int> alive(getSize(), 0);
  xcclResult_t r = xcclSuccess;
  bool had = state_->useEvenClosed(
      [&](xcclComm_t c) { r = xcclCommProbeAlive(c, alive.data(), timeoutMs); });
  TORCH_CHECK(had, "xccl probe of group '", state_->name, "': its communicator was destroyed");
  if (r != xcclSuccess) throwDist("xccl probe: " + libError(r, xcclGetLastError(nullptr)));
  return std::vector<bool>(alive.begin(), alive.end());
}

void ProcessGroupXCCL::revoke() {
  for (auto& st : allComms()) st->useEvenClosed([](xcclComm_t c) { xcclCommRevoke(c); });
}

}  // namespace torch_xccl
