#include "comm.h"
#include "result.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "collectives/algorithms/algorithm.h"
#include "collectives/algorithms/slot.h"
#include "collectives/device/device.h"
#include "collectives/topology/detect.h"
#include "collectives/topology/render.h"
#include "collectives/topology/topo_file.h"
#include "collectives/transport/tcp/connection.h"
#include "common/error.h"
#include "common/log.h"
#include "common/param.h"
#include "common/process.h"

namespace xccl {

XCCL_PARAM(ProgressSpinUs, "PROGRESS_SPIN_US", 50, 0, kKnobMax)
// Operations whose output reaches this many bytes write their final copies with streaming
// stores (the output cannot stay in cache anyway). -1 disables.
XCCL_PARAM(StreamingStoreBytes, "STREAMING_STORE_BYTES", 32 << 20, -1, kKnobMax)
// Polls of a waiting caller before it blocks. 0 by default: with ranks x 2 threads on few
// cores a spinning caller takes the core its own progress thread needs (measured in
// BENCHMARKS.md); raise it only when cores outnumber ranks.
XCCL_PARAM(WaitSpin, "WAIT_SPIN", 0, 0, kKnobMax)
// A topology file (topology/topo_file.h) instead of detection; XCCL_TOPO_DETECT=0 plans from
// host identities alone.
XCCL_PARAM_STR(TopoFile, "TOPO_FILE", "")
XCCL_PARAM(TopoDetect, "TOPO_DETECT", 1, 0, 1)
// Waiting ranks give their core away from the first idle poll (Open MPI's
// mpi_yield_when_idle): -1 when this communicator's ranks on this host outnumber the cores
// this process may run on, 1 always, 0 never.
XCCL_PARAM(YieldWhenIdle, "YIELD_WHEN_IDLE", -1, -1, 1)

xcclConfig_t readConfig(const xcclConfig_t* config) {
  xcclConfig_t cfg = XCCL_CONFIG_INITIALIZER;
  if (config == nullptr) return cfg;
  if (config->magic != XCCL_CONFIG_MAGIC) return *config;  // zero-initialised: this header's
  XCCL_CHECK_ARG(config->size >= offsetof(xcclConfig_t, timeout_ms), "config.size ", config->size,
                 " is too small for an xcclConfig_t");
  std::memcpy(&cfg, config, std::min(config->size, sizeof cfg));
  cfg.size = sizeof cfg;
  return cfg;
}

int64_t timeoutMsOf(const xcclConfig_t* config) {
  return config != nullptr && config->timeout_ms > 0 ? config->timeout_ms : xcclParamTimeoutMs();
}

Comm::Comm(Store& store, int rank, int nranks, const std::string& secret,
           const xcclConfig_t& config, const MemberWatch* watch, const std::atomic<bool>* cancel)
    : rank_(rank),
      nranks_(nranks),
      timeoutMs_(timeoutMsOf(&config)),
      waitSpin_(xcclParamWaitSpin()),
      streamingFrom_(xcclParamStreamingStoreBytes()),
      name_(config.name ? config.name : ""),
      config_(config),
      scope_(recordScope(secret)),
      device_(&getDevice(deviceKind(config.deviceType), config.device)),
      engine_(device_->stagesThroughHost() ? &getDevice("host", -1) : device_) {
  config_.name = nullptr;  // the caller's string: name_ keeps a copy
  const bool setsReproducible =
      XCCL_CONFIG_HAS(&config, reproducible) && config.reproducible != XCCL_CONFIG_UNDEF_INT;
  XCCL_CHECK_ARG(!setsReproducible || config.reproducible == 0 || config.reproducible == 1,
                 "config.reproducible ", config.reproducible, " must be 0 or 1");
  XCCL_CHECK_ARG(
      config.streamErrors == xcclStreamErrorsFail || config.streamErrors == xcclStreamErrorsReport,
      "invalid streamErrors ", static_cast<int>(config.streamErrors),
      " (xcclStreamErrorsFail or xcclStreamErrorsReport)");
  setLogRank(rank);
  auto t0 = Clock::now();
  const std::string topoFile = xcclParamTopoFile();
  std::string hostText;
  if (topoFile.empty() && xcclParamTopoDetect() != 0) {
    try {
      hostText = topo::formatSystem(topo::detectHost(device_->name()));
    } catch (const std::exception& e) {  // planning falls back to host identities
      XCCL_WARN(TOPO, "rank ", rank, ": topology detection failed (", e.what(),
                "); rings follow host identities only");
    }
  }
  peers_ = connectPeers(store, rank, nranks, secret, *engine_, Deadline::after(timeoutMs_),
                        cancel != nullptr ? *cancel : abort_, hostText, watch);
  if (peers_.acceptor) peers_.acceptor->beatHeld(heartbeatIntervalMs());
  std::vector<std::string> hostIds, hostTexts;
  std::vector<int> ordinals;
  for (const auto& p : peers_.peers) {
    hostIds.push_back(p.hostId);
    ordinals.push_back(p.device);
  }
  // Each host's description as its lowest rank published it: the same on every rank.
  std::vector<int> hostOf = hostIndexOf(hostIds);
  for (int r = 0; r < nranks; ++r) {
    if (hostOf[r] == static_cast<int>(hostTexts.size()))
      hostTexts.push_back(peers_.peers[r].topology);
  }
  topo_ = buildCommTopology(hostIds, ordinals, hostTexts, topoFile);
  std::vector<Connection*> conns;
  for (auto& c : peers_.connections) conns.push_back(c.get());
  exchange_ = std::make_unique<Exchange>(rank, nranks, *engine_, conns, topo_.plan.ring(), abort_);
  exchange_->setHosts(topo_.plan.hosts);
  if (setsReproducible) exchange_->setReproducible(config.reproducible == 1);
  exchange_->setDoorbell(peers_.bell.get());
  const int local = static_cast<int>(std::count(hostIds.begin(), hostIds.end(), hostIds[rank]));
  const int cores = usableCores();
  const int64_t yieldKnob = xcclParamYieldWhenIdle();
  yieldWhenIdle_ = yieldKnob < 0 ? local > cores : yieldKnob == 1;
  // The slot path's size limit, alike on every rank of this host: from the peer records.
  int hostCores = cores;
  for (const PeerInfo& p : peers_.peers) {
    if (p.hostId == hostIds[rank] && p.cores > 0) hostCores = std::min(hostCores, p.cores);
  }
  for (const PeerInfo& p : peers_.peers) {
    if (p.hostId == hostIds[rank] && p.cores <= 0) hostCores = 0;  // unknown: the defaults
  }
  exchange_->setSlotMax(algo::slotMaxBytes(local, hostCores > 0 ? hostCores : local));
  exchange_->setYieldWhenIdle(yieldWhenIdle_);
  if (yieldWhenIdle_ && rank == 0) {
    XCCL_INFO(INIT, "comm ", name_, ": ", local, " rank(s) on this host, ", cores,
              " core(s) for this process: waiting ranks yield their core at once",
              yieldKnob < 0 ? " (XCCL_YIELD_WHEN_IDLE=1 forces it, 0 turns it off)" : "");
  }
  shm::Arena* arena = peers_.arena.get();
  const bool laterPeers = std::any_of(peers_.onFirstUse.begin(), peers_.onFirstUse.end(),
                                      [](char c) { return c != 0; });
  heartbeat_ = std::make_unique<Heartbeat>(
      rank, conns, arena ? std::function<void()>([arena] { arena->beatAll(); }) : nullptr,
      laterPeers);
  exchange_->setConnector([this](int peer) { return connectOnFirstUse(peer); });
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  // The start-up summary: one line per rank saying where it runs and how it reaches peers.
  int shm = 0, tcp = 0, viaNet = 0, shmLater = 0, tcpLater = 0;
  for (int p = 0; p < nranks; ++p) {
    const auto& c = peers_.connections[p];
    if (peers_.onFirstUse[p] == kFirstUseTcp) {
      ++tcpLater;
    } else if (peers_.onFirstUse[p]) {
      ++shmLater;
    } else if (c) {
      const std::string kind = c->kind();
      (kind == "SHM" ? shm : kind == "NET" ? viaNet : tcp)++;
    }
  }
  XCCL_INFO(
      INIT, "comm ", name_.empty() ? "" : name_ + " ", "rank ", rank, "/", nranks, " ready on ",
      peers_.peers[rank].hostname, " device ", device_->busId(),
      engine_ != device_ ? " (operations staged through pinned host memory)" : "", " listening on ",
      peers_.peers[rank].tcpAddr, " in ", ms, " ms; ", shm, " peer(s) via SHM, ", tcp, " via TCP, ",
      viaNet > 0 ? strCat(viaNet, " via a network plugin (XCCL_NET_PLUGIN), ") : "", shmLater,
      " via SHM and ", tcpLater, " via TCP on first use (XCCL_RUNTIME_CONNECT); ",
      topo_.plan.hosts.size(), " host(s), topology ", topo_.source, ", ring",
      [&] {
        std::string s;
        for (int r : topo_.plan.ring()) s += " " + std::to_string(r);
        return s;
      }(),
      getenv("XCCL_ALGO") && *getenv("XCCL_ALGO")
          ? strCat("; XCCL_ALGO=", getenv("XCCL_ALGO"))
          : std::string("; algorithms chosen by size (docs/ALGORITHMS.md)"));
  if (rank == 0 && logEnabled(LogLevel::kInfo, TOPO)) XCCL_INFO(TOPO, "\n", describe());
  worker_ = std::thread([this] { progressLoop(); });
}

Comm::~Comm() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true;
    workCv_.notify_all();
  }
  // Drain what was enqueued, bounded by the timeout; then stop for good.
  if (enqueued_.load() > completed_.load() && wait(enqueued_.load(), timeoutMs_) == xcclTimeout) {
    XCCL_WARN(INIT, "rank ", rank_, ": destroy timed out waiting for pending operations; aborting");
    abort();
  }
  if (worker_.joinable()) worker_.join();  // it resumed every held stream on the way
  if (logEnabled(LogLevel::kInfo, INIT)) {
    const xcclCommStats_t st = stats();
    XCCL_INFO(INIT, "comm ", name_.empty() ? "" : name_ + " ", "rank ", rank_, "/", nranks_,
              " destroyed: of ", st.peers, " peer(s) ", st.shmConnected, " connected via SHM, ",
              st.tcpConnected, " via TCP, ", st.onFirstUse, " never needed; ", st.shmBytes >> 10,
              " KiB of rings; process: ", st.processFds, " fds, ", st.processThreads, " threads");
  }
  heartbeat_.reset();
  closeConnections();
  if (noteThread_.joinable()) noteThread_.join();
}

std::string Comm::describe() const {
  return strCat("topology (", topo_.source, "):\n",
                topo::rankMatrix(topo_.system, topo_.places, topo_.plan));
}

// What a held stream shows for the operation in a device's activity records: names made once
// (every enqueued operation asks, recording or not).
static const char* holdLabel(const OpEntry& op) {
  if (op.oneSided) return "xccl put/signal";
  if (op.colls.empty()) return "xccl send/recv";
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v(2 * (static_cast<size_t>(kLastCollType) + 1));
    for (size_t t = 1; t <= static_cast<size_t>(kLastCollType); ++t) {
      const char* coll = collName(static_cast<CollType>(t));
      v[2 * t] = strCat("xccl ", coll);
      v[2 * t + 1] = strCat("xccl ", coll, " (group)");
    }
    return v;
  }();
  const size_t t = static_cast<size_t>(op.colls.front().type);
  return names[2 * t + (op.colls.size() > 1 ? 1 : 0)].c_str();
}

uint64_t Comm::enqueue(OpEntry op) {
  xcclResult_t err = asyncError_.load();
  if (err != xcclSuccess) throw Error(toKind(err), lastError());
  const xcclStream_t stream = op.stream;
  if (engine_ != device_) stageOperation(*device_, *engine_, rank_, nranks_, op);
  op.streamToken = device_->streamCapture(stream);
  // Work the caller queues on the stream after this operation waits for it: the progress
  // thread resumes the stream when the operation is done (or failed, or dropped).
  try {
    op.holdToken = device_->streamHold(stream, holdLabel(op));
  } catch (...) {
    device_->streamRelease(op.streamToken);
    throw;
  }
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    op.id = id = enqueued_.load() + 1;
    queue_.push_back(std::move(op));
    enqueued_.store(id);
    if (workerSleeping_ && !running_ && queue_.front().id == id) workCv_.notify_one();
  }
  // A point-to-point run asleep on the doorbell takes this op at once if it can.
  if (p2pRun_.load(std::memory_order_acquire) && peers_.bell) peers_.bell->ring();
  return id;
}

xcclResult_t Comm::query(uint64_t id) const {
  if (id >= failedFrom_.load()) return asyncError_.load();
  if (completed_.load(std::memory_order_acquire) >= id) return xcclSuccess;
  return xcclInProgress;
}

int64_t Comm::doneNs(uint64_t id) const {
  const DoneTime& t = doneTimes_[id % kDoneTimes];
  // Sequentially consistent loads and stores (the writer's three, these three): the time read
  // between two reads of the same id is that id's.
  if (t.id.load() != id) return -1;
  const int64_t ns = t.ns.load();
  return t.id.load() == id ? ns : -1;
}

xcclResult_t Comm::wait(uint64_t id, int64_t timeoutMs) {
  if (timeoutMs < 0) timeoutMs = timeoutMs_;
  Backoff backoff(yieldWhenIdle_);
  for (int64_t i = 0; i < waitSpin_; ++i) {
    xcclResult_t r = query(id);
    if (r != xcclInProgress) return r;
    backoff.idle();
  }
  std::unique_lock<std::mutex> lock(mu_);
  bool done = doneCv_.wait_for(lock, std::chrono::milliseconds(timeoutMs),
                               [&] { return query(id) != xcclInProgress; });
  return done ? query(id) : xcclTimeout;
}

void Comm::abort() {
  abort_.store(true);
  if (peers_.bell) peers_.bell->ring();  // an engine asleep on it sees the flag at once
  fail(xcclInvalidUsage, strCat("rank ", rank_, ": communicator aborted"));
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  workCv_.notify_all();
}

bool Comm::deviceSupports(xcclDataType_t dtype) const { return device_->supportsType(dtype); }

const char* Comm::deviceName() const { return device_->name(); }

std::string Comm::lastError() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errorMsg_;
}

void Comm::fail(xcclResult_t code, const std::string& msg) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (asyncError_.load() != xcclSuccess) return;  // first error wins
    errorMsg_ = msg;
    failedFrom_.store(completed_.load() + 1);
    asyncError_.store(code);
    doneCv_.notify_all();
  }
  XCCL_WARN(COLL, msg);
  noteUnconnected(msg);
  // Peers blocked on us see the closure at once instead of waiting for their timeout.
  closeConnections();
  if (exchange_) exchange_->markSlotsFailed(msg);
}

void Comm::progressLoop() {
  setLogRank(rank_);
  const auto spin = std::chrono::microseconds(xcclParamProgressSpinUs());
  // The front op is ours to run: not one its caller runs, and nothing else running.
  auto runnable = [&] { return !queue_.empty() && !queue_.front().onCaller && !running_; };
  for (;;) {
    OpEntry op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!runnable()) {
        if (queue_.empty()) {
          // Spin a little without the lock: the next op of a tight loop arrives soon.
          lock.unlock();
          auto until = Clock::now() + spin;
          Backoff backoff(yieldWhenIdle_);
          while (enqueued_.load() == completed_.load() && Clock::now() < until && !stop_) {
            backoff.idle();
          }
          lock.lock();
        }
        workerSleeping_ = true;
        workCv_.wait(lock, [&] { return runnable() || (stop_ && queue_.empty()); });
        workerSleeping_ = false;
        if (!runnable()) return;  // stop_ and drained
      }
      op = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    execute(op);
  }
}

uint64_t Comm::runOnCaller(OpEntry& op) {
  XCCL_CHECK_ARG(!device_->streamOrdered(), "XCCL_STREAM_CALLER is for host communicators; a ",
                 device_->name(), " communicator orders operations on device streams");
  return runHere(op);
}

uint64_t Comm::runHere(OpEntry& op) {
  op.stream = nullptr;
  op.onCaller = true;
  uint64_t id;
  {
    std::unique_lock<std::mutex> lock(mu_);
    xcclResult_t err = asyncError_.load();
    if (err != xcclSuccess) throw Error(toKind(err), errorMsg_);
    op.id = id = enqueued_.load() + 1;
    enqueued_.store(id);
    if (!queue_.empty() || running_) {
      queue_.push_back(std::move(op));
      // Earlier ops finish (or fail, within their deadline) on the progress thread or their
      // callers; then this one is at the front.
      doneCv_.wait(lock, [&] { return queue_.front().id == id && !running_; });
      op = std::move(queue_.front());
      queue_.pop_front();
    }  // else nothing is ahead of it: it runs at once, never entering the queue
    running_ = true;
  }
  execute(op);
  return id;
}

void Comm::execute(OpEntry& op) {
  if (op.colls.empty() && !op.p2p.empty() && !op.onCaller && !device_->streamOrdered()) {
    executeP2P(op);
    return;
  }
  if (asyncError_.load() == xcclSuccess) guarded([&] { runOp(op); });
  finish(op, /*endsTurn=*/true);  // one lock for both on every op's path
}

void Comm::guarded(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    fail(toResult(e.kind()), e.what());
  } catch (const std::exception& e) {
    fail(xcclInternalError, strCat("rank ", rank_, ": internal error: ", e.what()));
  }
}

void Comm::finish(OpEntry& op, bool endsTurn) {
  device_->streamRelease(op.streamToken);
  uint64_t failedFrom;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DoneTime& t = doneTimes_[op.id % kDoneTimes];
    t.id.store(0);  // a reader between the stores sees "gone" (doneNs)
    t.ns.store(steadyNs());
    t.id.store(op.id);
    completed_.store(op.id, std::memory_order_release);
    if (endsTurn) {
      endTurnLocked();
    } else {
      doneCv_.notify_all();  // its waiters
    }
    failedFrom = failedFrom_.load();
    if (op.holdToken != nullptr && op.id >= failedFrom) error = errorMsg_;
  }
  // After publishing: the stream sees a known outcome. A failed operation's stream must not
  // go on as if its outputs were results (a survivor reading an unreduced buffer).
  if (op.holdToken == nullptr) return;
  if (op.id < failedFrom || config_.streamErrors == xcclStreamErrorsReport) {
    device_->streamResume(op.holdToken);
  } else if (op.id == failedFrom) {
    device_->streamFail(op.holdToken, strCat("xccl operation #", op.id, " failed: ", error));
  } else {
    device_->streamFail(op.holdToken, strCat("xccl operation #", op.id, " not run: operation #",
                                             failedFrom, " had failed: ", error));
  }
}

void Comm::endTurn() {
  std::lock_guard<std::mutex> lock(mu_);
  endTurnLocked();
}

void Comm::endTurnLocked() {
  running_ = false;
  doneCv_.notify_all();  // waiters, and a caller whose op is next
  // The progress thread sleeps while a caller runs an op; wake it only for work of its own.
  if (workerSleeping_ && !queue_.empty() && !queue_.front().onCaller) workCv_.notify_one();
  if (workerSleeping_ && stop_ && queue_.empty()) workCv_.notify_one();
}

// Bytes an operation writes on this rank, to decide on streaming stores.
static size_t outputBytes(const CollArgs& a, int nranks) {
  size_t bytes = a.count * dtypeSize(a.dtype);
  switch (a.type) {
    case CollType::kAllGather:
    case CollType::kAllToAll:
    case CollType::kGather:
      return bytes * nranks;
    default:
      return bytes;
  }
}

void Comm::runOp(OpEntry& op) {
  device_->streamWait(op.streamToken, abort_);
  if (op.oneSided) op.oneSided();
  for (const CollArgs& args : op.colls) {
    ++collSeq_;
    const bool streaming =
        streamingFrom_ >= 0 && outputBytes(args, nranks_) >= static_cast<size_t>(streamingFrom_);
    exchange_->beginOp(signatureOf(args), collSeq_, Deadline::after(timeoutMs_), streaming);
    XCCL_TRACE(COLL, collName(args.type), " #", collSeq_, " count ", args.count, " ",
               xcclTypeName(args.dtype), " ", xcclOpName(args.op), " root ", args.root);
    runCollective(*exchange_, args);
  }
  if (!op.p2p.empty()) {
    exchange_->beginOp(signatureOf(op.p2p.front()), 0, Deadline::after(timeoutMs_));
    postP2POp(op);
    exchange_->wait();
  }
}

}  // namespace xccl
