/*
 * net_libfabric.cc — a libxccl network plugin (xcclNet_v1_t) on libfabric.
 *
 * Built like an out-of-tree vendor plugin: it includes only the ABI header (xccl_net.h) and
 * system/libfabric headers, and exports one symbol, xcclNetPlugin_v1.
 *
 * Design
 *   - One device: the first fi_info that matches the hints (provider from
 *     XCCL_NET_LIBFABRIC_PROVIDER, else FI_PROVIDER, else "tcp;ofi_rxm"; FI_EP_RDM; FI_TAGGED;
 *     FI_ORDER_SAS on tx and rx). XCCL_NET_LIBFABRIC_IFACE (or FI_TCP_IFACE) names the domain
 *     to use ("lo", "eth0"); without either, the first non-loopback domain is preferred and
 *     loopback is the fallback when nothing else exists.
 *   - One endpoint, CQ and AV for the whole process, opened on first use and shared by every
 *     communicator. All progress is reading that CQ: whichever thread calls test (or accept,
 *     connect, isend) completes whatever requests the entries name through op_context. A
 *     mutex serialises every call into libfabric and all of the plugin's shared state.
 *   - Tags (64 bits). Bit 63 set marks the plugin's own control traffic: bit 62 clear is a
 *     connect message to listener id (low 32 bits); bit 62 set is a liveness ping. Data tags
 *     have bit 63 clear: (31-bit random process nonce << 32) | connection id. The receive is
 *     also directed to the connector's fi_addr when the provider offers FI_DIRECTED_RECV, so
 *     ids from different processes cannot collide there; the nonce covers providers without.
 *   - listen: handle = {magic, listen id, the endpoint's address}; a control receive for the
 *     listener's tag stays posted. connect: av-insert the listener, send it a control message
 *     carrying our own address and the fresh data tag; the send communicator is returned once
 *     that send has completed (NULL until then; the in-progress state is keyed by the caller's
 *     thread and the handle bytes). accept: when the control receive has completed, av-insert
 *     the connector and return a receive communicator for (its fi_addr, its data tag).
 *   - Peer death: libfabric's reliable-datagram providers do not fail a posted receive when
 *     the sending peer goes away (nothing is owed on it), and tcp;ofi_rxm does not even fail
 *     the sends in flight on the lost connection: it logs the refused reconnection and answers
 *     new sends to that peer with -FI_EAGAIN forever. So a request that has waited longer than
 *     a second makes the plugin send a zero-byte ping to its peer (again every second, every
 *     250 ms while refused); a peer is declared dead when a ping completes with an error, or
 *     when the provider has refused pings to it for XCCL_NET_LIBFABRIC_DEAD_AFTER_MS (3000)
 *     while nothing has completed with it for as long. Death fails every request on every
 *     communicator with that peer (xcclRemoteError) and every later isend/irecv on them. A
 *     host that vanishes without closing its sockets is found only when TCP gives up.
 *   - Memory registration: done (fi_mr_reg, descriptors passed to isend/irecv) only when the
 *     domain's mr_mode asks for FI_MR_LOCAL (or XCCL_NET_LIBFABRIC_FORCE_MR=1, which exists to
 *     exercise that path); otherwise regMr returns a non-NULL token with no registration.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
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

#include "xccl_net.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHandleMagic = 0x584c4631;  // "XLF1": a listen handle of this plugin
constexpr uint32_t kCtrlMagic = 0x584c4643;    // "XLFC": a connect message
constexpr uint32_t kSendMagic = 0x584c4653;    // object kinds, checked on every call so that a
constexpr uint32_t kRecvMagic = 0x584c4652;    // wrong or stale pointer of another kind is an
constexpr uint32_t kListenMagic = 0x584c464c;  // xcclInvalidArgument rather than a crash
constexpr uint32_t kMrMagic = 0x584c464d;
constexpr uint32_t kReqMagic = 0x584c4651;
constexpr uint32_t kDeadMagic = 0xdeaddead;  // written into freed objects to catch reuse

constexpr uint64_t kCtrlBit = 1ull << 63;
constexpr uint64_t kPingBit = 1ull << 62;
constexpr size_t kMaxAddr = 96;  // sockaddr_in6 is 28; leaves room for other formats

// How long a request waits before the plugin starts checking that its peer is alive, and how
// often it checks; how often while the provider refuses to reach the peer.
constexpr auto kPingAfter = std::chrono::milliseconds(1000);
constexpr auto kPingRetry = std::chrono::milliseconds(250);

// The listen handle. It travels through libxccl's bootstrap as opaque bytes.
struct Handle {
  uint32_t magic;
  uint32_t listenId;
  uint32_t addrLen;
  uint32_t reserved;
  uint8_t addr[kMaxAddr];
};
static_assert(sizeof(Handle) <= XCCL_NET_HANDLE_MAXSIZE, "handle too large");

// The connect message: who is connecting and which data tag its sends will carry.
struct CtrlMsg {
  uint32_t magic;
  uint32_t addrLen;
  uint64_t dataTag;
  uint8_t addr[kMaxAddr];
};

enum class ReqKind { kSend, kRecv, kCtrlSend, kCtrlRecv, kPingSend, kPingRecv };

struct Comm;

// One posted libfabric operation. `ctx` is first so that the op_context libfabric hands back
// (&ctx) is the request itself; the struct is kept standard-layout for that reason.
struct Request {
  fi_context2 ctx;
  uint32_t magic;
  ReqKind kind;
  Comm* owner;  // the communicator that posted it; NULL once that comm is closed
  fi_addr_t peer;
  bool cqDone;    // libfabric has reported its completion (success or error)
  bool userDone;  // the caller is finished with it: test reported done, or its comm closed
  bool failed;    // failed before libfabric reported it (peer dead); test reports it now
  xcclResult_t result;
  size_t size;
  CtrlMsg ctrl;  // the buffer of control messages (connect/accept), which must outlive any
                 // comm because libfabric may still write or read it after a close
};

// Send and receive communicators and listeners share this header.
struct Comm {
  uint32_t magic;
  fi_addr_t peer;              // send/recv: the other side
  uint64_t tag;                // send/recv: the data tag; listen: the control tag
  std::set<Request*> pending;  // requests posted here and not yet handed back as done
  Clock::time_point lastPing;  // recv: when it last checked that the peer is alive
  Request* ping;               // recv: the liveness ping in flight, NULL when none
  bool dead;                   // its peer was declared dead: every new request fails
  uint32_t listenId;           // listen: its id
  Request* ctrlRecv;           // listen: the posted control receive, NULL when not posted
};

struct Mr {
  uint32_t magic;
  Comm* comm;  // where it was registered: closing that comm releases it (xccl_net.h)
  fid_mr* mr;  // NULL when the provider needs no registration
  void* desc;
  uintptr_t base;
  size_t size;
};

// A connect in progress: the control send, and the communicator it will become.
struct PendingConnect {
  Comm* comm;
  Request* req;  // NULL until the control send has been posted
};

// What the plugin knows of a peer's liveness. Over tcp;ofi_rxm a dead peer shows only as a
// provider that cannot reconnect to it: rxm logs "connection refused" internally and keeps
// answering sends with -FI_EAGAIN, and what was in flight on the lost connection never
// completes. So a peer is declared dead when a ping has been refused that way for deadAfter
// and nothing at all has completed with it for as long.
struct PeerState {
  Clock::time_point lastHeard;     // the last successful completion of anything with it
  Clock::time_point refusedSince;  // valid while `refused`
  bool refused = false;
};

struct Device {
  fi_info* info = nullptr;  // the chosen entry (owned: fi_dupinfo)
  std::string name;         // provider/domain, for logs and properties
  bool directedRecv = false;
  bool mrLocal = false;     // registration needed (or forced): regMr registers, isend needs it
  bool mrEndpoint = false;  // registrations must be bound to the endpoint
  bool opened = false;
  bool openFailed = false;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  uint8_t addr[kMaxAddr] = {};
  size_t addrLen = 0;
  std::map<std::string, fi_addr_t> avCache;  // peer address bytes -> fi_addr
  std::set<fi_addr_t> deadPeers;
  std::map<fi_addr_t, PeerState> peers;
  std::chrono::milliseconds deadAfter{3000};  // XCCL_NET_LIBFABRIC_DEAD_AFTER_MS
  std::set<Comm*> comms;                      // live send and receive communicators
  std::map<std::string, PendingConnect> connecting;
  Request* pingRecv = nullptr;  // the posted receive that swallows peers' pings
};

std::mutex gMu;  // guards everything below, and every call into libfabric
xcclNetLogger_t gLogger = nullptr;
bool gInitDone = false;
Device* gDev = nullptr;  // NULL: no device
uint32_t gNonce = 0;     // 31 random bits, the high half of this process's data tags
uint32_t gNextConnId = 1;
uint32_t gNextListenId = 1;
uint64_t gNextMrKey = 1;

void logMsg(xcclNetLogLevel_t level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void logMsg(xcclNetLogLevel_t level, const char* fmt, ...) {
  if (gLogger == nullptr) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  gLogger(level, "%s", buf);
}

const char* envOr(const char* name, const char* fallback) {
  const char* v = getenv(name);
  return (v != nullptr && v[0] != '\0') ? v : fallback;
}

// Printable form of a socket address ("127.0.0.1:4242"); other formats as hex.
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

// Chooses the device among the provider's entries (see the header comment).
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

// Every request libfabric may still hold (guarded by gMu): closeComm asks which of a closed
// comm's requests are still there.
std::set<Request*> gLiveRequests;
// Every registration not yet released (guarded by gMu).
struct Mr;
std::set<Mr*> gMrs;

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

void postPingRecv(Device* dev);
void markPeerDead(Device* dev, fi_addr_t peer, const char* why);

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

// Reads the CQ until it is empty, completing whatever requests the entries name.
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

// Opens the process's endpoint on first use. Called with gMu held.
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

// fi_addr of a peer address; inserted once and cached. A peer that was marked dead and shows
// up again (a new process at the same address) gets a fresh AV entry.
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

bool validDev(int dev) { return gDev != nullptr && dev == 0; }

Comm* asComm(void* p, uint32_t magic) {
  auto* c = static_cast<Comm*>(p);
  return (c != nullptr && c->magic == magic) ? c : nullptr;
}

// Forgets a communicator: its posted requests are abandoned (cancelled where libfabric can,
// and freed whenever libfabric reports them), so a close never waits for the peer.
void dropComm(Device* dev, Comm* c) {
  for (Request* r : c->pending) {
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

// Posts (or re-posts) a listener's control receive.
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

// Checks that the peer of a waiting receive is still there (see the header comment).
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
  if (l->ctrlRecv != nullptr) {
    Request* r = l->ctrlRecv;
    r->owner = nullptr;
    r->userDone = true;
    if (r->cqDone) {
      freeRequest(r);
    } else {
      fi_cancel(&gDev->ep->fid, &r->ctx);
    }
  }
  l->magic = kDeadMagic;
  delete l;
  progress(gDev);
  return xcclSuccess;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const xcclNet_v1_t xcclNetPlugin_v1 = {
    "libfabric", lfInit,   lfDevices,   lfGetProperties, lfListen,
    lfConnect,   lfAccept, lfRegMr,     lfDeregMr,       lfIsend,
    lfIrecv,     lfTest,   lfCloseSend, lfCloseRecv,     lfCloseListen,
};
