// `ember inspect --plan`: the capacity plan (kv/capacity_plan.h) of a checkpoint for a context,
// batch, KV dtype and memory, with the read bandwidth measured on this machine, as text or JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "ember/kv/capacity_plan.h"
#include "ember/model/model_config.h"

namespace ember::cli {

struct PlanOptions {
  bool enabled = false;          // --plan
  std::string kv_dtype = "f16";  // --kv-dtype of the plan
  std::string mem;               // --mem, "" for none
  bool probe = true;             // measure the read bandwidth (--no-probe skips it)
  std::string backend = "cpu";   // --backend: cuda plans against the GPU's memory and bandwidth
  int device = 0;                // --device
  bool bandwidth_given = false;  // --bandwidth: the plan's bandwidth was given, not measured
};

// The plan's input for `config` (ctx and batch as inspect resolved them); throws ember::Error
// naming the option for a bad --kv-dtype or --mem.
CapacityPlanInput plan_input(const ModelConfig& config, int64_t weight_bytes,
                             int64_t decode_weight_bytes, int64_t ctx, int64_t batch,
                             const PlanOptions& o);

void print_plan_text(const CapacityPlanInput& in, const CapacityPlan& p, const PlanOptions& o);
nlohmann::ordered_json plan_json(const CapacityPlanInput& in, const CapacityPlan& p);

}  // namespace ember::cli
