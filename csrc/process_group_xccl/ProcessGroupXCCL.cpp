// ProcessGroupXCCL.cpp — the backend itself: construction (communicator rendezvous through
// the c10d Store), teardown (shutdown, abort, the completion threads at exit), introspection
// and the factory. Launching an operation is in Launch.cpp, the completion thread in
// Completion.cpp, the collectives by kind in Reductions, GatherScatter, AllToAll,
// PointToPoint and Barriers (.cpp), the Python module in Bindings.cpp.
#include "ProcessGroupXCCL.hpp"

#include <sstream>

#include "FlightDump.hpp"
#include "Rendezvous.hpp"
#include "Utils.hpp"

namespace torch_xccl {

// ---------------------------------------------------------------- ProcessGroupXCCL

ProcessGroupXCCL::ProcessGroupXCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   c10::intrusive_ptr<Options> options)
    : ProcessGroupXCCL(store, rank, size, std::move(options), Adopted{}) {}

// Adopted{} (no host communicator): a new group, whose communicator is made over the store.
ProcessGroupXCCL::ProcessGroupXCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   c10::intrusive_ptr<Options> options, Adopted adopted)
    : c10d::Backend(rank, size),
      store_(store),
      options_(std::move(options)),
      state_(std::make_shared<CommState>()),
      blockingWait_(blockingWaitFromEnv()),
      errorMode_(errorModeFromEnv()),
      runOnCaller_(envKnob("TORCH_XCCL_RUN_ON_CALLER", 1, 0, 1) != 0),
      timing_(envKnob("TORCH_XCCL_ENABLE_TIMING", 0, 0, 1) != 0),
      nanCheck_(envKnob("TORCH_XCCL_NAN_CHECK", 0, 0, 1) != 0) {
  TORCH_CHECK(store_, "xccl init: no store");
  TORCH_CHECK(size > 0 && rank >= 0 && rank < size, "xccl init: invalid rank ", rank,
              " for group size ", size);
  state_->rank = rank;
  state_->size = size;
  state_->name = options_->group_name.empty() ? std::string("default") : options_->group_name;
  if (adopted.host == nullptr) {
    finishConstruction(initHostComm());
    return;
  }
  if (adopted.device != nullptr) {
    auto dc = std::make_shared<DeviceComm>();
    dc->state = std::make_shared<CommState>();
    dc->state->rank = rank;
    dc->state->size = size;
    dc->state->name = state_->name + "/" + adopted.deviceOf.str();
    dc->state->comm = adopted.device;
    dc->device = adopted.deviceOf;
    dc->stream = poolStream(adopted.deviceOf);
    dc->ready = std::make_unique<DeviceEvent>(adopted.deviceOf);
    devComm_ = dc;
  }
  finishConstruction(adopted.host);
  if (devComm_) devComm_->state->desync = state_->desync;
}

// The host communicator of a new group, through the store.
xcclComm_t ProcessGroupXCCL::initHostComm() {
  const int rank = getRank(), size = getSize();
  // The store callbacks' context lives with the communicator's state: a non-blocking creation
  // uses it after this returns, until the communicator is freed.
  auto ctx = std::make_shared<StoreCtx>();
  ctx->store = store_;
  state_->createCtx = ctx;
  // torch's prefix for this group repeats across initialisations (destroy_process_group +
  // init_process_group, torchrun restarts): everything below writes under a scope of this
  // initialisation instead (Rendezvous.hpp).
  store_ = scopeToInitialisation(store_, size, ctx->callTimeoutMs, &storeScope_);
  ctx->store = store_;
  xcclStore_t s{ctx.get(), &storeSet, &storeGet};
  // TORCH_XCCL_USE_COMM_NONBLOCKING=1 (TORCH_NCCL_USE_COMM_NONBLOCKING's role): construction
  // returns while libxccl connects the ranks in the background; the group's first operation
  // waits for it (CommState::awaitCreation), so model set-up overlaps the connecting.
  const bool nonBlocking = envKnob("TORCH_XCCL_USE_COMM_NONBLOCKING", 0, 0, 1) != 0;
  xcclConfig_t cfg = XCCL_CONFIG_INITIALIZER;
  cfg.blocking = nonBlocking ? 0 : 1;
  cfg.timeout_ms = options_->timeout.count() > 0 ? options_->timeout.count() : 0;
  cfg.device = -1;
  cfg.deviceType = xcclDeviceHost;  // cpu tensors, whatever XCCL_DEVICE says
  cfg.name = state_->name.c_str();
  xcclComm_t comm = nullptr;
  // store_ is this group's and this initialisation's (above), so one fixed prefix suffices.
  xcclResult_t r = xcclCommInitRankStore(&comm, size, rank, &s, "xccl/", &cfg);
  if (r == xcclInProgress) {
    state_->creating.store(true, std::memory_order_release);
    return comm;
  }
  if (r != xcclSuccess) {
    throwDist("xccl init: rank " + std::to_string(rank) + " of " + std::to_string(size) +
              " (group '" + state_->name + "'): " + libError(r, xcclGetLastError(nullptr)));
  }
  return comm;
}

void ProcessGroupXCCL::finishConstruction(xcclComm_t host) {
  state_->comm = host;
  state_->desync = DesyncDebugger::fromEnv(store_, getRank(), getSize());
  flightGroup_ =
      flight::addGroup(state_->name, getRank(), getSize(), options_->global_ranks_in_group, store_);
  host_ = std::make_shared<DeviceComm>();
  host_->state = state_;
  completion_ = std::thread([this] { completionLoop(); });
  std::lock_guard<std::mutex> g(liveMu());
  liveBackends().insert(this);
}

std::mutex& ProcessGroupXCCL::liveMu() {
  static std::mutex mu;
  return mu;
}

std::set<ProcessGroupXCCL*>& ProcessGroupXCCL::liveBackends() {
  static auto* live = new std::set<ProcessGroupXCCL*>();  // outlives every backend
  return *live;
}

// Why the completion threads must end before Python finalizes: they release the Works they
// complete, and a Work's tensors may own their Python objects (torch keeps a tensor's
// PyObject alive with the TensorImpl), so the last release takes the GIL. Once Python is
// finalizing, a thread that asks for the GIL is ended with pthread_exit, whose unwinding
// through a destructor (noexcept) calls std::terminate: "terminate called without an active
// exception", SIGABRT at the very end of a program that did not destroy its process groups
// (the transformers Trainer, accelerate, DeepSpeed and most scripts do not). torch_xccl
// registers this with atexit, which runs while Python still runs; the caller releases the
// GIL, so a completion thread finishing a release meanwhile gets it. Works still queued are
// not waited for: they are released with their backend, on the thread that destroys it.
void ProcessGroupXCCL::stopCompletionThreadsBeforeExit() {
  // Held throughout, so no backend is destroyed (its destructor takes it first) while its
  // thread is joined here; the completion threads never take it.
  std::lock_guard<std::mutex> g(liveMu());
  for (auto* pg : liveBackends()) {
    std::lock_guard<std::mutex> q(pg->cq_->mu);
    pg->cq_->exiting = true;
  }
  for (auto* pg : liveBackends()) {
    pg->cq_->cv.notify_all();
    std::lock_guard<std::mutex> j(pg->completionJoinMu_);
    if (pg->completion_.joinable()) pg->completion_.join();
  }
}

void ProcessGroupXCCL::stopCompletionThread() {
  {
    std::lock_guard<std::mutex> g(cq_->mu);
    cq_->stop = true;
  }
  cq_->cv.notify_all();
  std::lock_guard<std::mutex> g(completionJoinMu_);
  if (completion_.joinable()) completion_.join();
}

ProcessGroupXCCL::~ProcessGroupXCCL() {
  {
    std::lock_guard<std::mutex> g(liveMu());
    liveBackends().erase(this);
  }
  stopCompletionThread();
  for (auto& c : allComms()) c->close("process group destroyed", /*destroy=*/true);
  // A block left open (an operation in it raised before launch): discard this thread's
  // libxccl group too (on another thread there is none: xcclGroupDiscard refuses, harmless).
  if (coalescing_) {
    coalescing_ = false;
    noteCoalescingBlock(false);
    xcclGroupDiscard();
  }
}

void ProcessGroupXCCL::shutdown() {
  // Drain: the completion thread finishes what was enqueued (bounded by the op timeouts),
  // then the communicators are destroyed.
  stopCompletionThread();
  for (auto& c : allComms()) c->close("process group was shut down", /*destroy=*/true);
}

void ProcessGroupXCCL::abort() {
  flight::aborted(state_->name);
  abortComm("process group was aborted");
}

// One failure fails the group: every communicator of it is aborted, so peers blocked on any
// of them fail at once too.
void ProcessGroupXCCL::abortComm(const std::string& reason) {
  for (auto& c : allComms()) c->close(reason, false);
}

std::chrono::milliseconds ProcessGroupXCCL::opTimeout(std::chrono::milliseconds requested) const {
  if (requested.count() > 0) return requested;
  return options_->timeout.count() > 0 ? options_->timeout : kBackendDefaultTimeout;
}

std::string ProcessGroupXCCL::describe() const {
  std::ostringstream os;
  os << "ProcessGroupXCCL(rank=" << getRank() << ", size=" << getSize() << ", group='"
     << state_->name << "', timeout_ms=" << options_->timeout.count()
     << ", blocking_wait=" << blockingWait_
     << ", async_error_handling=" << static_cast<int>(errorMode_) << ", store_scope='"
     << storeScope_ << "', stream_errors=" << (options_->reportStreamErrors ? "report" : "fail")
     << ")";
  return os.str();
}

c10::intrusive_ptr<ProcessGroupXCCL> createProcessGroupXCCL(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& groupName,
    const std::vector<uint64_t>& globalRanks, bool reportStreamErrors) {
  auto opts = c10::make_intrusive<ProcessGroupXCCL::Options>(timeout);
  opts->group_name = groupName;
  opts->global_ranks_in_group = globalRanks;
  opts->reportStreamErrors = reportStreamErrors;
  return c10::make_intrusive<ProcessGroupXCCL>(store, rank, size, opts);
}

}  // namespace torch_xccl
