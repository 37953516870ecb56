/*
 * net_libfabric.h — the libfabric network plugin's own declarations (xcclNet_v1_t on
 * libfabric), shared by its two sources: fabric.cc (the device: discovery, the endpoint with
 * its CQ and AV, progress and completions, liveness pings, peer death) and net_libfabric.cc
 * (the table's entries and the exported table).
 *
 * Built like an out-of-tree vendor plugin: it includes only the ABI header (xccl_net.h) and
 * system/libfabric headers, and exports one symbol, xcclNetPlugin_v1. What the two sources
 * share lives in namespace xccl_net_libfabric; -fvisibility=hidden and the build's version
 * script keep it out of the dynamic symbol table, so two plugins never interpose each other.
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
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "xccl_net.h"

namespace xccl_net_libfabric {

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

// ---- process-wide state, defined in fabric.cc ----

// gMu guards all of the plugin's state (these globals, net_libfabric.cc's own, the device and
// everything it points to) and every call into libfabric.
extern std::mutex gMu;
extern xcclNetLogger_t gLogger;  // init's logger; NULL: log nothing
extern Device* gDev;             // NULL: no device
// Every request libfabric may still hold (guarded by gMu): closeComm asks which of a closed
// comm's requests are still there.
extern std::set<Request*> gLiveRequests;

// ---- fabric.cc; all of it is called with gMu held ----

void logMsg(xcclNetLogLevel_t level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Printable form of a socket address ("127.0.0.1:4242"); other formats as hex.
std::string addrString(const void* addr, size_t len);

// Chooses the device among the provider's entries (see the design notes above) and sets gDev;
// leaves it NULL when nothing fits.
void discover();

// Opens the process's endpoint on first use.
xcclResult_t openDevice(Device* dev);

// fi_addr of a peer address; inserted once and cached. A peer that was marked dead and shows
// up again (a new process at the same address) gets a fresh AV entry.
xcclResult_t peerAddr(Device* dev, const uint8_t* addr, size_t len, fi_addr_t* out);

// A request, counted in gLiveRequests until freed.
Request* newRequest(ReqKind kind, Comm* owner, fi_addr_t peer);
void freeRequest(Request* r);

// Reads the CQ until it is empty, completing whatever requests the entries name.
void progress(Device* dev);

// Posts (or re-posts) a listener's control receive.
void postCtrlRecv(Device* dev, Comm* l);

// Checks that the peer of a waiting receive is still there (see the design notes above).
void maybePing(Device* dev, Comm* c);

}  // namespace xccl_net_libfabric
