// The trace as one self-contained HTML page: web/trace.html (compiled in) with the trace's JSON
// inlined, its scripts and styles inline, so it opens from disk with no network.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ember {

// The JSON as written to --json: token texts that are not valid UTF-8 (a piece holding part of a
// character) get U+FFFD for their bad bytes.
std::string dump_trace_json(const nlohmann::ordered_json& data);

std::string trace_page_html(const nlohmann::ordered_json& data);

}  // namespace ember
