#include "ember/server/trace_store.h"

#include "ember/trace/trace_page.h"

namespace ember::server {

std::pair<std::string, std::shared_ptr<TraceRecorder>> TraceStore::start(const ModelConfig& config,
                                                                         int64_t prompt_tokens) {
  auto recorder = std::make_shared<TraceRecorder>(config, TraceOptions{});
  recorder->set_prompt_tokens(prompt_tokens);
  std::lock_guard<std::mutex> lock(mutex_);
  Entry entry;
  entry.id = "trace-" + std::to_string(next_++);
  entry.recorder = recorder;
  entries_.push_back(std::move(entry));
  if (entries_.size() > kMaxTraces) entries_.pop_front();
  return {entries_.back().id, recorder};
}

TraceStore::Entry* TraceStore::find(const std::string& id) {
  for (Entry& e : entries_) {
    if (e.id == id) return &e;
  }
  return nullptr;
}

void TraceStore::finish(const std::string& id, int64_t generated, int32_t last_token) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry* e = find(id);
  if (e == nullptr || e->finished) return;
  e->recorder->finish(generated, last_token);
  e->finished = true;
}

TraceStore::Status TraceStore::page(const std::string& id, std::string* html) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry* e = find(id);
  if (e == nullptr) return Status::Unknown;
  if (!e->finished) return Status::Running;
  if (e->html.empty()) e->html = trace_page_html(trace_json(*e->recorder, context_));
  *html = e->html;
  return Status::Ready;
}

}  // namespace ember::server
