// C entry points: streams, host-function launches and holds.
#include <algorithm>
#include <memory>
#include <string>

#include "runtime.h"
#include "status.h"

using xdev::api;
using xdev::Runtime;

namespace {
// What an xdevHold_t points to (owned by the caller until xdevHoldRelease frees it).
struct HoldImpl {
  std::shared_ptr<xdev::Stream> stream;
  std::shared_ptr<xdev::Gate> gate;
};
}  // namespace

extern "C" {

xdevError_t xdevStreamCreateWithPriority(xdevStream_t* stream, unsigned flags, int priority) {
  return api("xdevStreamCreateWithPriority", [&] {
    XDEV_REQUIRE(stream != nullptr, xdevErrorInvalidValue, "stream is NULL");
    XDEV_REQUIRE((flags & ~static_cast<unsigned>(xdevStreamNonBlocking)) == 0,
                 xdevErrorInvalidValue, "unknown stream flags ", flags);
    // Clamped into the range, as CUDA does.
    priority = std::clamp(priority, xdev::kGreatestPriority, xdev::kLeastPriority);
    Runtime& rt = Runtime::get();
    *stream = rt.createStream(rt.currentDevice(), priority);
    return xdevSuccess;
  });
}

xdevError_t xdevStreamCreateWithFlags(xdevStream_t* stream, unsigned flags) {
  return xdevStreamCreateWithPriority(stream, flags, xdev::kLeastPriority);
}

xdevError_t xdevStreamCreate(xdevStream_t* stream) {
  return xdevStreamCreateWithPriority(stream, xdevStreamDefault, xdev::kLeastPriority);
}

xdevError_t xdevStreamDestroy(xdevStream_t stream) {
  return api("xdevStreamDestroy", [&] {
    Runtime& rt = Runtime::get();
    XDEV_REQUIRE(stream != nullptr, xdevErrorInvalidResourceHandle,
                 "the default stream cannot be destroyed");
    XDEV_REQUIRE(rt.stream(stream).get() != xdev::Stream::current(), xdevErrorInvalidValue,
                 "a host function cannot destroy its own stream");
    rt.takeStream(stream)->drainAndStop();
    return xdevSuccess;
  });
}

xdevError_t xdevStreamQuery(xdevStream_t stream) {
  return api("xdevStreamQuery", [&] {
    auto s = Runtime::get().stream(stream);
    const uint64_t tail = s->tail();
    if (s->error() != xdevSuccess) s->check(tail);  // throws, with the failure's message
    return s->reached(tail) ? xdevSuccess : xdevErrorNotReady;
  });
}

xdevError_t xdevStreamSynchronize(xdevStream_t stream) {
  return api("xdevStreamSynchronize", [&] {
    auto s = Runtime::get().stream(stream);
    const uint64_t tail = s->tail();
    s->waitFor(tail);
    s->check(tail);
    return xdevSuccess;
  });
}

xdevError_t xdevStreamWaitEvent(xdevStream_t stream, xdevEvent_t event, unsigned flags) {
  return api("xdevStreamWaitEvent", [&] {
    XDEV_REQUIRE(flags == 0, xdevErrorInvalidValue, "flags must be 0, got ", flags);
    Runtime& rt = Runtime::get();
    auto s = rt.stream(stream);
    xdev::Event::Mark mark = rt.event(event)->mark();
    // Nothing to wait for: never recorded, or recorded on this very stream (in order).
    if (!mark.stream || mark.stream == s) return xdevSuccess;
    // A gate on the waiting stream, opened by whichever thread brings the other stream to
    // the position: no worker thread blocks for a wait between streams. When the other
    // stream had failed by then, the gate opens failed: the failure travels to the waiter.
    auto open = [s, src = mark.stream, pos = mark.pos](const std::shared_ptr<xdev::Gate>& gate) {
      const std::string why = src->failureAt(pos);
      s->openGate(gate, why.empty() ? nullptr : &why);
    };
    if (mark.done() && mark.stream->failureAt(mark.pos).empty()) return xdevSuccess;
    auto gate = std::make_shared<xdev::Gate>();
    s->enqueueGate(gate);
    mark.stream->whenReached(mark.pos, [open, gate] { open(gate); });
    return xdevSuccess;
  });
}

xdevError_t xdevStreamGetDevice(xdevStream_t stream, int* device) {
  return api("xdevStreamGetDevice", [&] {
    XDEV_REQUIRE(device != nullptr, xdevErrorInvalidValue, "device is NULL");
    *device = Runtime::get().stream(stream)->device();
    return xdevSuccess;
  });
}

xdevError_t xdevStreamGetId(xdevStream_t stream, unsigned long long* id) {
  return api("xdevStreamGetId", [&] {
    XDEV_REQUIRE(id != nullptr, xdevErrorInvalidValue, "id is NULL");
    *id = Runtime::get().stream(stream)->id();
    return xdevSuccess;
  });
}

xdevError_t xdevStreamGetPriority(xdevStream_t stream, int* priority) {
  return api("xdevStreamGetPriority", [&] {
    XDEV_REQUIRE(priority != nullptr, xdevErrorInvalidValue, "priority is NULL");
    *priority = Runtime::get().stream(stream)->priority();
    return xdevSuccess;
  });
}

xdevError_t xdevLaunchHostFunc(xdevStream_t stream, xdevHostFn_t fn, void* userData) {
  return api("xdevLaunchHostFunc", [&] {
    XDEV_REQUIRE(fn != nullptr, xdevErrorInvalidValue, "fn is NULL");
    Runtime::get().stream(stream)->enqueue([fn, userData] { fn(userData); }, true,
                                           {"host function", xdevActivityHostFunction, 0, 0});
    return xdevSuccess;
  });
}

xdevError_t xdevStreamHold(xdevStream_t stream, xdevHold_t* hold) {
  return xdevStreamHoldNamed(stream, hold, nullptr);
}

xdevError_t xdevStreamHoldNamed(xdevStream_t stream, xdevHold_t* hold, const char* name) {
  return api("xdevStreamHold", [&] {
    XDEV_REQUIRE(hold != nullptr, xdevErrorInvalidValue, "hold is NULL");
    auto h = std::make_unique<HoldImpl>();
    h->stream = Runtime::get().stream(stream);
    h->gate = std::make_shared<xdev::Gate>();
    if (xdev::activity::enabled()) {
      h->gate->name = name != nullptr ? name : "";
      h->gate->enqueuedNs = xdev::activity::nowNs();
      h->gate->externalId = xdev::activity::externalId();
    }
    h->stream->enqueueGate(h->gate);
    *hold = reinterpret_cast<xdevHold_t>(h.release());
    return xdevSuccess;
  });
}

xdevError_t xdevHoldFail(xdevHold_t hold, const char* why) {
  return api("xdevHoldFail", [&] {
    XDEV_REQUIRE(hold != nullptr, xdevErrorInvalidValue, "hold is NULL");
    std::unique_ptr<HoldImpl> h(reinterpret_cast<HoldImpl*>(hold));
    const std::string message = why != nullptr && *why ? why : "a held operation failed";
    h->stream->openGate(h->gate, &message);
    return xdevSuccess;
  });
}

xdevError_t xdevHoldRelease(xdevHold_t hold) {
  return api("xdevHoldRelease", [&] {
    XDEV_REQUIRE(hold != nullptr, xdevErrorInvalidValue, "hold is NULL");
    std::unique_ptr<HoldImpl> h(reinterpret_cast<HoldImpl*>(hold));
    h->stream->openGate(h->gate);
    return xdevSuccess;
  });
}

}  // extern "C"
