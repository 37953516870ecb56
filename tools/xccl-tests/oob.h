// Out-of-band channel of xccl-tests: a TCP star through one small server.
//
// Every rank (thread or process, on any host) connects to the server and says hello with
// its rank; afterwards the only operation is allgather: each rank sends one message, the
// server waits for all of them and returns the concatenation to everyone. On top of that
// the tool exchanges the xcclUniqueId (rank 0's message), the per-rank header lines, and
// each test's times and error counts. The channel is independent of libxccl on purpose:
// a broken collective cannot corrupt the tally that reports it.
//
// Failure: a rank leaves cleanly with a goodbye frame; when any rank disconnects without
// one (crash, exception), the server closes every connection at once, so the other ranks
// fail fast instead of hanging. With tolerateLoss (--kill) it drops that rank instead: the
// round completes with the others, and every later answer marks the rank gone (the same
// view on every survivor: what they shrink by).
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace xt {

// A listening TCP socket on bindAddr:port (port 0 = any free port; "" = all interfaces).
// Returns the fd, or -1 with *err set. *boundPort receives the actual port.
int oobListen(const std::string& bindAddr, int port, int* boundPort, std::string* err);

class OobServer {
 public:
  // Takes ownership of listenFd; serves `world` clients until they all disconnect.
  OobServer(int listenFd, int world, int acceptTimeoutSec, bool tolerateLoss = false);
  ~OobServer();
  void start();
  void join();
  bool failed() const { return failed_; }

 private:
  void run();
  int listenFd_;
  int world_;
  int acceptTimeoutSec_;
  bool tolerateLoss_;
  bool failed_ = false;
  std::thread thread_;
};

class OobClient {
 public:
  OobClient() = default;
  ~OobClient();
  OobClient(const OobClient&) = delete;
  OobClient& operator=(const OobClient&) = delete;
  // Retries until the server accepts or timeoutSec passes; throws std::runtime_error.
  void connect(const std::string& host, int port, int rank, int world, int timeoutSec);
  // Throws std::runtime_error when the channel is closed (another rank failed). A rank the
  // server dropped (tolerateLoss) gives "" and is false in alive() from then on.
  std::vector<std::string> allgather(const std::string& mine);
  const std::vector<bool>& alive() const { return alive_; }
  // clean = this rank finished normally; otherwise the server treats the closure as a
  // failure and disconnects every other rank.
  void close(bool clean);

 private:
  int fd_ = -1;
  int world_ = 0;
  std::vector<bool> alive_;
};

}  // namespace xt
