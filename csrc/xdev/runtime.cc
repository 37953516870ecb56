// Runtime state, its knobs, handle tables, and the exit hook that stops the stream workers.
#include "runtime.h"

#include <pthread.h>

#include <atomic>
#include <cctype>

#include "common/param.h"
#include "status.h"

namespace xdev {

XCCL_PARAM(XdevCount, "XDEV_COUNT", 8, 1, 1024)
XCCL_PARAM_STR(XdevMemory, "XDEV_MEMORY", "16G")
// Device memory comes from shareable segments of this many bytes (or one allocation's size,
// when larger); pages are only used once touched.
XCCL_PARAM(XdevSegment, "XDEV_SEGMENT", 256 << 20, 1 << 20, 1LL << 40)

namespace {

constexpr int kMaxDevices = 1024;

// "16G", "512M", "64k", "1000": bytes, with binary K/M/G/T suffixes.
size_t parseBytes(const std::string& text) {
  size_t i = 0;
  unsigned long long value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    unsigned digit = text[i++] - '0';
    XDEV_REQUIRE(value <= (SIZE_MAX - digit) / 10, xdevErrorInvalidValue, "XCCL_XDEV_MEMORY='",
                 text, "' is too large");
    value = value * 10 + digit;
  }
  int shift = 0;
  if (i < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[i++]))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      default:
        shift = -1;
    }
    if (i < text.size() && std::toupper(static_cast<unsigned char>(text[i])) == 'B') ++i;
  }
  XDEV_REQUIRE(i > 0 && std::isdigit(static_cast<unsigned char>(text[0])) && shift >= 0 &&
                   i == text.size() && value > 0,
               xdevErrorInvalidValue, "XCCL_XDEV_MEMORY='", text,
               "' is not a positive byte count (digits, optional K, M, G or T)");
  XDEV_REQUIRE(value <= (SIZE_MAX >> shift), xdevErrorInvalidValue, "XCCL_XDEV_MEMORY='", text,
               "' is too large");
  return static_cast<size_t>(value) << shift;
}

size_t readSegmentBytes() {
  int64_t n = xcclParamXdevSegment();
  XDEV_REQUIRE(n >= (1 << 20) && n <= (int64_t(1) << 40), xdevErrorInvalidValue,
               "XCCL_XDEV_SEGMENT=", n, " is outside 1 MiB..1 TiB");
  return static_cast<size_t>(n);
}

int readDeviceCount() {
  int64_t n = xcclParamXdevCount();
  XDEV_REQUIRE(n >= 1 && n <= kMaxDevices, xdevErrorInvalidValue, "XCCL_XDEV_COUNT=", n,
               " is outside 1..", kMaxDevices);
  return static_cast<int>(n);
}

thread_local int tlsDevice = 0;

std::atomic<Runtime*> gRuntime{nullptr};
// Set in a child forked after the runtime started: the child has none of the parent's
// workers, and the parent's locks may have been held at the fork, so it must not use it.
std::atomic<bool> gForkedAfterStart{false};

// Stops the workers at exit (after the libraries that link us ran their destructors). The
// runtime itself is never destroyed: a detached worker may still be using it.
struct ExitHook {
  ~ExitHook() {
    Runtime* rt = gRuntime.load();
    if (rt != nullptr && !gForkedAfterStart.load()) rt->shutdown();
  }
} exitHook;

template <typename Handle>
uint64_t idOf(Handle h) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h));
}
template <typename Handle>
Handle handleOf(uint64_t id) {
  return reinterpret_cast<Handle>(static_cast<uintptr_t>(id));
}

// The live object behind a handle; removed from the table when take. Caller holds the lock.
template <typename T, typename Handle>
std::shared_ptr<T> lookup(std::unordered_map<uint64_t, std::shared_ptr<T>>& table, Handle handle,
                          const char* kind, bool take) {
  auto it = table.find(idOf(handle));
  XDEV_REQUIRE(it != table.end(), xdevErrorInvalidResourceHandle, kind, " handle ",
               static_cast<const void*>(handle), " is not a live ", kind, " (destroyed?)");
  std::shared_ptr<T> object = it->second;
  if (take) table.erase(it);
  return object;
}

}  // namespace

Runtime& Runtime::get() {
  static Runtime* rt = [] {
    auto* r = new Runtime(readDeviceCount(), parseBytes(xcclParamXdevMemory()));
    pthread_atfork(nullptr, nullptr, [] { gForkedAfterStart.store(true); });
    gRuntime.store(r);
    return r;
  }();
  XDEV_REQUIRE(!gForkedAfterStart.load(std::memory_order_relaxed), xdevErrorInternal,
               "this process was forked after its parent started the xdev runtime, which a "
               "child cannot use (as with CUDA and CNRT): start it with spawn or exec");
  return *rt;
}

Runtime::Runtime(int devices, size_t capacity)
    : memory_(devices, capacity, readSegmentBytes()), defaultStreams_(devices) {}

void Runtime::checkDevice(int device) const {
  XDEV_REQUIRE(device >= 0 && device < deviceCount(), xdevErrorInvalidDevice, "device ", device,
               " does not exist (", deviceCount(), " devices, XCCL_XDEV_COUNT)");
}

int Runtime::currentDevice() const { return tlsDevice; }

void Runtime::setCurrentDevice(int device) {
  checkDevice(device);
  tlsDevice = device;
}

std::shared_ptr<Stream> Runtime::defaultStream(int device) {
  auto& slot = defaultStreams_[device];
  if (!slot) slot = newStream(device, 0, 0);
  return slot;
}

std::shared_ptr<Stream> Runtime::stream(xdevStream_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (handle == nullptr) return defaultStream(tlsDevice);
  return lookup(streams_, handle, "stream", false);
}

xdevStream_t Runtime::createStream(int device, int priority) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = nextId_++;
  streams_.emplace(id, newStream(device, id, priority));
  return handleOf<xdevStream_t>(id);
}

std::shared_ptr<Stream> Runtime::takeStream(xdevStream_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  XDEV_REQUIRE(handle != nullptr, xdevErrorInvalidResourceHandle,
               "the default stream cannot be destroyed");
  return lookup(streams_, handle, "stream", true);
}

std::vector<std::shared_ptr<Stream>> Runtime::streams(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Stream>> out;
  for (auto& s : defaultStreams_) {
    if (s && (device < 0 || s->device() == device)) out.push_back(s);
  }
  for (auto& [id, s] : streams_) {
    if (device < 0 || s->device() == device) out.push_back(s);
  }
  return out;
}

std::shared_ptr<Event> Runtime::event(xdevEvent_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  return lookup(events_, handle, "event", false);
}

xdevEvent_t Runtime::createEvent(int device, unsigned flags) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = nextId_++;
  events_.emplace(id, std::make_shared<Event>(device, flags));
  return handleOf<xdevEvent_t>(id);
}

std::shared_ptr<Event> Runtime::takeEvent(xdevEvent_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  return lookup(events_, handle, "event", true);
}

std::shared_ptr<Stream> Runtime::newStream(int device, uint64_t id, int priority) {
  auto s = std::make_shared<Stream>(device, id, priority);
  if (exiting_) s->abandon(std::chrono::milliseconds(0));  // no worker after the exit hook
  return s;
}

void Runtime::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    exiting_ = true;
  }
  for (auto& s : streams(-1)) s->abandon(std::chrono::milliseconds(200));
}

}  // namespace xdev
