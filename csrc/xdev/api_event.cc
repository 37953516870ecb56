// C entry points: events.
#include "runtime.h"
#include "status.h"

using xdev::api;
using xdev::Runtime;

namespace {

// A finished record's answer: the recorded stream's sticky error, or its failure at or
// before the recorded position (thrown, with its message); xdevSuccess if none.
xdevError_t doneStatus(const xdev::Event::Mark& mark) {
  if (mark.stream) mark.stream->check(mark.pos);
  return xdevSuccess;
}

}  // namespace

extern "C" {

xdevError_t xdevEventCreateWithFlags(xdevEvent_t* event, unsigned flags) {
  return api("xdevEventCreateWithFlags", [&] {
    XDEV_REQUIRE(event != nullptr, xdevErrorInvalidValue, "event is NULL");
    const unsigned known = xdevEventBlockingSync | xdevEventDisableTiming;
    XDEV_REQUIRE((flags & ~known) == 0, xdevErrorInvalidValue, "unknown event flags ", flags);
    Runtime& rt = Runtime::get();
    *event = rt.createEvent(rt.currentDevice(), flags);
    return xdevSuccess;
  });
}

xdevError_t xdevEventCreate(xdevEvent_t* event) {
  return xdevEventCreateWithFlags(event, xdevEventDefault);
}

xdevError_t xdevEventDestroy(xdevEvent_t event) {
  return api("xdevEventDestroy", [&] {
    Runtime::get().takeEvent(event);
    return xdevSuccess;
  });
}

xdevError_t xdevEventRecord(xdevEvent_t event, xdevStream_t stream) {
  return api("xdevEventRecord", [&] {
    Runtime& rt = Runtime::get();
    auto e = rt.event(event);
    auto s = rt.stream(stream);
    XDEV_REQUIRE(s->device() == e->device(), xdevErrorInvalidResourceHandle, "event of device ",
                 e->device(), " recorded on stream ", s->id(), " of device ", s->device());
    e->record(s);
    return xdevSuccess;
  });
}

xdevError_t xdevEventQuery(xdevEvent_t event) {
  return api("xdevEventQuery", [&] {
    xdev::Event::Mark mark = Runtime::get().event(event)->mark();
    return mark.done() ? doneStatus(mark) : xdevErrorNotReady;
  });
}

xdevError_t xdevEventSynchronize(xdevEvent_t event) {
  return api("xdevEventSynchronize", [&] {
    xdev::Event::Mark mark = Runtime::get().event(event)->mark();
    if (mark.stream) mark.stream->waitFor(mark.pos);
    return doneStatus(mark);
  });
}

xdevError_t xdevEventElapsedTime(float* ms, xdevEvent_t start, xdevEvent_t end) {
  return api("xdevEventElapsedTime", [&] {
    XDEV_REQUIRE(ms != nullptr, xdevErrorInvalidValue, "ms is NULL");
    Runtime& rt = Runtime::get();
    auto a = rt.event(start), b = rt.event(end);
    XDEV_REQUIRE(a->timing() && b->timing(), xdevErrorInvalidResourceHandle,
                 "an event created with xdevEventDisableTiming has no time");
    xdev::Event::Mark ma = a->mark(), mb = b->mark();
    XDEV_REQUIRE(ma.stream && mb.stream, xdevErrorInvalidResourceHandle,
                 "both events must have been recorded");
    if (!ma.done() || !mb.done()) return xdevErrorNotReady;
    *ms = std::chrono::duration<float, std::milli>(*mb.when - *ma.when).count();
    return xdevSuccess;
  });
}

}  // extern "C"
