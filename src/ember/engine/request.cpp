#include "ember/engine/request.h"

namespace ember {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::None:
      return "none";
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Cancelled:
      return "cancelled";
    case FinishReason::Error:
      return "error";
  }
  return "none";
}

void RequestStream::push(StreamEvent event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

std::optional<StreamEvent> RequestStream::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  StreamEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

}  // namespace ember
