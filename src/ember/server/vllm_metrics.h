// /metrics under the names vLLM exports, beside ember's own, so that dashboards built for vLLM
// (Grafana's vLLM board, autoscalers reading vllm:num_requests_waiting) work unchanged. Each
// carries vLLM's model_name label.
#pragma once

#include <string>

#include "ember/engine/metrics.h"

namespace ember::server {

std::string render_vllm_metrics(const ServingMetrics& m, const std::string& model_name);

}  // namespace ember::server
