#include "ember/kv/capacity_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include "ember/backend/kv_channel_blocks.h"
#include "ember/backend/kv_row_format.h"
#include "ember/core/error.h"

namespace ember {

double kv_bytes_per_element(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4.0;
    case DType::F16:
    case DType::BF16:
      return 2.0;
    case DType::Q8_0:
      return 34.0 / 32.0;  // 32 int8 + an f16 scale per block of 32 along head_dim
    case DType::Q4_0:
      return 18.0 / 32.0;  // 16 bytes of nibbles + an f16 scale
    default:
      throw Error(ErrorKind::InvalidArgument, std::string("KV cache dtype ") + dtype_name(dtype) +
                                                  " is not one of f32, f16, bf16, q8_0, q4_0");
  }
}

CapacityPlanInput capacity_input(const ModelConfig& c, int64_t ctx, int64_t batch, DType kv_dtype) {
  CapacityPlanInput in;
  in.n_layers = c.n_layers;
  in.n_heads = c.n_heads;
  in.n_kv_heads = c.n_kv_heads;
  in.head_dim = c.head_dim;
  in.ctx = ctx;
  in.batch = batch;
  in.kv_dtype = kv_dtype;
  if (kv_dtype == DType::Q4_0) in.block_size = kChannelKBlockTokens;  // the commands' default
  if (c.sliding_window > 0 && c.sliding_window_pattern <= 1) in.sliding_window = c.sliding_window;
  if (c.sliding_window > 0 && c.sliding_window_pattern > 1) {
    for (int64_t l = 0; l < c.n_layers; ++l) in.window_layers += c.layer_window(l) > 0 ? 1 : 0;
    in.layer_window = c.sliding_window;
  }
  return in;
}

CapacityPlan plan_capacity(const CapacityPlanInput& in) {
  CapacityPlan p;
  const DType v_dtype = in.kv_dtype_v.value_or(in.kv_dtype);
  kv_bytes_per_element(in.kv_dtype);  // names a dtype the cache cannot hold
  kv_bytes_per_element(v_dtype);
  // K and V rows of one head: head_dim values each, scales included.
  const bool k_channel =
      in.k_channel_scales && kv_channel_problem(in.kv_dtype, in.head_dim, in.block_size).empty();
  const double k_bytes_per_value =
      k_channel ? static_cast<double>(kv_channel_row_bytes(in.head_dim, in.block_size)) /
                      static_cast<double>(in.head_dim)
                : kv_bytes_per_value(in.kv_dtype, in.head_dim);
  const double head_bytes = static_cast<double>(in.head_dim) *
                            (k_bytes_per_value + kv_bytes_per_value(v_dtype, in.head_dim));
  p.kv_bytes_per_token = static_cast<double>(in.n_layers * in.n_kv_heads) * head_bytes;
  p.kv_bytes_per_token_mha = static_cast<double>(in.n_layers * in.n_heads) * head_bytes;
  p.resident_tokens = in.sliding_window > 0 ? std::min(in.ctx, in.sliding_window) : in.ctx;
  // Positions held per sequence, summed over layers, as a share of every layer holding them all.
  double held = 1.0;
  if (in.window_layers > 0 && in.n_layers > 0) {
    const auto window = static_cast<double>(std::min(in.ctx, in.layer_window));
    const auto ctx = static_cast<double>(std::max<int64_t>(1, p.resident_tokens));
    held = (static_cast<double>(in.n_layers - in.window_layers) +
            static_cast<double>(in.window_layers) * window / ctx) /
           static_cast<double>(in.n_layers);
  }
  const double resident = static_cast<double>(p.resident_tokens) * held;
  p.kv_bytes_per_sequence = p.kv_bytes_per_token * resident;
  p.kv_bytes_total = p.kv_bytes_per_sequence * static_cast<double>(in.batch);
  p.kv_bytes_total_mha = p.kv_bytes_per_token_mha * resident * static_cast<double>(in.batch);
  if (in.memory_bytes) {
    const double free_for_kv = static_cast<double>(*in.memory_bytes - in.weight_bytes);
    p.sequences_that_fit =
        free_for_kv <= 0 || p.kv_bytes_per_sequence <= 0
            ? 0
            : static_cast<int64_t>(std::floor(free_for_kv / p.kv_bytes_per_sequence));
  }
  if (in.bandwidth_bytes_per_s && *in.bandwidth_bytes_per_s > 0) {
    // A decode step streams the weights once for the whole batch and each sequence's cache (at
    // full context: the ceiling at the end of the sequences).
    const double bw = *in.bandwidth_bytes_per_s;
    const double weights = static_cast<double>(in.decode_weight_bytes);
    p.decode_tokens_per_s_batch1 = bw / (weights + p.kv_bytes_per_sequence);
    p.decode_tokens_per_s_batch = static_cast<double>(in.batch) * bw / (weights + p.kv_bytes_total);
  }
  return p;
}

int64_t parse_byte_size(std::string_view text) {
  auto fail = [&]() -> int64_t {
    throw Error(ErrorKind::InvalidArgument,
                "invalid size '" + std::string(text) +
                    "' (expected a number of bytes, or with a unit: 512MiB, 24GiB, 1.5GB, 2TB)");
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == 0) return fail();
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(std::string(text.substr(0, i)), &used);
    if (used != i) return fail();
  } catch (const std::exception&) {
    return fail();
  }
  std::string unit(text.substr(i));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  if (unit == "k" || unit == "kb") scale = 1e3;
  if (unit == "m" || unit == "mb") scale = 1e6;
  if (unit == "g" || unit == "gb") scale = 1e9;
  if (unit == "t" || unit == "tb") scale = 1e12;
  if (unit == "kib") scale = 1024.0;
  if (unit == "mib") scale = 1024.0 * 1024;
  if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  if (scale == 0 || !(value * scale < 9e18)) return fail();
  return static_cast<int64_t>(std::llround(value * scale));
}

std::string format_bytes(double bytes) {
  char buf[64];
  const double gib = 1024.0 * 1024 * 1024;
  if (bytes >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.1f GB (%.1f GiB)", bytes / 1e9, bytes / gib);
  } else if (bytes >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.1f MB (%.1f MiB)", bytes / 1e6, bytes / (1024.0 * 1024));
  } else {
    std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  }
  return buf;
}

}  // namespace ember
