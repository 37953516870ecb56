// Helpers for the xdev runtime tests: result checks that print the runtime's message, a gate
// that holds a stream's worker until the test opens it, and lambdas as host functions.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include "xdev_runtime.h"

#define XDEV_ASSERT_OK(expr) ASSERT_EQ(xdevSuccess, (expr)) << xdevGetLastErrorMessage()
#define XDEV_EXPECT_OK(expr) EXPECT_EQ(xdevSuccess, (expr)) << xdevGetLastErrorMessage()

namespace xdev_test {

// The tests run with 4 devices of 64 MiB each (set before the runtime's first call).
constexpr int kDevices = 4;
constexpr size_t kCapacity = size_t{64} << 20;

// Queues fn on stream as a host function.
inline xdevError_t launch(xdevStream_t stream, std::function<void()> fn) {
  auto* heap = new std::function<void()>(std::move(fn));
  xdevError_t rc = xdevLaunchHostFunc(
      stream,
      [](void* p) {
        std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(p));
        (*f)();
      },
      heap);
  if (rc != xdevSuccess) delete heap;
  return rc;
}

// Blocks the streams it is queued on until open(). The destructor opens it, so a failing test
// does not leave a worker blocked (the state outlives the Gate while a worker waits).
class Gate {
 public:
  Gate() : state_(std::make_shared<State>()) {}
  ~Gate() { open(); }
  void open() {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->open = true;
    state_->cv.notify_all();
  }
  xdevError_t blockStream(xdevStream_t stream) {
    return launch(stream, [s = state_] {
      std::unique_lock<std::mutex> lock(s->mu);
      s->cv.wait(lock, [&] { return s->open; });
    });
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
  };
  std::shared_ptr<State> state_;
};

}  // namespace xdev_test
