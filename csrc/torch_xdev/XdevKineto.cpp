// XdevKineto.cpp — xdev's work in torch.profiler's Kineto traces: a Kineto child activity
// profiler (what CUPTI's is to CUDA), registered when the extension loads. With
//
//   torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])
//
// Kineto asks this plugin for CONCURRENT_KERNEL, GPU_MEMCPY and GPU_MEMSET (torch's
// PrivateUse1 set); a session turns libxdev's activity records on while it runs
// (xdevActivityEnable) and hands back, per xdev stream, every kernel, copy, memset, host
// function and hold the stream waited at (an xccl collective on xdev tensors: "xccl
// allreduce"), each linked to the CPU op that queued it (the op's correlation id, pushed
// through xdevActivityPushExternalId). torch shows them as xdev device events: rows of the
// exported Chrome trace, device time in key_averages().
#include <kineto/libkineto.h>
#include <kineto/output_base.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "xdev_runtime.h"

namespace xdev_torch {
namespace {

using libkineto::ActivityLogger;
using libkineto::ActivityType;

const std::set<ActivityType>& xdevTypes() {
  static const std::set<ActivityType> types{ActivityType::CONCURRENT_KERNEL,
                                            ActivityType::GPU_MEMCPY, ActivityType::GPU_MEMSET};
  return types;
}

ActivityType typeOf(int kind) {
  switch (kind) {
    case xdevActivityMemcpy:
      return ActivityType::GPU_MEMCPY;
    case xdevActivityMemset:
      return ActivityType::GPU_MEMSET;
    default:  // kernels, host functions, holds: work on the stream
      return ActivityType::CONCURRENT_KERNEL;
  }
}

const char* kindName(int kind) {
  switch (kind) {
    case xdevActivityKernel:
      return "kernel";
    case xdevActivityMemcpy:
      return "memcpy";
    case xdevActivityMemset:
      return "memset";
    case xdevActivityHostFunction:
      return "host function";
    default:
      return "hold";
  }
}

// Every record libxdev holds now.
std::vector<xdevActivityRecord> readAll(unsigned long long* dropped) {
  std::vector<xdevActivityRecord> all;
  std::vector<xdevActivityRecord> chunk(4096);
  *dropped = 0;
  for (;;) {
    size_t n = 0;
    unsigned long long lost = 0;
    if (xdevActivityRead(chunk.data(), chunk.size(), &n, &lost) != xdevSuccess) break;
    *dropped += lost;
    all.insert(all.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n));
    if (n < chunk.size()) break;
  }
  return all;
}

class XdevSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit XdevSession(std::set<ActivityType> types) : types_(std::move(types)) {}

  void start() override {
    unsigned long long dropped = 0;
    readAll(&dropped);  // what earlier work left behind is not this trace's
    xdevActivityEnable(1);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    xdevActivityEnable(0);
    unsigned long long dropped = 0;
    records_ = readAll(&dropped);
    if (dropped > 0) {
      errors_.push_back("xdev: " + std::to_string(dropped) +
                        " activity records lost (buffer full: XCCL_XDEV_ACTIVITY_CAPACITY)");
    }
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

  void processTrace(ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t startTime, int64_t endTime) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(startTime, endTime, "xdev");
    buffer_->gpuOpCount = 0;
    for (const xdevActivityRecord& r : records_) {
      const ActivityType type = typeOf(r.kind);
      if (types_.count(type) == 0) continue;
      buffer_->emplace_activity(buffer_->span, type, std::string(r.name));
      libkineto::GenericTraceActivity& a = *buffer_->activities.back();
      a.startTime = r.startNs;
      a.endTime = r.endNs;
      a.id = static_cast<int32_t>(++nextId_);
      a.device = r.device;
      a.resource = static_cast<int32_t>(r.stream);
      a.threadId = static_cast<int32_t>(r.stream);
      if (linked && r.externalId != 0) a.linked = linked(static_cast<int32_t>(r.externalId));
      // Quoted text only: addMetadata formats numbers with fmt, whose compiled part torch does
      // not export.
      a.addMetadataQuoted("device", std::to_string(r.device));
      a.addMetadataQuoted("stream", std::to_string(r.stream));
      a.addMetadataQuoted("kind", kindName(r.kind));
      if (r.bytes != 0) a.addMetadataQuoted("bytes", std::to_string(r.bytes));
      if (a.linked != nullptr) a.addMetadataQuoted("correlation", std::to_string(r.externalId));
      streams_.insert({r.device, r.stream});
      ++buffer_->gpuOpCount;
      logger.handleGenericActivity(a);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (const auto& [device, stream] : streams_) {
      out.push_back(
          {static_cast<int64_t>(stream), static_cast<int64_t>(stream), static_cast<int64_t>(device),
           stream == 0 ? "xdev default stream" : "xdev stream " + std::to_string(stream)});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  // The CPU op being entered: what its thread enqueues until the pop carries its id.
  void pushCorrelationId(uint64_t id) override { xdevActivityPushExternalId(id); }
  void popCorrelationId() override { xdevActivityPopExternalId(); }

 private:
  std::set<ActivityType> types_;
  std::vector<xdevActivityRecord> records_;
  std::vector<std::string> errors_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::set<std::pair<int, unsigned long long>> streams_;
  uint32_t nextId_ = 0;
};

class XdevActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return xdevTypes(); }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activityTypes, const libkineto::Config& /*config*/) override {
    std::set<ActivityType> wanted;
    for (ActivityType t : activityTypes) {
      if (xdevTypes().count(t) != 0) wanted.insert(t);
    }
    if (wanted.empty()) return nullptr;  // a CPU-only trace: xdev records nothing
    return std::make_unique<XdevSession>(std::move(wanted));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*tsMs*/, int64_t /*durationMs*/, const std::set<ActivityType>& activityTypes,
      const libkineto::Config& config) override {
    return configure(activityTypes, config);
  }

 private:
  std::string name_{"xdev"};
};

[[maybe_unused]] const bool kRegistered = [] {
  libkineto::api().registerProfilerFactory([] { return std::make_unique<XdevActivityProfiler>(); });
  return true;
}();

}  // namespace
}  // namespace xdev_torch
