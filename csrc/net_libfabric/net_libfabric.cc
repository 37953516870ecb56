// net_libfabric.cc — the plugin's xcclNet_v1_t table, exported as xcclNetPlugin_v1: every
// entry checks its arguments, takes gMu and works on the device that fabric.cc opens and
// progresses. net_libfabric.h describes the design.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "net_libfabric.h"
#include "xccl_net.h"

namespace xccl_net_libfabric {
namespace {

bool gInitDone = false;
uint32_t gNonce = 0;  // 31 random bits, the high half of this process's data tags
uint32_t gNextConnId = 1;
uint32_t gNextListenId = 1;
uint64_t gNextMrKey = 1;

// Every registration not yet released (guarded by gMu).
std::set<Mr*> gMrs;

bool validDev(int dev) { return gDev != nullptr && dev == 0; }

Comm* asComm(void* p, uint32_t magic) {
  auto* c = static_cast<Comm*>(p);
  return (c != nullptr && c->magic == magic) ? c : nullptr;
}

// Forgets a communicator: its posted requests are abandoned (cancelled where libfabric can,
// and freed whenever libfabric reports them), so a close never waits for the peer.
void abandonRequest(Device* dev, Request* r) {
  r->owner = nullptr;
  r->userDone = true;
  if (r->cqDone) {
    freeRequest(r);
  } else {
    // Only posted receives can be cancelled in general; a send's bytes are the provider's
    // until it completes (it only reads them).
    fi_cancel(&dev->ep->fid, &r->ctx);
  }
}

void dropComm(Device* dev, Comm* c) {
  for (Request* r : c->pending) abandonRequest(dev, r);
  c->pending.clear();
  dev->comms.erase(c);
  c->magic = kDeadMagic;
  delete c;
}

Comm* newComm(uint32_t magic, fi_addr_t peer, uint64_t tag) {
  auto* c = new Comm();
  c->magic = magic;
  c->peer = peer;
  c->tag = tag;
  c->lastPing = Clock::now();
  c->ping = nullptr;
  c->dead = false;
  c->listenId = 0;
  c->ctrlRecv = nullptr;
  return c;
}

// Validates the memory handle for a transfer and returns its descriptor.
xcclResult_t descFor(Device* dev, void* mhandle, const void* data, size_t size, void** desc) {
  *desc = nullptr;
  if (mhandle == nullptr) {
    if (dev->mrLocal && size > 0) {
      logMsg(XCCL_NET_LOG_WARN, "%s needs registered memory: mhandle is NULL", dev->name.c_str());
      return xcclInvalidArgument;
    }
    return xcclSuccess;
  }
  auto* m = static_cast<Mr*>(mhandle);
  if (m->magic != kMrMagic) return xcclInvalidArgument;
  if (m->mr != nullptr && size > 0) {
    auto p = reinterpret_cast<uintptr_t>(data);
    if (p < m->base || p - m->base > m->size || size > m->size - (p - m->base)) {
      logMsg(XCCL_NET_LOG_WARN, "buffer %p+%zu is outside its registration", data, size);
      return xcclInvalidArgument;
    }
    *desc = m->desc;
  }
  return xcclSuccess;
}

// ---- the table ----

xcclResult_t lfInit(xcclNetLogger_t logger) {
  std::lock_guard<std::mutex> lock(gMu);
  gLogger = logger;
  if (gInitDone) return xcclSuccess;
  gInitDone = true;
  std::random_device rd;
  uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid()) ^
                  static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  gNonce = static_cast<uint32_t>((seed ^ (seed >> 31)) & 0x7fffffffu);
  if (gNonce == 0) gNonce = 1;
  discover();
  return xcclSuccess;
}

xcclResult_t lfDevices(int* ndev) {
  if (ndev == nullptr) return xcclInvalidArgument;
  std::lock_guard<std::mutex> lock(gMu);
  if (!gInitDone) return xcclInvalidUsage;
  *ndev = gDev != nullptr ? 1 : 0;
  return xcclSuccess;
}

xcclResult_t lfGetProperties(int dev, xcclNetProperties_v1_t* props) {
  if (props == nullptr) return xcclInvalidArgument;
  std::lock_guard<std::mutex> lock(gMu);
  if (!gInitDone) return xcclInvalidUsage;
  if (!validDev(dev)) return xcclInvalidArgument;
  Device* d = gDev;
  memset(props, 0, sizeof(*props));
  snprintf(props->name, sizeof(props->name), "%s", d->name.c_str());
  // The endpoint's address once open; before that the domain's (port 0).
  std::string addr = d->opened ? addrString(d->addr, d->addrLen)
                               : addrString(d->info->src_addr, d->info->src_addrlen);
  snprintf(props->address, sizeof(props->address), "%s", addr.c_str());
  if (d->info->nic != nullptr && d->info->nic->link_attr != nullptr)
    props->speedMbps = static_cast<int>(d->info->nic->link_attr->speed / 1000000);  // bits/s
  props->latencyUs = 0;
  props->ptrSupport = XCCL_NET_PTR_HOST;
  props->regIsGlobal = 1;  // registrations are made on the domain, which every comm shares
  props->maxMessageBytes = d->info->ep_attr->max_msg_size;
  props->maxComms = 0;
  return xcclSuccess;
}

xcclResult_t lfListen(int dev, void* handle, void** listenComm) {
  if (handle == nullptr || listenComm == nullptr) return xcclInvalidArgument;
  std::lock_guard<std::mutex> lock(gMu);
  if (!gInitDone) return xcclInvalidUsage;
  if (!validDev(dev)) return xcclInvalidArgument;
  xcclResult_t res = openDevice(gDev);
  if (res != xcclSuccess) return res;
  Comm* l = newComm(kListenMagic, FI_ADDR_UNSPEC, 0);
  l->listenId = gNextListenId++;
  l->tag = kCtrlBit | l->listenId;
  postCtrlRecv(gDev, l);
  Handle h;
  memset(&h, 0, sizeof(h));
  h.magic = kHandleMagic;
  h.listenId = l->listenId;
  h.addrLen = static_cast<uint32_t>(gDev->addrLen);
  memcpy(h.addr, gDev->addr, gDev->addrLen);
  memset(handle, 0, XCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof(h));
  *listenComm = l;
  return xcclSuccess;
}

xcclResult_t lfConnect(int dev, const void* handle, void** sendComm) {
  if (handle == nullptr || sendComm == nullptr) return xcclInvalidArgument;
  Handle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != kHandleMagic || h.addrLen == 0 || h.addrLen > kMaxAddr) {
    logMsg(XCCL_NET_LOG_WARN, "connect: not a handle of this plugin");
    return xcclInvalidArgument;
  }
  std::lock_guard<std::mutex> lock(gMu);
  if (!gInitDone) return xcclInvalidUsage;
  if (!validDev(dev)) return xcclInvalidArgument;
  Device* d = gDev;
  xcclResult_t res = openDevice(d);
  if (res != xcclSuccess) return res;
  *sendComm = nullptr;

  // The caller calls again with the same arguments until the comm is returned; the attempt
  // is found again by (thread, handle) so that threads connecting to one listener at the same
  // time do not take each other's comms.
  std::string key = std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  key.push_back('/');
  key.append(static_cast<const char*>(handle), sizeof(Handle));
  auto it = d->connecting.find(key);
  if (it == d->connecting.end()) {
    fi_addr_t peer;
    res = peerAddr(d, h.addr, h.addrLen, &peer);
    if (res != xcclSuccess) return res;
    uint64_t tag = (static_cast<uint64_t>(gNonce) << 32) | gNextConnId++;
    if (gNextConnId == 0) gNextConnId = 1;
    it = d->connecting.emplace(key, PendingConnect{newComm(kSendMagic, peer, tag), nullptr}).first;
  }
  PendingConnect& pc = it->second;
  if (pc.req == nullptr) {
    Request* r = newRequest(ReqKind::kCtrlSend, nullptr, pc.comm->peer);
    r->ctrl.magic = kCtrlMagic;
    r->ctrl.addrLen = static_cast<uint32_t>(d->addrLen);
    r->ctrl.dataTag = pc.comm->tag;
    memcpy(r->ctrl.addr, d->addr, d->addrLen);
    ssize_t rc = fi_tsend(d->ep, &r->ctrl, sizeof(r->ctrl), nullptr, pc.comm->peer,
                          kCtrlBit | h.listenId, &r->ctx);
    if (rc == -FI_EAGAIN) {
      freeRequest(r);
      progress(d);
      return xcclSuccess;
    }
    if (rc != 0) {
      freeRequest(r);
      logMsg(XCCL_NET_LOG_WARN, "connect to %s: %s", addrString(h.addr, h.addrLen).c_str(),
             fi_strerror(static_cast<int>(-rc)));
      delete pc.comm;
      d->connecting.erase(it);
      return xcclRemoteError;
    }
    pc.req = r;
  }
  progress(d);
  if (!pc.req->cqDone && !pc.req->failed) return xcclSuccess;
  Request* r = pc.req;
  Comm* c = pc.comm;
  d->connecting.erase(it);
  res = r->result;
  freeRequest(r);
  if (res != xcclSuccess) {
    logMsg(XCCL_NET_LOG_WARN, "connect to %s failed", addrString(h.addr, h.addrLen).c_str());
    delete c;
    return xcclRemoteError;
  }
  d->comms.insert(c);
  *sendComm = c;
  return xcclSuccess;
}

xcclResult_t lfAccept(void* listenComm, void** recvComm) {
  if (recvComm == nullptr) return xcclInvalidArgument;
  std::lock_guard<std::mutex> lock(gMu);
  Comm* l = asComm(listenComm, kListenMagic);
  if (l == nullptr || gDev == nullptr) return xcclInvalidArgument;
  Device* d = gDev;
  *recvComm = nullptr;
  postCtrlRecv(d, l);
  progress(d);
  Request* r = l->ctrlRecv;
  if (r == nullptr || !r->cqDone) return xcclSuccess;
  l->ctrlRecv = nullptr;
  CtrlMsg msg = r->ctrl;
  xcclResult_t res = r->result;
  size_t len = r->size;
  freeRequest(r);
  postCtrlRecv(d, l);
  if (res != xcclSuccess) return xcclRemoteError;  // logged by progress()
  if (len != sizeof(msg) || msg.magic != kCtrlMagic || msg.addrLen == 0 || msg.addrLen > kMaxAddr ||
      (msg.dataTag & kCtrlBit) != 0) {
    logMsg(XCCL_NET_LOG_WARN, "accept: a malformed connect message (%zu bytes)", len);
    return xcclRemoteError;
  }
  fi_addr_t peer;
  res = peerAddr(d, msg.addr, msg.addrLen, &peer);
  if (res != xcclSuccess) return res;
  if (!d->directedRecv) {
    // Without directed receive only the tag tells senders apart: refuse a duplicate rather
    // than mix two streams (possible only if two processes drew the same 31-bit nonce).
    for (Comm* c : d->comms)
      if (c->magic == kRecvMagic && c->tag == msg.dataTag) {
        logMsg(XCCL_NET_LOG_WARN, "accept: data tag %#llx already in use",
               static_cast<unsigned long long>(msg.dataTag));
        return xcclRemoteError;
      }
  }
  Comm* c = newComm(kRecvMagic, peer, msg.dataTag);
  d->comms.insert(c);
  *recvComm = c;
  return xcclSuccess;
}

xcclResult_t lfRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (mhandle == nullptr || (data == nullptr && size > 0)) return xcclInvalidArgument;
  if (type != XCCL_NET_PTR_HOST) return xcclInvalidArgument;  // ptrSupport is host only
  std::lock_guard<std::mutex> lock(gMu);
  if (asComm(comm, kSendMagic) == nullptr && asComm(comm, kRecvMagic) == nullptr)
    return xcclInvalidArgument;
  Device* d = gDev;
  auto* m = new Mr();
  m->magic = kMrMagic;
  m->comm = static_cast<Comm*>(comm);
  m->mr = nullptr;
  m->desc = nullptr;
  m->base = reinterpret_cast<uintptr_t>(data);
  m->size = size;
  if (d->mrLocal && size > 0) {
    int rc =
        fi_mr_reg(d->domain, data, size, FI_SEND | FI_RECV, 0, gNextMrKey++, 0, &m->mr, nullptr);
    if (rc == 0 && d->mrEndpoint) {
      rc = fi_mr_bind(m->mr, &d->ep->fid, 0);
      if (rc == 0) rc = fi_mr_enable(m->mr);
    }
    if (rc != 0) {
      logMsg(XCCL_NET_LOG_WARN, "fi_mr_reg(%p, %zu): %s", data, size, fi_strerror(-rc));
      if (m->mr != nullptr) fi_close(&m->mr->fid);
      delete m;
      return xcclSystemError;
    }
    m->desc = fi_mr_desc(m->mr);
  }
  *mhandle = m;
  gMrs.insert(m);
  return xcclSuccess;
}

// Closes one registration (gMu held).
int releaseMr(Mr* m) {
  gMrs.erase(m);
  const int rc = m->mr != nullptr ? fi_close(&m->mr->fid) : 0;
  m->magic = kDeadMagic;
  delete m;
  return rc;
}

xcclResult_t lfDeregMr(void* comm, void* mhandle) {
  std::lock_guard<std::mutex> lock(gMu);
  if (asComm(comm, kSendMagic) == nullptr && asComm(comm, kRecvMagic) == nullptr)
    return xcclInvalidArgument;
  auto* m = static_cast<Mr*>(mhandle);
  if (m == nullptr || m->magic != kMrMagic || !gMrs.count(m)) return xcclInvalidArgument;
  const int rc = releaseMr(m);
  if (rc != 0) {
    logMsg(XCCL_NET_LOG_WARN, "fi_close(mr): %s", fi_strerror(-rc));
    return xcclSystemError;
  }
  return xcclSuccess;
}

// isend and irecv: post, or leave *request NULL when the provider has no room (EAGAIN).
xcclResult_t post(uint32_t magic, void* commp, void* data, size_t size, void* mhandle,
                  void** request) {
  if (request == nullptr || (data == nullptr && size > 0)) return xcclInvalidArgument;
  std::lock_guard<std::mutex> lock(gMu);
  Comm* c = asComm(commp, magic);
  if (c == nullptr || gDev == nullptr) return xcclInvalidArgument;
  Device* d = gDev;
  *request = nullptr;
  if (size > d->info->ep_attr->max_msg_size) return xcclInvalidArgument;
  void* desc = nullptr;
  xcclResult_t res = descFor(d, mhandle, data, size, &desc);
  if (res != xcclSuccess) return res;
  if (c->dead) return xcclRemoteError;
  bool send = magic == kSendMagic;
  Request* r = newRequest(send ? ReqKind::kSend : ReqKind::kRecv, c, c->peer);
  r->size = size;
  ssize_t rc;
  if (send) {
    rc = fi_tsend(d->ep, data, size, desc, c->peer, c->tag, &r->ctx);
  } else {
    fi_addr_t src = d->directedRecv ? c->peer : FI_ADDR_UNSPEC;
    rc = fi_trecv(d->ep, data, size, desc, src, c->tag, 0, &r->ctx);
  }
  if (rc == -FI_EAGAIN) {
    freeRequest(r);
    progress(d);
    return xcclSuccess;
  }
  if (rc != 0) {
    freeRequest(r);
    logMsg(XCCL_NET_LOG_WARN, "%s: %s", send ? "fi_tsend" : "fi_trecv",
           fi_strerror(static_cast<int>(-rc)));
    return xcclSystemError;
  }
  // The liveness clock starts with the wait, unless this comm already waits.
  if (c->pending.empty()) c->lastPing = Clock::now();
  c->pending.insert(r);
  *request = r;
  return xcclSuccess;
}

xcclResult_t lfIsend(void* sendComm, void* data, size_t size, void* mhandle, void** request) {
  return post(kSendMagic, sendComm, data, size, mhandle, request);
}

xcclResult_t lfIrecv(void* recvComm, void* data, size_t size, void* mhandle, void** request) {
  return post(kRecvMagic, recvComm, data, size, mhandle, request);
}

xcclResult_t lfTest(void* request, int* done, size_t* size) {
  if (done == nullptr) return xcclInvalidArgument;
  std::lock_guard<std::mutex> lock(gMu);
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || r->magic != kReqMagic || r->userDone || gDev == nullptr ||
      (r->kind != ReqKind::kSend && r->kind != ReqKind::kRecv))
    return xcclInvalidArgument;
  Device* d = gDev;
  *done = 0;
  if (!r->cqDone && !r->failed) {
    progress(d);
    if (!r->cqDone && !r->failed && r->owner != nullptr) maybePing(d, r->owner);
  }
  if (!r->cqDone && !r->failed) return xcclSuccess;
  // Done: hand it back and forget it.
  xcclResult_t res = r->result;
  *done = 1;
  if (size != nullptr) *size = res == xcclSuccess ? r->size : 0;
  if (r->owner != nullptr) r->owner->pending.erase(r);
  r->owner = nullptr;
  r->userDone = true;
  if (r->cqDone) freeRequest(r);  // else freed when libfabric reports it (cancelled)
  return res;
}

xcclResult_t closeComm(void* commp, uint32_t magic) {
  std::lock_guard<std::mutex> lock(gMu);
  Comm* c = asComm(commp, magic);
  if (c == nullptr || gDev == nullptr) return xcclInvalidArgument;
  Device* d = gDev;
  // A ping in flight outlives the comm: it only points back to clear Comm::ping.
  if (c->ping != nullptr) c->ping->owner = nullptr;
  std::vector<Request*> held;
  for (Request* r : c->pending) {
    if (!r->cqDone) held.push_back(r);
  }
  std::vector<Mr*> mrs;  // released with the comm, unless its requests may still use them
  for (Mr* m : gMrs) {
    if (m->comm == c) mrs.push_back(m);
  }
  dropComm(d, c);
  // Cancelled receives report at once; give them (and sends near their end) a moment. What
  // libfabric still holds after that may still touch its memory: the ABI's xcclInProgress.
  const auto until = Clock::now() + std::chrono::milliseconds(50);
  for (;;) {
    progress(d);
    size_t left = 0;
    for (Request* r : held) left += gLiveRequests.count(r);
    if (left == 0) {
      for (Mr* m : mrs) releaseMr(m);
      return xcclSuccess;
    }
    if (Clock::now() >= until) {
      for (Mr* m : mrs) m->comm = nullptr;  // kept, like the memory, until exit
      logMsg(XCCL_NET_LOG_INFO,
             "close: %zu request(s) still held by the provider; their "
             "memory must stay valid",
             left);
      return xcclInProgress;
    }
    std::this_thread::yield();
  }
}

xcclResult_t lfCloseSend(void* sendComm) { return closeComm(sendComm, kSendMagic); }

xcclResult_t lfCloseRecv(void* recvComm) { return closeComm(recvComm, kRecvMagic); }

xcclResult_t lfCloseListen(void* listenComm) {
  std::lock_guard<std::mutex> lock(gMu);
  Comm* l = asComm(listenComm, kListenMagic);
  if (l == nullptr || gDev == nullptr) return xcclInvalidArgument;
  if (l->ctrlRecv != nullptr) abandonRequest(gDev, l->ctrlRecv);
  l->magic = kDeadMagic;
  delete l;
  progress(gDev);
  return xcclSuccess;
}

}  // namespace
}  // namespace xccl_net_libfabric

extern "C" __attribute__((visibility("default"))) const xcclNet_v1_t xcclNetPlugin_v1 = {
    "libfabric",
    xccl_net_libfabric::lfInit,
    xccl_net_libfabric::lfDevices,
    xccl_net_libfabric::lfGetProperties,
    xccl_net_libfabric::lfListen,
    xccl_net_libfabric::lfConnect,
    xccl_net_libfabric::lfAccept,
    xccl_net_libfabric::lfRegMr,
    xccl_net_libfabric::lfDeregMr,
    xccl_net_libfabric::lfIsend,
    xccl_net_libfabric::lfIrecv,
    xccl_net_libfabric::lfTest,
    xccl_net_libfabric::lfCloseSend,
    xccl_net_libfabric::lfCloseRecv,
    xccl_net_libfabric::lfCloseListen,
};
