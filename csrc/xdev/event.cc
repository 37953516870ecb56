// Recording an event: a timing event queues a task that stamps the time; an event without
// timing only notes the stream's last position.
#include "event.h"

namespace xdev {

void Event::record(const std::shared_ptr<Stream>& stream) {
  Mark m;
  m.stream = stream;
  if (timing()) {
    auto when = std::make_shared<Clock::time_point>();
    m.pos = stream->enqueue([when] { *when = Clock::now(); }, /*skippable=*/false);
    m.when = when;
  } else {
    m.pos = stream->tail();
  }
  std::lock_guard<std::mutex> lock(mu_);
  mark_ = std::move(m);
}

Event::Mark Event::mark() {
  std::lock_guard<std::mutex> lock(mu_);
  return mark_;
}

}  // namespace xdev
