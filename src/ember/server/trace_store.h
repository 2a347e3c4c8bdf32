// The traces of requests that asked for one ("trace": true, servers started with --allow-trace):
// each request's TraceRecorder under an id until GET /trace/{id} renders its page. The last
// kMaxTraces are kept; older ones are dropped (404).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ember/trace/trace_recorder.h"
#include "ember/trace/trace_report.h"

namespace ember::server {

class TraceStore {
 public:
  static constexpr size_t kMaxTraces = 16;

  // What every page says about the model and the machine (the recorder adds the rest).
  explicit TraceStore(TraceContext context) : context_(std::move(context)) {}

  // A recorder for a new request; its id is recorder_id().
  std::pair<std::string, std::shared_ptr<TraceRecorder>> start(const ModelConfig& config,
                                                               int64_t prompt_tokens);
  // The request finished, having given out `generated` tokens, the last `last_token`
  // (TraceRecorder::finish); its page can be rendered from now on. Called once the engine is done
  // with the recorder.
  void finish(const std::string& id, int64_t generated, int32_t last_token);

  enum class Status { Unknown, Running, Ready };
  // The page of trace `id` when Ready (rendered once, then kept).
  Status page(const std::string& id, std::string* html);

 private:
  struct Entry {
    std::string id;
    std::shared_ptr<TraceRecorder> recorder;
    bool finished = false;
    std::string html;
  };
  Entry* find(const std::string& id);

  TraceContext context_;
  std::mutex mutex_;
  std::deque<Entry> entries_;
  int64_t next_ = 1;
};

}  // namespace ember::server
