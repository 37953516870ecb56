// PointToPoint.cpp — the c10d point-to-point ops: send, recv and recvAnysource (the
// receive that reports its source through the Work).
#include "ProcessGroupXCCL.hpp"
#include "Utils.hpp"

namespace torch_xccl {

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                      int tag) {
  const char* op = "send";
  const at::Tensor& t = single(op, tensors);
  checkRank(op, dstRank, getSize(), "destination rank");
  TORCH_CHECK(dstRank != getRank(), "xccl ", op, ": cannot send to self (rank ", dstRank, ")");
  at::Tensor buf = contig(t);
  auto dt = toXcclType(op, t.scalar_type());
  // Tags are not part of libxccl's matching: messages between two ranks match in order.
  return launch({.name = op,
                 .type = c10d::OpType::SEND,
                 .inputs = t,
                 .timeout = kNoTimeout,
                 .outputs = {t},
                 .keepAlive = {buf},
                 .enqueue = [&](const Target& tg) {
                   return xcclSend(buf.data_ptr(), buf.numel(), dt, dstRank, tg.comm, tg.stream);
                 }});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                      int tag) {
  const char* op = "recv";
  const at::Tensor& t = single(op, tensors);
  checkRank(op, srcRank, getSize(), "source rank");
  TORCH_CHECK(srcRank != getRank(), "xccl ", op, ": cannot receive from self (rank ", srcRank, ")");
  at::Tensor buf = contig(t);
  CopyBack cb;
  cb.add(t, buf);
  auto dt = toXcclType(op, t.scalar_type());
  return launch({.name = op,
                 .type = c10d::OpType::RECV,
                 .inputs = {},
                 .timeout = kNoTimeout,
                 .outputs = {t},
                 .keepAlive = {buf},
                 .post = cb.fn(),
                 .enqueue = [&](const Target& tg) {
                   return xcclRecv(buf.data_ptr(), buf.numel(), dt, srcRank, tg.comm, tg.stream);
                 }});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupXCCL::recvAnysource(std::vector<at::Tensor>& tensors,
                                                               int tag) {
  const char* op = "recvAnysource";
  const at::Tensor& t = single(op, tensors);
  at::Tensor buf = contig(t);
  CopyBack cb;
  cb.add(t, buf);
  auto dt = toXcclType(op, t.scalar_type());
  int* peer = nullptr;
  LaunchExtra extra;
  extra.peerSlot = &peer;
  return launch({.name = op,
                 .type = c10d::OpType::RECVANYSOURCE,
                 .inputs = {},
                 .timeout = kNoTimeout,
                 .outputs = {t},
                 .keepAlive = {buf},
                 .post = cb.fn(),
                 .enqueue =
                     [&](const Target& tg) {
                       return xcclRecvAny(buf.data_ptr(), buf.numel(), dt, peer, tg.comm,
                                          tg.stream);
                     },
                 .extra = extra});
}

}  // namespace torch_xccl
