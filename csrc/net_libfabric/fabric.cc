// fabric.cc — the libfabric side of the plugin (net_libfabric.h has the design): choosing
// the device and opening its endpoint, requests and the CQ entries that complete them, the
// liveness pings and what a dead peer fails. The table entries in net_libfabric.cc call all of
// it with gMu held.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "net_libfabric.h"

namespace xccl_net_libfabric {

std::mutex gMu;
xcclNetLogger_t gLogger = nullptr;
Device* gDev = nullptr;
std::set<Request*> gLiveRequests;

void logMsg(xcclNetLogLevel_t level, const char* fmt, ...) {
  if (gLogger == nullptr) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  gLogger(level, "%s", buf);
}

std::string addrString(const void* addr, size_t len) {
  char host[INET6_ADDRSTRLEN] = {};
  char out[96];
  if (addr != nullptr && len >= sizeof(sockaddr_in) &&
      reinterpret_cast<const sockaddr*>(addr)->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    snprintf(out, sizeof(out), "%s:%u", host, ntohs(in->sin_port));
    return out;
  }
  if (addr != nullptr && len >= sizeof(sockaddr_in6) &&
      reinterpret_cast<const sockaddr*>(addr)->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    snprintf(out, sizeof(out), "[%s]:%u", host, ntohs(in6->sin6_port));
    return out;
  }
  std::string hex;
  const auto* p = static_cast<const uint8_t*>(addr);
  for (size_t i = 0; p != nullptr && i < len && hex.size() + 2 < 63; i++) {
    snprintf(out, sizeof(out), "%02x", p[i]);
    hex += out;
  }
  return hex;
}

// ---- requests and completions ----

Request* newRequest(ReqKind kind, Comm* owner, fi_addr_t peer) {
  auto* r = new Request();
  gLiveRequests.insert(r);
  memset(&r->ctx, 0, sizeof(r->ctx));
  r->magic = kReqMagic;
  r->kind = kind;
  r->owner = owner;
  r->peer = peer;
  r->cqDone = false;
  r->userDone = false;
  r->failed = false;
  r->result = xcclSuccess;
  r->size = 0;
  return r;
}

void freeRequest(Request* r) {
  gLiveRequests.erase(r);
  r->magic = kDeadMagic;
  delete r;
}

namespace {

// A request of the caller's that will not complete now: failed here, freed once libfabric
// reports it (a cancelled or late completion) or never touched again if it does not.
void failRequest(Device* dev, Request* r) {
  if (r->cqDone || r->failed) return;
  r->failed = true;
  r->result = xcclRemoteError;
  r->size = 0;
  if (r->kind == ReqKind::kRecv) fi_cancel(&dev->ep->fid, &r->ctx);
}

void markPeerDead(Device* dev, fi_addr_t peer, const char* why) {
  if (!dev->deadPeers.insert(peer).second) return;
  int failed = 0;
  for (Comm* c : dev->comms) {
    if (c->peer != peer) continue;
    c->dead = true;
    for (Request* r : c->pending) {
      if (!r->cqDone && !r->failed) failed++;
      failRequest(dev, r);
    }
  }
  std::string addr = "?";
  for (const auto& kv : dev->avCache)
    if (kv.second == peer) addr = addrString(kv.first.data(), kv.first.size());
  logMsg(XCCL_NET_LOG_WARN, "peer %s is unreachable (%s): %d pending request(s) failed",
         addr.c_str(), why, failed);
}

void postPingRecv(Device* dev) {
  Request* r = newRequest(ReqKind::kPingRecv, nullptr, FI_ADDR_UNSPEC);
  ssize_t rc = fi_trecv(dev->ep, &r->ctrl, sizeof(r->ctrl), nullptr, FI_ADDR_UNSPEC,
                        kCtrlBit | kPingBit, 0, &r->ctx);
  if (rc != 0) {
    // Without it, peers' pings wait in the provider's unexpected queue; they are zero bytes
    // and only sent while a receive waits, so that is a slow leak, retried on the next post.
    logMsg(XCCL_NET_LOG_TRACE, "ping receive not posted: %s", fi_strerror(static_cast<int>(-rc)));
    freeRequest(r);
    return;
  }
  dev->pingRecv = r;
}

// Libfabric has reported a request. Device-owned requests (pings) are handled here; the rest
// are marked and freed once the caller is done with them too.
void completeRequest(Device* dev, Request* r, xcclResult_t result, size_t len) {
  r->cqDone = true;
  if (result == xcclSuccess && r->peer != FI_ADDR_UNSPEC) {
    auto p = dev->peers.find(r->peer);
    if (p != dev->peers.end()) {
      p->second.lastHeard = Clock::now();
      p->second.refused = false;
    }
  }
  if (!r->failed) {
    r->result = result;
    // A send's entry has no meaningful length: it sent what it was given (kept at post).
    if (r->kind == ReqKind::kRecv || r->kind == ReqKind::kCtrlRecv) r->size = len;
  }
  switch (r->kind) {
    case ReqKind::kPingRecv:
      if (dev->pingRecv == r) dev->pingRecv = nullptr;
      freeRequest(r);
      if (dev->pingRecv == nullptr) postPingRecv(dev);
      return;
    case ReqKind::kPingSend:
      if (r->owner != nullptr) r->owner->ping = nullptr;
      if (result != xcclSuccess) markPeerDead(dev, r->peer, "a liveness ping failed");
      freeRequest(r);
      return;
    case ReqKind::kSend:
    case ReqKind::kCtrlSend:
      if (result != xcclSuccess && result != xcclInProgress)
        markPeerDead(dev, r->peer, "a send failed");
      break;
    default:
      break;
  }
  if (r->userDone) freeRequest(r);
}

}  // namespace

void progress(Device* dev) {
  fi_cq_tagged_entry entries[16];
  for (;;) {
    ssize_t n = fi_cq_read(dev->cq, entries, 16);
    if (n > 0) {
      for (ssize_t i = 0; i < n; i++) {
        auto* r = reinterpret_cast<Request*>(entries[i].op_context);
        if (r == nullptr || r->magic != kReqMagic) continue;
        completeRequest(dev, r, xcclSuccess, entries[i].len);
      }
      continue;
    }
    if (n == -FI_EAGAIN) return;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err;
      memset(&err, 0, sizeof(err));
      if (fi_cq_readerr(dev->cq, &err, 0) <= 0) return;
      auto* r = reinterpret_cast<Request*>(err.op_context);
      if (r == nullptr || r->magic != kReqMagic) continue;
      if (err.err == FI_ECANCELED) {
        // Our own fi_cancel of a closed comm's request: nothing to report.
        completeRequest(dev, r, xcclInProgress, 0);
        continue;
      }
      char pbuf[128];
      const char* perr = fi_cq_strerror(dev->cq, err.prov_errno, err.err_data, pbuf, sizeof(pbuf));
      bool quiet = r->kind == ReqKind::kPingSend || r->userDone;
      logMsg(quiet ? XCCL_NET_LOG_TRACE : XCCL_NET_LOG_WARN,
             "%s completed with error %d (%s; provider: %s)%s",
             r->kind == ReqKind::kRecv || r->kind == ReqKind::kCtrlRecv ? "a receive" : "a send",
             err.err, fi_strerror(err.err), perr != nullptr ? perr : "-",
             err.err == FI_ETRUNC ? ": the message is larger than the receive" : "");
      completeRequest(dev, r, xcclRemoteError, err.len);
      continue;
    }
    logMsg(XCCL_NET_LOG_WARN, "fi_cq_read: %s", fi_strerror(static_cast<int>(-n)));
    return;
  }
}

void postCtrlRecv(Device* dev, Comm* l) {
  if (l->ctrlRecv != nullptr) return;
  Request* r = newRequest(ReqKind::kCtrlRecv, l, FI_ADDR_UNSPEC);
  ssize_t rc =
      fi_trecv(dev->ep, &r->ctrl, sizeof(r->ctrl), nullptr, FI_ADDR_UNSPEC, l->tag, 0, &r->ctx);
  if (rc != 0) {
    if (rc != -FI_EAGAIN)
      logMsg(XCCL_NET_LOG_WARN, "control receive: %s", fi_strerror(static_cast<int>(-rc)));
    freeRequest(r);
    return;  // retried by the next accept
  }
  l->ctrlRecv = r;
}

void maybePing(Device* dev, Comm* c) {
  if (c->ping != nullptr || c->dead) return;
  PeerState& ps = dev->peers[c->peer];
  Clock::time_point now = Clock::now();
  if (now - c->lastPing < (ps.refused ? kPingRetry : kPingAfter)) return;
  c->lastPing = now;
  Request* r = newRequest(ReqKind::kPingSend, c, c->peer);
  ssize_t rc = fi_tsend(dev->ep, nullptr, 0, nullptr, c->peer, kCtrlBit | kPingBit, &r->ctx);
  if (rc == -FI_EAGAIN) {
    freeRequest(r);
    if (!ps.refused) {
      ps.refused = true;
      ps.refusedSince = now;
    } else if (now - ps.refusedSince >= dev->deadAfter && now - ps.lastHeard >= dev->deadAfter) {
      markPeerDead(dev, c->peer, "the provider cannot reach it");
    }
    return;
  }
  if (rc != 0) {
    freeRequest(r);
    markPeerDead(dev, c->peer, fi_strerror(static_cast<int>(-rc)));
    return;
  }
  ps.refused = false;
  // The ping belongs to the device (freed by its completion), not to the comm's pending set:
  // the comm only remembers it so as not to send a second one.
  c->ping = r;
}

// ---- the device ----

namespace {

const char* envOr(const char* name, const char* fallback) {
  const char* v = getenv(name);
  return (v != nullptr && v[0] != '\0') ? v : fallback;
}

bool isLoopback(const fi_info* info) {
  if (info->domain_attr != nullptr && info->domain_attr->name != nullptr &&
      strcmp(info->domain_attr->name, "lo") == 0)
    return true;
  const auto* sa = static_cast<const sockaddr*>(info->src_addr);
  if (sa == nullptr) return false;
  if (sa->sa_family == AF_INET && info->src_addrlen >= sizeof(sockaddr_in))
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6 && info->src_addrlen >= sizeof(sockaddr_in6))
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  return false;
}

// fi_getinfo with our hints. `directed` adds FI_DIRECTED_RECV, which not every provider has.
fi_info* queryInfo(const char* prov, bool directed) {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) return nullptr;
  hints->caps = FI_TAGGED | FI_SEND | FI_RECV | (directed ? FI_DIRECTED_RECV : 0);
  // We pass a fi_context2 with every operation, so providers that need one may use it.
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->domain_attr->av_type = FI_AV_TABLE;
  // The registration modes this plugin handles: local registration with descriptors,
  // endpoint-bound registrations, and the RMA-only bits (we do no RMA, so they cost nothing).
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
  hints->fabric_attr->prov_name = strdup(prov);
  fi_info* list = nullptr;
  int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  if (rc != 0) {
    logMsg(XCCL_NET_LOG_INFO, "fi_getinfo(%s%s): %s", prov, directed ? ", directed recv" : "",
           fi_strerror(-rc));
    return nullptr;
  }
  return list;
}

void closeDevice(Device* dev) {
  if (dev->ep != nullptr) fi_close(&dev->ep->fid);
  if (dev->av != nullptr) fi_close(&dev->av->fid);
  if (dev->cq != nullptr) fi_close(&dev->cq->fid);
  if (dev->domain != nullptr) fi_close(&dev->domain->fid);
  if (dev->fabric != nullptr) fi_close(&dev->fabric->fid);
  dev->ep = nullptr;
  dev->av = nullptr;
  dev->cq = nullptr;
  dev->domain = nullptr;
  dev->fabric = nullptr;
}

}  // namespace

void discover() {
  const char* prov = envOr("XCCL_NET_LIBFABRIC_PROVIDER", envOr("FI_PROVIDER", "tcp;ofi_rxm"));
  const char* iface = envOr("XCCL_NET_LIBFABRIC_IFACE", envOr("FI_TCP_IFACE", nullptr));
  bool directed = true;
  fi_info* list = queryInfo(prov, true);
  if (list == nullptr) {
    directed = false;
    list = queryInfo(prov, false);
  }
  if (list == nullptr) {
    logMsg(XCCL_NET_LOG_INFO, "no libfabric provider matches \"%s\": 0 devices", prov);
    return;
  }
  const fi_info* pick = nullptr;
  const fi_info* loop = nullptr;
  for (const fi_info* i = list; i != nullptr; i = i->next) {
    const char* dom = i->domain_attr->name != nullptr ? i->domain_attr->name : "";
    if (iface != nullptr) {
      if (strcmp(dom, iface) == 0) {
        pick = i;
        break;
      }
      continue;
    }
    if (!isLoopback(i)) {
      pick = i;
      break;
    }
    if (loop == nullptr) loop = i;
  }
  if (pick == nullptr) pick = loop;
  if (pick == nullptr) {
    logMsg(XCCL_NET_LOG_INFO, "libfabric provider \"%s\" has no domain named \"%s\": 0 devices",
           prov, iface != nullptr ? iface : "");
    fi_freeinfo(list);
    return;
  }
  auto* dev = new Device();
  dev->info = fi_dupinfo(pick);
  fi_freeinfo(list);
  if (dev->info == nullptr) {
    logMsg(XCCL_NET_LOG_WARN, "fi_dupinfo failed: 0 devices");
    delete dev;
    return;
  }
  dev->directedRecv = directed;
  long deadMs = atol(envOr("XCCL_NET_LIBFABRIC_DEAD_AFTER_MS", "3000"));
  if (deadMs > 0) dev->deadAfter = std::chrono::milliseconds(deadMs);
  uint64_t mrMode = dev->info->domain_attr->mr_mode;
  bool forceMr = strcmp(envOr("XCCL_NET_LIBFABRIC_FORCE_MR", "0"), "1") == 0;
  dev->mrLocal = (mrMode & FI_MR_LOCAL) != 0 || forceMr;
  dev->mrEndpoint = (mrMode & FI_MR_ENDPOINT) != 0;
  dev->name = std::string(dev->info->fabric_attr->prov_name) + "/" +
              (dev->info->domain_attr->name != nullptr ? dev->info->domain_attr->name : "?");
  gDev = dev;
  logMsg(XCCL_NET_LOG_INFO,
         "libfabric %u.%u: provider %s, domain %s, fabric %s, directed recv %s, "
         "memory registration %s",
         FI_MAJOR(fi_version()), FI_MINOR(fi_version()), dev->info->fabric_attr->prov_name,
         dev->info->domain_attr->name, dev->info->fabric_attr->name, directed ? "yes" : "no",
         dev->mrLocal ? "yes" : "not needed");
}

xcclResult_t openDevice(Device* dev) {
  if (dev->opened) return xcclSuccess;
  if (dev->openFailed) return xcclSystemError;
  const char* step = "fi_fabric";
  int rc = fi_fabric(dev->info->fabric_attr, &dev->fabric, nullptr);
  if (rc == 0) {
    step = "fi_domain";
    rc = fi_domain(dev->fabric, dev->info, &dev->domain, nullptr);
  }
  if (rc == 0) {
    step = "fi_cq_open";
    fi_cq_attr cqAttr;
    memset(&cqAttr, 0, sizeof(cqAttr));
    cqAttr.format = FI_CQ_FORMAT_TAGGED;
    cqAttr.wait_obj = FI_WAIT_NONE;  // we only poll
    cqAttr.size = dev->info->tx_attr->size + dev->info->rx_attr->size;
    rc = fi_cq_open(dev->domain, &cqAttr, &dev->cq, nullptr);
  }
  if (rc == 0) {
    step = "fi_av_open";
    fi_av_attr avAttr;
    memset(&avAttr, 0, sizeof(avAttr));
    avAttr.type = FI_AV_TABLE;
    rc = fi_av_open(dev->domain, &avAttr, &dev->av, nullptr);
  }
  if (rc == 0) {
    step = "fi_endpoint";
    rc = fi_endpoint(dev->domain, dev->info, &dev->ep, nullptr);
  }
  if (rc == 0) {
    step = "fi_ep_bind(cq)";
    rc = fi_ep_bind(dev->ep, &dev->cq->fid, FI_TRANSMIT | FI_RECV);
  }
  if (rc == 0) {
    step = "fi_ep_bind(av)";
    rc = fi_ep_bind(dev->ep, &dev->av->fid, 0);
  }
  if (rc == 0) {
    step = "fi_enable";
    rc = fi_enable(dev->ep);
  }
  if (rc == 0) {
    step = "fi_getname";
    size_t len = sizeof(dev->addr);
    rc = fi_getname(&dev->ep->fid, dev->addr, &len);
    dev->addrLen = len;
  }
  if (rc != 0) {
    logMsg(XCCL_NET_LOG_WARN, "%s on %s: %s", step, dev->name.c_str(), fi_strerror(-rc));
    closeDevice(dev);
    dev->openFailed = true;
    return xcclSystemError;
  }
  dev->opened = true;
  postPingRecv(dev);
  logMsg(XCCL_NET_LOG_INFO, "endpoint open on %s at %s", dev->name.c_str(),
         addrString(dev->addr, dev->addrLen).c_str());
  return xcclSuccess;
}

xcclResult_t peerAddr(Device* dev, const uint8_t* addr, size_t len, fi_addr_t* out) {
  std::string key(reinterpret_cast<const char*>(addr), len);
  auto it = dev->avCache.find(key);
  if (it != dev->avCache.end()) {
    if (dev->deadPeers.count(it->second) == 0) {
      *out = it->second;
      return xcclSuccess;
    }
    // A new process at the address of a dead one: a fresh AV entry (and connection). The
    // old one's comms stay dead through Comm::dead, whatever fi_addr the new entry gets.
    fi_addr_t old = it->second;
    dev->avCache.erase(it);
    fi_av_remove(dev->av, &old, 1, 0);
  }
  fi_addr_t fa = FI_ADDR_NOTAVAIL;
  int n = fi_av_insert(dev->av, addr, 1, &fa, 0, nullptr);
  if (n != 1) {
    logMsg(XCCL_NET_LOG_WARN, "fi_av_insert(%s): %s", addrString(addr, len).c_str(),
           n < 0 ? fi_strerror(-n) : "address not inserted");
    return xcclSystemError;
  }
  dev->avCache[key] = fa;
  dev->deadPeers.erase(fa);
  PeerState& ps = dev->peers[fa];
  ps.lastHeard = Clock::now();
  ps.refused = false;
  *out = fa;
  return xcclSuccess;
}

}  // namespace xccl_net_libfabric
