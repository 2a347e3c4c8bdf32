// `ember inspect --plan --tp N --pp M [--link BW,LAT] [--bandwidth BW]`: the capacity plan of the
// model split over N x M processes (parallel/parallel_plan.h), as text or JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ember/parallel/parallel_plan.h"

namespace ember::cli {

struct ParallelOptions {
  int tp = 1, pp = 1;
  std::string link = "25GB/s,5us";  // --link
  std::string bandwidth;            // --bandwidth: each rank's memory bandwidth ("" = measured)
  bool wanted() const { return tp > 1 || pp > 1; }
};

void print_parallel_plan_text(const ParallelPlanInput& in, const ParallelPlan& p);
nlohmann::ordered_json parallel_plan_json(const ParallelPlanInput& in, const ParallelPlan& p);

}  // namespace ember::cli
