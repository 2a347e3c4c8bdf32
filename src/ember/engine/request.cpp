#include "ember/engine/request.h"

#include <algorithm>
#include <cmath>

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

TokenLogprob logprob_of(std::span<const float> logits, int32_t token, int32_t top_n) {
  double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float z : logits) sum += std::exp(z - max);
  const double log_z = max + std::log(sum);
  TokenLogprob lp;
  lp.token = token;
  lp.logprob = static_cast<float>(logits[static_cast<size_t>(token)] - log_z);
  if (top_n > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    size_t n = std::min(ids.size(), static_cast<size_t>(top_n));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                      });
    for (size_t i = 0; i < n; ++i)
      lp.top.emplace_back(ids[i], static_cast<float>(logits[ids[i]] - log_z));
  }
  return lp;
}

}  // namespace ember
