#include "ember/trace/trace_page.h"

#include "ember/core/error.h"

namespace ember {

extern const char* const kTracePageTemplate;  // web/trace.html, embedded by cmake

std::string dump_trace_json(const nlohmann::ordered_json& data) {
  return data.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string trace_page_html(const nlohmann::ordered_json& data) {
  // '<' only occurs inside JSON strings, where \u003c means the same: no "</script>" can end the
  // data block early.
  std::string json;
  for (char c : dump_trace_json(data)) {
    if (c == '<') {
      json += "\\u003c";
    } else {
      json += c;
    }
  }
  std::string page = kTracePageTemplate;
  const std::string marker = "/*EMBER_TRACE_DATA*/";
  const size_t at = page.find(marker);
  if (at == std::string::npos) throw Error("the trace page template has no data marker");
  page.replace(at, marker.size(), json);
  return page;
}

}  // namespace ember
