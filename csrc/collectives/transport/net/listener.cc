// The set-up of a communicator's pairs through a network plugin (connection.h): listen,
// connect to every remote peer and accept one connection from each, with an authenticated
// hello, then one Connection per pair (connection.cc).
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/auth.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "connection.h"
#include "plugin.h"

namespace xccl::net {

namespace {

constexpr char kHelloMagic[4] = {'X', 'N', 'H', '1'};
// magic, sender rank, receiver rank (u32 each), the sender's nonce, its proof
constexpr size_t kHelloBytes = 4 + 4 + 4 + auth::kNonceBytes + auth::kProofBytes;

std::string helloContext(int from, int to) { return strCat("net hello ", from, ">", to); }

struct Outgoing {  // this rank's side towards one peer while connecting
  void* comm = nullptr;
  void* mr = nullptr;
  void* req = nullptr;
  std::string hello;
  bool sent = false;
};

struct Incoming {  // an accepted connection whose hello has not arrived yet
  void* comm = nullptr;
  void* mr = nullptr;
  void* req = nullptr;
  std::string buf;
};

}  // namespace

NetListener::NetListener(const xcclNet_v1_t* table) : net_(table) {
  std::string handle(XCCL_NET_HANDLE_MAXSIZE, '\0');
  check(net_->listen(0, handle.data(), &listen_), net_->name, "listen");
  nonce_ = auth::nonce();
  record_ = handle + nonce_;
}

NetListener::~NetListener() {
  if (listen_ != nullptr) net_->closeListen(listen_);
}

std::map<int, std::unique_ptr<Connection>> NetListener::connectAll(
    int rank, const std::set<int>& peers, const std::vector<std::string>& records,
    const std::vector<std::string>& names, const std::string& secret, Device& device,
    const WaitCtx& ctx) {
  const char* plugin = net_->name;
  std::map<int, Outgoing> out;
  std::map<int, void*> in;  // by the rank its hello proved
  std::vector<Incoming> accepting;
  auto cleanup = [&] {
    for (auto& [p, o] : out) {
      if (o.comm == nullptr) continue;
      if (o.mr != nullptr) net_->deregMr(o.comm, o.mr);
      net_->closeSend(o.comm);
    }
    for (auto& a : accepting) {
      if (a.mr != nullptr) net_->deregMr(a.comm, a.mr);
      net_->closeRecv(a.comm);
    }
    for (auto& [p, c] : in) net_->closeRecv(c);
  };
  for (int p : peers) {
    const std::string& rec = records[p];
    if (rec.size() != XCCL_NET_HANDLE_MAXSIZE + auth::kNonceBytes) {
      throw RemoteError(strCat("rank ", rank, ": rank ", p, " published no ", plugin,
                               " network handle (is XCCL_NET_PLUGIN the same on every rank?)"));
    }
    Outgoing& o = out[p];
    const std::string mine = auth::nonce();
    o.hello.assign(kHelloMagic, 4);
    putU32(o.hello, static_cast<uint32_t>(rank));
    putU32(o.hello, static_cast<uint32_t>(p));
    o.hello += mine;
    o.hello += auth::proof(secret, "net-connector", rec.substr(XCCL_NET_HANDLE_MAXSIZE), mine,
                           helloContext(rank, p));
  }
  Backoff idle;
  try {
    size_t sent = 0;
    while (sent < out.size() || in.size() < peers.size()) {
      if (ctx.abortFlag != nullptr && ctx.abortFlag->load()) {
        throw InvalidUsage(strCat(ctx.what, ": aborted"));
      }
      if (ctx.deadline.expired()) {
        std::string missing;
        for (int p : peers) {
          if (!out[p].sent) missing += strCat(" ->", p);
          if (!in.count(p)) missing += strCat(" <-", p);
        }
        throw Timeout(
            strCat(ctx.what, ": pairs not made within ", ctx.deadline.budgetMs(), " ms:", missing));
      }
      bool moved = false;
      for (auto& [p, o] : out) {
        if (o.sent) continue;
        if (o.comm == nullptr) {
          const xcclResult_t r = net_->connect(0, records[p].data(), &o.comm);
          if (r == xcclRemoteError) {
            throw RemoteError(strCat("rank ", rank, ": connecting to rank ", p, " (", names[p],
                                     ") through the ", plugin,
                                     " network plugin failed: is it "
                                     "still running?"));
          }
          check(r, plugin, "connect");
          if (o.comm == nullptr) continue;
          check(net_->regMr(o.comm, o.hello.data(), o.hello.size(), XCCL_NET_PTR_HOST, &o.mr),
                plugin, "regMr (hello)");
          moved = true;
        }
        if (o.req == nullptr) {
          check(net_->isend(o.comm, o.hello.data(), o.hello.size(), o.mr, &o.req), plugin,
                "isend (hello)");
          if (o.req == nullptr) continue;
          moved = true;
        }
        int done = 0;
        size_t n = 0;
        check(net_->test(o.req, &done, &n), plugin, "test (hello sent)");
        if (done) {
          o.sent = true;
          o.req = nullptr;
          ++sent;
          moved = true;
        }
      }
      void* rc = nullptr;
      check(net_->accept(listen_, &rc), plugin, "accept");
      if (rc != nullptr) {
        accepting.push_back({rc, nullptr, nullptr, std::string(kHelloBytes + 64, '\0')});
        Incoming& a = accepting.back();
        check(net_->regMr(a.comm, a.buf.data(), a.buf.size(), XCCL_NET_PTR_HOST, &a.mr), plugin,
              "regMr (hello)");
        moved = true;
      }
      for (size_t i = 0; i < accepting.size();) {
        Incoming& a = accepting[i];
        if (a.req == nullptr) {
          check(net_->irecv(a.comm, a.buf.data(), a.buf.size(), a.mr, &a.req), plugin,
                "irecv (hello)");
          if (a.req == nullptr) {
            ++i;
            continue;
          }
        }
        int done = 0;
        size_t n = 0;
        const xcclResult_t r = net_->test(a.req, &done, &n);
        std::string refused;
        int from = -1;
        if (r != xcclSuccess) {
          refused = "it failed before its hello";
        } else if (!done) {
          ++i;
          continue;
        } else {
          const auto* b = reinterpret_cast<const unsigned char*>(a.buf.data());
          from = n == kHelloBytes && memcmp(b, kHelloMagic, 4) == 0
                     ? static_cast<int>(getU32(b + 4))
                     : -1;
          const int to = n == kHelloBytes ? static_cast<int>(getU32(b + 8)) : -1;
          if (from < 0 || !peers.count(from) || to != rank) {
            refused = "its hello names no expected pair";
          } else if (in.count(from)) {
            refused = strCat("rank ", from, " connected twice");
          } else {
            const std::string theirs(a.buf.data() + 12, auth::kNonceBytes);
            const std::string proof(a.buf.data() + 12 + auth::kNonceBytes, auth::kProofBytes);
            if (!auth::sameProof(proof, auth::proof(secret, "net-connector", nonce_, theirs,
                                                    helloContext(from, rank)))) {
              refused = strCat("its hello claims rank ", from, " without the secret");
            }
          }
        }
        if (a.mr != nullptr) net_->deregMr(a.comm, a.mr);
        if (refused.empty()) {
          in[from] = a.comm;
        } else {
          XCCL_WARN(NET, "rank ", rank, ": refused a connection through the ", plugin,
                    " network plugin: ", refused);
          net_->closeRecv(a.comm);
        }
        accepting.erase(accepting.begin() + static_cast<std::ptrdiff_t>(i));
        moved = true;
      }
      if (moved) {
        idle.reset();
      } else {
        idle.idle();
      }
    }
  } catch (...) {
    cleanup();
    throw;
  }
  std::map<int, std::unique_ptr<Connection>> result;
  for (int p : peers) {
    Outgoing& o = out[p];
    if (o.mr != nullptr) net_->deregMr(o.comm, o.mr);
    void* sc = o.comm;
    o.comm = nullptr;
    void* rc = in[p];
    in.erase(p);
    try {
      result[p] = makeNetConnection(net_, rank, p, names[p], sc, rc, device);
    } catch (...) {
      cleanup();
      throw;
    }
  }
  return result;
}

}  // namespace xccl::net
