// Direct.cpp — torch_xccl.direct (docs/PLUGIN.md, "Direct calls"): an allreduce of a cpu
// tensor called straight from Python, run to its end on the calling thread, for callers whose
// reductions are small and blocking (tensor-parallel inference, a scalar per step), the role
// DeepSpeed's inference_all_reduce plays beside torch.distributed. torch's dist.all_reduce
// costs several microseconds before a backend sees the call (its Python checks, the dispatcher,
// the Work and its future); this path is one built-in call (below) into xcclAllReduce on the
// host communicator, XCCL_STREAM_CALLER, as a blocking dist.all_reduce runs there (Launch.cpp,
// runOnCaller), minus the Work. What it gives up for that: the call is not numbered or in the
// flight recorder, TORCH_XCCL_DESYNC_DEBUG and TORCH_XCCL_ENABLE_TIMING do not see it, and it
// cannot join a coalescing block. The operation itself is libxccl's, so it meets every rank's
// call in the same order as the group's other collectives, has the group's timeout, and
// fails as they do (a failed one runs the group's TORCH_XCCL_ASYNC_ERROR_HANDLING).
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/extension.h>

#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

namespace {
constexpr const char* kDirectOp = "direct all_reduce";
}  // namespace

bool ProcessGroupXCCL::directAllreduce(const at::Tensor& t, const c10d::ReduceOp& rop) {
  TORCH_CHECK_VALUE(t.defined(), "torch_xccl.direct.all_reduce: the tensor is undefined");
  TORCH_CHECK_VALUE(t.device().is_cpu(), "torch_xccl.direct.all_reduce: cpu tensors only, got a ",
                    t.device(), " tensor (dist.all_reduce orders device tensors on their streams)");
  TORCH_CHECK_VALUE(!t.is_sparse(),
                    "torch_xccl.direct.all_reduce: sparse tensors are not supported");
  TORCH_CHECK_VALUE(t.is_contiguous(),
                    "torch_xccl.direct.all_reduce: the tensor must be contiguous "
                    "(it is reduced in place; call .contiguous() first and use that tensor)");
  TORCH_CHECK(coalescingBlocksOnThisThread() == 0 && !coalescing_,
              "torch_xccl.direct.all_reduce: called inside a coalescing block (it would be "
              "recorded, not run); call it outside the block");
  // A complex tensor is reduced as its real and imaginary parts, as dist.all_reduce does,
  // for the ops that work on them element by element.
  at::ScalarType st = t.scalar_type();
  size_t count = static_cast<size_t>(t.numel());
  if (at::isComplexType(st)) {
    TORCH_CHECK_VALUE(rop.op_ == c10d::ReduceOp::SUM || rop.op_ == c10d::ReduceOp::AVG,
                      "torch_xccl.direct.all_reduce: complex tensors take SUM and AVG only");
    st = c10::toRealValueType(st);
    count *= 2;
  }
  xcclDataType_t dt{};
  xcclRedOp_t xop{};
  try {
    dt = toXcclType(kDirectOp, st);
    xop = toXcclOp(kDirectOp, rop, st);
  } catch (const c10::Error& e) {  // bad input: a ValueError, as the checks above
    TORCH_CHECK_VALUE(false, e.msg());
  }
  TORCH_CHECK_VALUE(xop != xcclPremulSum,
                    "torch_xccl.direct.all_reduce: PREMUL_SUM is not offered here; multiply "
                    "first, or use dist.all_reduce");
  if (nanCheck_) {
    Op op{.name = kDirectOp, .type = c10d::OpType::ALLREDUCE, .inputs = t};
    checkNan(op);
  }
  xcclResult_t r = xcclSuccess;
  std::string detail;
  bool open = false;
  {
    // In one order with every other thread's operations on the group, as launch() does.
    std::lock_guard<std::mutex> g(state_->enqueueMu);
    open = state_->use([&](xcclComm_t c) {
      void* p = t.data_ptr();
      r = xcclAllReduce(p, p, count, dt, xop, c, XCCL_STREAM_CALLER);
      if (r != xcclSuccess) detail = callError(c);
    });
  }
  if (!open) return false;
  if (r == xcclSuccess) return true;
  const std::string what = std::string("xccl ") + kDirectOp + " (rank " +
                           std::to_string(getRank()) + ", group '" + state_->name +
                           "'): " + libError(r, detail.c_str());
  if (r == xcclInvalidArgument || r == xcclInvalidUsage) TORCH_CHECK_VALUE(false, what);
  // It ran and failed: the group's error handling, as for a failed Work, then the caller's
  // exception.
  auto err = distError(what);
  handleAsyncError(err);
  std::rethrow_exception(err);
}

std::string ProcessGroupXCCL::closedReason() { return state_->reason(); }

namespace {
// One group's direct calls. It holds the backend weakly: a destroyed group is freed as
// usual, and its handle then answers false (as for a closed communicator), which tells the
// Python side to look the group up again.
struct DirectGroup {
  c10::weak_intrusive_ptr<ProcessGroupXCCL> pg;
};

constexpr const char* kCapsule = "torch_xccl.DirectGroup";

DirectGroup* groupOf(PyObject* capsule) {
  return static_cast<DirectGroup*>(PyCapsule_GetPointer(capsule, kCapsule));
}

// A group's handle is a built-in function whose self is a capsule owning its DirectGroup,
// called handle(tensor) for SUM or handle(tensor, op); it returns whether the allreduce ran.
// Raw METH_FASTCALL, not pybind11: pybind11's dispatcher (argument loaders, the type lookup
// of a bound class, its GIL guards) was about a third of the instructions of an 8-byte call
// (callgrind; docs/PLUGIN.md). torch's error macros map the errors as pybind11 does for the
// rest of the module (ValueError, DistBackendError, RuntimeError).
PyObject* directAllReduceCall(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs < 1 || nargs > 2 || !THPVariable_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError,
                    "torch_xccl.direct.all_reduce: expected (tensor) or (tensor, ReduceOp)");
    return nullptr;
  }
  DirectGroup* g = groupOf(self);
  if (g == nullptr) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(args[0]);
  static const c10d::ReduceOp kSum(c10d::ReduceOp::SUM);
  c10d::ReduceOp op = kSum;
  if (nargs == 2) {
    // dist.ReduceOp.MAX and the like are RedOpType values; a ReduceOp object is taken too.
    try {
      py::handle h(args[1]);
      if (py::isinstance<c10d::ReduceOp::RedOpType>(h)) {
        op = c10d::ReduceOp(h.cast<c10d::ReduceOp::RedOpType>());
      } else {
        op = h.cast<c10d::ReduceOp>();
      }
    } catch (const py::cast_error&) {
      PyErr_SetString(PyExc_TypeError,
                      "torch_xccl.direct.all_reduce: op must be a torch.distributed.ReduceOp");
      return nullptr;
    }
  }
  bool ran = false;
  {
    // The GIL is released for the call (a late peer must not stop this process's other
    // Python threads), as pybind11's guard would, without its bookkeeping.
    PyThreadState* ts = PyEval_SaveThread();
    try {
      c10::intrusive_ptr<ProcessGroupXCCL> p = g->pg.lock();
      ran = p && p->directAllreduce(t, op);
    } catch (...) {
      PyEval_RestoreThread(ts);
      throw;
    }
    PyEval_RestoreThread(ts);
  }
  if (ran) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef kDirectAllReduce = {
    "all_reduce", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&directAllReduceCall)),
    METH_FASTCALL, "handle(tensor[, op]) -> bool: the allreduce ran (torch_xccl.direct)"};
}  // namespace

void bindDirect(py::module& m) {
  m.def(
      "_direct_group",
      [](const c10::intrusive_ptr<c10d::Backend>& b) {
        auto p = c10::dynamic_intrusive_pointer_cast<ProcessGroupXCCL>(b);
        TORCH_CHECK_VALUE(p, "torch_xccl.direct: the group's cpu backend is ",
                          b ? b->getBackendName() : std::string("none"), ", not xccl");
        auto* g = new DirectGroup{c10::weak_intrusive_ptr<ProcessGroupXCCL>(p)};
        PyObject* cap = PyCapsule_New(g, kCapsule, [](PyObject* c) { delete groupOf(c); });
        if (cap == nullptr) {
          delete g;
          throw py::error_already_set();
        }
        PyObject* fn = PyCFunction_New(&kDirectAllReduce, cap);
        Py_DECREF(cap);  // the function holds it
        if (fn == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(fn);
      },
      py::arg("backend"), "A group's direct-call handle (torch_xccl.direct)");
  m.def(
      "_direct_closed_reason",
      [](const py::object& handle) {
        PyObject* self =
            PyCFunction_Check(handle.ptr()) ? PyCFunction_GET_SELF(handle.ptr()) : nullptr;
        DirectGroup* g =
            self != nullptr && PyCapsule_IsValid(self, kCapsule) ? groupOf(self) : nullptr;
        TORCH_CHECK_VALUE(g != nullptr, "torch_xccl.direct: not a direct-call handle");
        c10::intrusive_ptr<ProcessGroupXCCL> p = g->pg.lock();
        return p ? p->closedReason() : std::string("the group was destroyed");
      },
      py::arg("handle"));
}

}  // namespace torch_xccl
