// The CUDA device's stream-side tokens (cuda_device.cc, cuda_exec.cc): private to the device.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "cuda_device.h"
#include "exec.h"

namespace xccl {

struct CudaDevice::Hold {
  uint32_t* flag = nullptr;       // mapped pinned host word: 0 held, 1 released, 2 failed
  void* devFlag = nullptr;        // its address on the GPU
  cudaEvent_t passed = nullptr;   // recorded after the hold: complete = the stream is past it
  std::atomic<bool> busy{false};  // between streamHold and streamResume (no lock: see execMu_)
  // The executor (exec.h), when this use of the hold is one.
  bool exec = false;
  cuda::ExecMailbox* mailbox = nullptr;     // mapped pinned host memory
  cuda::ExecMailbox* mailboxDev = nullptr;  // its address on the GPU
  int word = -1;                            // its arrival counter: CudaDevice::execWords_[word]
  uint32_t posted = 0;                      // commands posted in this use
  bool running = false;                     // started, in running_, not yet stopped
  std::thread::id owner;  // the thread that waited for it to start (posts its steps)
};

struct CudaDevice::Capture {
  cudaEvent_t event = nullptr;  // recorded on the caller's stream: the work before the op
  cudaStream_t stream = nullptr;
  Hold* hold = nullptr;  // the hold streamHold queued next on that stream, if any
  // A staged operation's instead of the event: the word the stream sets to 1 once the
  // operation's inputs are in host memory (mapped pinned memory; read with no CUDA call).
  uint32_t* ready = nullptr;
};

struct CudaDevice::Stage {
  char* host = nullptr;  // pinned host memory the operation runs on
  size_t bytes = 0;
  uint32_t* ready = nullptr;   // mapped pinned word: 0 at stageBegin, 1 once inputs are in
  void* readyDev = nullptr;    // its address on the GPU
  cudaEvent_t done = nullptr;  // recorded after the copies back: complete = free to reuse
  bool busy = false;           // between stageBegin and the hold that records `done`
};

}  // namespace xccl
