// Memory the peers of a host can map, and buffers registered with a communicator:
// xcclMemAlloc / xcclMemFree (the default device's peerable memory: device.h,
// allocPeerable), xcclCommRegister / xcclCommDeregister (the check that a buffer will be
// read in place, once, instead of a silent fall back to copies through the rings), and the
// windows with their one-sided puts and signals (core/windows.h).
#include <map>
#include <mutex>

#include "api_edge.h"
#include "collectives/device/device.h"

namespace xccl {
namespace {

// Which device each live xcclMemAlloc allocation came from, for xcclMemFree.
struct Allocations {
  std::mutex mu;
  std::map<void*, Device*> by;
};

Allocations& allocations() {
  static Allocations* a = new Allocations();  // never destroyed: freed from threads at exit
  return *a;
}

std::string range(const void* p, size_t bytes) { return strCat("[", p, ", +", bytes, ")"); }

// What every window entry requires: a communicator whose device's memory the host addresses
// (host: called on its caller's thread, a stream of NULL or XCCL_STREAM_CALLER; xdev: ordered
// on a stream of its device, NULL its default one), outside an open group, context 0, flags 0.
Windows& windowsOf(xcclComm_t comm, xcclStream_t stream, int ctx, unsigned flags) {
  Comm& c = commOf(comm);
  if (!c.device().hostAddressable()) {
    throw InvalidUsage(strCat("rank ", c.rank(), ": windows are built for communicators of the ",
                              "host and xdev devices so far; this one is on ", c.device().name(),
                              " (docs/MEMORY.md)"));
  }
  if (c.device().streamOrdered()) {
    XCCL_CHECK_ARG(stream != XCCL_STREAM_CALLER, "XCCL_STREAM_CALLER is for host communicators; a ",
                   c.device().name(), " communicator orders puts and signals on its streams");
  } else {
    XCCL_CHECK_ARG(stream == nullptr || stream == XCCL_STREAM_CALLER,
                   "a host communicator has no streams: pass NULL or XCCL_STREAM_CALLER");
  }
  if (inOpenGroup()) {
    throw InvalidUsage(
        "called inside an open group: windows, puts and signals are issued at once, "
        "in the order of the calls");
  }
  XCCL_CHECK_ARG(ctx == 0, "ctx ", ctx, ": only context 0 exists");
  XCCL_CHECK_ARG(flags == 0, "flags ", flags, ": no flags are defined");
  return c.windows();
}

Window* windowOf(xcclWindow_t win) {
  XCCL_CHECK_ARG(win != nullptr, "window is NULL");
  return reinterpret_cast<Window*>(win);
}

}  // namespace
}  // namespace xccl

using namespace xccl;  // NOLINT: this file is the API edge

extern "C" {

xcclResult_t xcclMemAlloc(void** ptr, size_t size) {
  return guarded("xcclMemAlloc", [&] {
    XCCL_CHECK_ARG(ptr != nullptr, "ptr is NULL");
    *ptr = nullptr;
    XCCL_CHECK_ARG(size > 0, "size 0");
    Device& device = getDevice(-1);
    void* p = device.allocPeerable(size);
    Allocations& a = allocations();
    std::lock_guard<std::mutex> g(a.mu);
    a.by[p] = &device;
    *ptr = p;
  });
}

xcclResult_t xcclMemFree(void* ptr) {
  return guarded("xcclMemFree", [&] {
    if (ptr == nullptr) return;
    Device* device = nullptr;
    {
      Allocations& a = allocations();
      std::lock_guard<std::mutex> g(a.mu);
      auto it = a.by.find(ptr);
      XCCL_CHECK_ARG(it != a.by.end(), "pointer ", ptr,
                     " is not the start of memory from xcclMemAlloc (or was freed already)");
      device = it->second;
      a.by.erase(it);
    }
    device->freePeerable(ptr);
  });
}

xcclResult_t xcclCommRegister(const xcclComm_t comm, void* buff, size_t size, void** handle) {
  return guarded("xcclCommRegister", [&] {
    XCCL_CHECK_ARG(handle != nullptr, "handle is NULL");
    *handle = nullptr;
    Comm& c = commOf(comm);
    XCCL_CHECK_ARG(buff != nullptr && size > 0, "buffer ", range(buff, size), " is empty");
    const char* p = static_cast<const char*>(buff);
    PeerRef ref;
    XCCL_CHECK_ARG(c.device().exportBuffer(buff, size, &ref), "rank ", c.rank(), ": buffer ",
                   range(buff, size), " is not memory that device ", c.device().name(),
                   " can share with the other processes of its host, so peers could not read it "
                   "in place (allocate it with xcclMemAlloc",
                   std::string(c.device().name()) == "host" ? ", in one allocation" : "",
                   "; a device communicator needs device memory)");
    Comm::Registry& r = c.registry();
    std::lock_guard<std::mutex> g(r.mu);
    auto next = r.buffers.lower_bound(p);
    if (next != r.buffers.end() && next->first < p + size) {
      throw InvalidArgument(strCat("rank ", c.rank(), ": buffer ", range(buff, size), " overlaps ",
                                   range(next->first, next->second->bytes),
                                   ", registered already"));
    }
    if (next != r.buffers.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second->bytes > p) {
        throw InvalidArgument(strCat("rank ", c.rank(), ": buffer ", range(buff, size),
                                     " overlaps ", range(prev->first, prev->second->bytes),
                                     ", registered already"));
      }
    }
    auto reg = std::make_unique<Comm::Registered>();
    reg->base = p;
    reg->bytes = size;
    *handle = reg.get();
    r.buffers.emplace(p, std::move(reg));
  });
}

xcclResult_t xcclCommDeregister(const xcclComm_t comm, void* handle) {
  return guarded("xcclCommDeregister", [&] {
    Comm& c = commOf(comm);
    XCCL_CHECK_ARG(handle != nullptr, "handle is NULL");
    Comm::Registry& r = c.registry();
    std::lock_guard<std::mutex> g(r.mu);
    const auto* reg = static_cast<const Comm::Registered*>(handle);
    for (auto it = r.buffers.begin(); it != r.buffers.end(); ++it) {
      if (it->second.get() == reg) {
        r.buffers.erase(it);
        return;
      }
    }
    throw InvalidArgument(strCat("rank ", c.rank(), ": handle ", handle,
                                 " is not a buffer registered with this communicator (or was "
                                 "deregistered already)"));
  });
}

xcclResult_t xcclCommWindowRegister(xcclComm_t comm, void* buff, size_t size, xcclWindow_t* win,
                                    int winFlags) {
  return guarded("xcclCommWindowRegister", [&] {
    XCCL_CHECK_ARG(win != nullptr, "win is NULL");
    *win = nullptr;
    Windows& w = windowsOf(comm, nullptr, 0, static_cast<unsigned>(winFlags));
    *win = reinterpret_cast<xcclWindow_t>(w.registerWindow(buff, size));
  });
}

xcclResult_t xcclCommWindowDeregister(xcclComm_t comm, xcclWindow_t win) {
  return guarded("xcclCommWindowDeregister",
                 [&] { windowsOf(comm, nullptr, 0, 0).deregisterWindow(windowOf(win)); });
}

xcclResult_t xcclPutSignal(const void* localbuff, size_t count, xcclDataType_t datatype, int peer,
                           xcclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                           unsigned int flags, xcclComm_t comm, xcclStream_t stream) {
  return guarded("xcclPutSignal", [&] {
    Windows& w = windowsOf(comm, stream, ctx, flags);
    const size_t es = dtypeSize(datatype);
    XCCL_CHECK_ARG(es != 0, "unknown datatype ", static_cast<int>(datatype));
    XCCL_CHECK_ARG(count <= SIZE_MAX / es, "count ", count, " overflows");
    w.putSignal(localbuff, count * es, peer, windowOf(peerWin), peerWinOffset, sigIdx, stream);
  });
}

xcclResult_t xcclSignal(int peer, int sigIdx, int ctx, unsigned int flags, xcclComm_t comm,
                        xcclStream_t stream) {
  return guarded("xcclSignal",
                 [&] { windowsOf(comm, stream, ctx, flags).signal(peer, sigIdx, stream); });
}

xcclResult_t xcclWaitSignal(int nDesc, const xcclWaitSignalDesc_t* signalDescs, xcclComm_t comm,
                            xcclStream_t stream) {
  return guarded("xcclWaitSignal", [&] {
    Windows& w = windowsOf(comm, stream, 0, 0);
    XCCL_CHECK_ARG(nDesc >= 0 && (nDesc == 0 || signalDescs != nullptr), "nDesc ", nDesc,
                   " with signalDescs ", signalDescs);
    for (int i = 0; i < nDesc; ++i) {
      const xcclWaitSignalDesc_t& d = signalDescs[i];
      XCCL_CHECK_ARG(d.ctx == 0, "signalDescs[", i, "].ctx ", d.ctx, ": only context 0 exists");
      w.waitSignal(d.peer, d.sigIdx, d.opCnt, stream);
    }
  });
}

}  // extern "C"
