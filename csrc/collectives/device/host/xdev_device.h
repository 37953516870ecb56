// xdev as a Device of the collectives: the simulated accelerator's memory is host memory,
// so copies and reductions are HostDevice's; what xdev adds is streams. A collective on an
// xdev communicator is ordered on the caller's xdev stream as NCCL orders one on a CUDA
// stream: it starts after the work queued on the stream before it (an event the progress
// thread waits for), and work queued after it waits for its completion (a hold on the
// stream that the progress thread releases when the collective is done).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "collectives/device/host/host_device.h"

namespace xccl {

class XdevDevice : public HostDevice {
 public:
  explicit XdevDevice(int ordinal);  // throws InvalidUsage for an ordinal xdev lacks
  ~XdevDevice() override;
  static int currentOrdinal();  // the calling thread's current xdev device
  // The simulated wiring (device.h): islands of XCCL_XDEV_ISLAND consecutive devices (default
  // 4) joined pairwise by XL links of XCCL_XDEV_XL_GBS GB/s (default 100), islands joined
  // through the host (PHB); NUMA node 0. A model for topology-aware planning and xccl-topo:
  // xdev memory is host memory, so no xdev copy is faster over an XL link than over PHB.
  static DeviceWiring wiring();
  const char* name() const override { return "xdev"; }
  std::string busId() const override;

  // XCCL_XDEV_STAGING=1: stage operations through host memory as the CUDA device does by
  // default (device.h, docs/CUDA.md "Staging"), so that the core's staging (the ranges of every
  // collective, in place and vector forms) runs and is checked on every machine.
  bool stagesThroughHost() const override { return staged_; }
  char* stageBegin(xcclStream_t stream, size_t bytes, Device& engine) override;
  void stageIn(xcclStream_t stream, const std::vector<StageCopy>& copies) override;
  void stageOut(std::vector<StageCopy>&& copies) override;

  void* streamCapture(xcclStream_t stream) override;
  void streamWait(void* token, const std::atomic<bool>& abort) override;
  void streamRelease(void* token) override;
  void* streamHold(xcclStream_t stream, const char* label) override;
  bool streamOrdered() const override { return true; }
  void streamResume(void* token) override;
  void streamFail(void* token, const std::string& why) override;

  // Peer reads through xdev's IPC handles (xdevIpcGetMemHandle / xdevIpcOpenMemHandle):
  // device memory lives in shareable segments, so a peer maps and reads it in place.
  bool exportBuffer(const void* ptr, size_t bytes, PeerRef* ref) override;
  const void* importBuffer(const PeerRef& ref, int ownerPid, size_t bytes) override;
  // xcclMemAlloc on xdev, and a window's signal pad: device memory (xdevMalloc on this
  // device), which exportBuffer() names; host memory (the host device's memfd) it cannot.
  void* allocPeerable(size_t bytes) override;
  void freePeerable(void* ptr) override;

  struct Stage;  // xdev_device.cc

 private:
  bool staged_ = false;
  std::mutex stageMu_;
  std::vector<std::unique_ptr<Stage>> stages_;  // reused once their copies back are done
};

}  // namespace xccl
