#include "wait_notice.h"

#include "error.h"
#include "log.h"
#include "param.h"

namespace xccl {

XCCL_PARAM(WaitNoticeS, "WAIT_NOTICE_S", 10, 0, 86400)

WaitNotice::WaitNotice(std::string what, unsigned subsys)
    : what_(std::move(what)),
      subsys_(subsys),
      intervalMs_(xcclParamWaitNoticeS() * 1000),
      start_(Clock::now()),
      next_(start_ + std::chrono::milliseconds(intervalMs_)) {}

void WaitNotice::tick() {
  if (intervalMs_ <= 0) return;
  auto now = Clock::now();
  if (now < next_) return;
  next_ = now + std::chrono::milliseconds(intervalMs_);
  ++notices_;
  auto s = std::chrono::duration_cast<std::chrono::seconds>(now - start_).count();
  if (logEnabled(LogLevel::kWarn, subsys_)) {
    logWrite(LogLevel::kWarn, subsys_, strCat("still waiting after ", s, " s for ", what_));
  }
}

}  // namespace xccl
