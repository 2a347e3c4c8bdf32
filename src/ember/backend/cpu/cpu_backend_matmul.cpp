// CpuBackend::matmul: several matrices sharing one input (Q/K/V, gate/up) in one parallel region,
// so they share a single wake-up and their rows balance across threads together. Decode splits the
// concatenated output rows over the threads; prefill gives each thread whole 16-token groups when
// the matrices are small, and output rows again when they are large.
#include <algorithm>
#include <chrono>
#include <string>

#include "ember/backend/cpu/cpu_backend.h"
#include "ember/core/error.h"

namespace ember::cpu {

namespace {
// From this many tokens matmuls split over tokens (16-token groups) instead of output rows, while
// the matrices of the call are small enough to stay in the last-level cache: each thread then reads
// all of them once per piece of its token range (3-5 pieces as its range drains), which costs
// nothing from the cache and is a multiple of the weights' bytes from DRAM. Past
// kTokenSplitMaxBytes a split over output rows reads each weight once (every thread all tokens: the
// prepared activations are shared). Gemma-2-2B-shaped (9-85 MB per call), 128 tokens, 2 threads,
// Zen 5: bf16 prefill 100 -> 160 tok/s, q8_0 90-110 -> 131-139; SmolLM2-shaped (1-4 MB per call) is
// as fast either way at 3 MB and 5-10% faster with the token split in bf16 and q4_0.
constexpr int64_t kTokenSplitMin = 64;
constexpr int64_t kTokenSplitGrain = 16;
constexpr double kTokenSplitMaxBytes = 8.0 * 1024 * 1024;
// Decode splits rows in multiples of 24 (whole 8, 6, 4 and 3-row tiles; 24-row panels); matmuls on
// AMX tiles in multiples of 64 (a block of the AmxTiles layout).
constexpr int64_t kRowGrain = 24;
constexpr int64_t kTileRowGrain = 64;
// Matrices one call may multiply by a shared input.
constexpr size_t kMaxSharedInput = 8;

double weight_bytes(std::span<const WeightMatrix* const> ws) {
  double bytes = 0;
  for (const WeightMatrix* w : ws) {
    bytes += static_cast<double>(w->n_rows) * static_cast<double>(w->row_bytes);
  }
  return bytes;
}
}  // namespace

void CpuBackend::prepare_inputs(const float* x, int64_t T,
                                std::span<const WeightMatrix* const> ws) {
  bool any_8bit = false, any_bf16 = false, any_f32 = false;
  for (const WeightMatrix* w : ws) {
    const MatmulInput input = matmul_input(*w, T);
    any_8bit = any_8bit || input == MatmulInput::Q8;
    any_bf16 = any_bf16 || input == MatmulInput::Bf16;
    any_f32 = any_f32 || input == MatmulInput::F32;
  }
  // Float weights (and Rows-layout quantized ones from kGemmMinTokens tokens on) read the
  // activations in the kernels' own layout (one for bf16, one for the rest): prepare each once,
  // split over threads in whole token groups.
  const int64_t K = ws[0]->n_cols;
  auto prepare = [&](DType dtype, AlignedVector<float>& out) {
    const auto floats = static_cast<size_t>(prepared_activation_floats(dtype, T, K));
    if (out.size() < floats) out.resize(floats);
    for_token_rows(
        T, [&](int64_t b, int64_t e) { prepare_activations(dtype, x, T, K, b, e, out.data()); },
        kPreparedTokenGrain);
  };
  if (any_bf16) prepare(DType::BF16, x_bf16_);
  if (any_f32) prepare(DType::F32, x_float_);
  // Quantized weights (see uses_8bit_activations) multiply 8-bit activations: quantize the shared
  // input once, not per thread and matrix.
  if (any_8bit) {
    const size_t blocks = static_cast<size_t>(T * (K / kQuantBlock));
    if (x_q8_.size() < blocks) x_q8_.resize(blocks);
    for_token_rows(T, [&](int64_t b, int64_t e) {
      quantize_activations(x + b * K, e - b, K, x_q8_.data() + b * (K / kQuantBlock));
    });
  }
}

void CpuBackend::matmul(const float* x, int64_t T, std::span<const WeightMatrix* const> ws,
                        std::span<float* const> ys) {
  if (!time_ops_) return matmul_untimed(x, T, ws, ys);
  const auto start = std::chrono::steady_clock::now();
  matmul_untimed(x, T, ws, ys);
  op_times_.matmul_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const WeightMatrix* w : ws) {
    op_times_.matmul_flops += 2.0 * static_cast<double>(T * w->n_rows * w->n_cols);
  }
}

void CpuBackend::matmul_untimed(const float* x, int64_t T, std::span<const WeightMatrix* const> ws,
                                std::span<float* const> ys) {
  if (T == 0 || ws.empty()) return;
  if (ws.size() != ys.size() || ws.size() > kMaxSharedInput) {
    throw Error("cpu matmul: want 1 to " + std::to_string(kMaxSharedInput) +
                " matrices with one output each");
  }
  prepare_inputs(x, T, ws);
  // Matmuls on AMX tiles split by rows at any T (each block once per step, see
  // matmul_runs_on_tiles).
  bool on_tiles = false, all_tiled = true, any_tiled = false;
  for (const WeightMatrix* w : ws) {
    on_tiles = on_tiles || matmul_runs_on_tiles(*w, T);
    const bool tiled = w->layout == WeightLayout::AmxTiles;
    all_tiled = all_tiled && tiled;
    any_tiled = any_tiled || tiled;
  }
  if (on_tiles) {
    matmul_output_rows(T, ws, ys, kTileRowGrain);
  } else if (T >= kTokenSplitMin && threads_.size() > 1 &&
             weight_bytes(ws) <= kTokenSplitMaxBytes) {
    matmul_token_groups(T, ws, ys);
  } else {
    // Decode on AmxTiles reads whole 64-row blocks: a split inside one would read it twice.
    matmul_output_rows(T, ws, ys,
                       all_tiled   ? kTileRowGrain
                       : any_tiled ? 3 * kTileRowGrain
                                   : kRowGrain);
  }
}

void CpuBackend::matmul_groups(std::span<const MatmulGroup> groups) {
  const auto start = std::chrono::steady_clock::now();
  if (!matmul_groups_one_region(groups)) {
    for (const MatmulGroup& g : groups) matmul_untimed(g.x, g.rows, g.matrices(), g.outputs());
  }
  if (!time_ops_) return;
  op_times_.matmul_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const MatmulGroup& g : groups) {
    for (const WeightMatrix* w : g.matrices()) {
      op_times_.matmul_flops += 2.0 * static_cast<double>(g.rows * w->n_rows * w->n_cols);
    }
  }
}

// A mixture layer's experts at decode: each group (an expert, a few tokens) would split its
// output rows over the threads, one parallel region per expert and projection. Here every
// group's input is quantized first (once for groups sharing one input, as every expert does at
// batch 1), then one region splits the concatenated output rows of all groups: a thread streams
// whole experts' rows one after another and the threads meet once per call. The same kernels on
// the same rows and tokens as matmul(), so the same bits.
bool CpuBackend::matmul_groups_one_region(std::span<const MatmulGroup> groups) {
  if (threads_.size() < 2 || groups.size() < 2) return false;
  for (const MatmulGroup& g : groups) {
    if (g.rows <= 0 || g.n_matrices <= 0 || g.rows >= kTokenSplitMin) return false;
    for (const WeightMatrix* w : g.matrices()) {
      if (matmul_input(*w, g.rows) != MatmulInput::Q8 || matmul_runs_on_tiles(*w, g.rows) ||
          w->layout == WeightLayout::AmxTiles || w->n_cols != g.matrices()[0]->n_cols) {
        return false;
      }
    }
  }
  // Each group's quantized input; a group whose input is the previous group's reuses it.
  int64_t blocks = 0;
  for (const MatmulGroup& g : groups) blocks += g.rows * (g.ws[0]->n_cols / kQuantBlock);
  if (static_cast<int64_t>(groups_q8_.size()) < blocks)
    groups_q8_.resize(static_cast<size_t>(blocks));
  group_pieces_.clear();
  int64_t at = 0, rows = 0, macs = 0;
  const MatmulGroup* previous = nullptr;
  const BlockQ8Act* previous_q8 = nullptr;
  for (const MatmulGroup& g : groups) {
    const int64_t K = g.ws[0]->n_cols;
    const BlockQ8Act* xq = previous_q8;
    if (previous == nullptr || g.x != previous->x || g.rows != previous->rows ||
        K != previous->ws[0]->n_cols) {
      quantize_activations(g.x, g.rows, K, groups_q8_.data() + at);
      xq = groups_q8_.data() + at;
      at += g.rows * (K / kQuantBlock);
    }
    for (int i = 0; i < g.n_matrices; ++i) {
      group_pieces_.push_back(GroupPiece{xq, g.rows, g.ws[i], g.ys[i], rows});
      rows += g.ws[i]->n_rows;
      macs += g.rows * g.ws[i]->n_rows * K;
    }
    previous = &g;
    previous_q8 = xq;
  }
  parallel_for_work(
      macs, rows,
      [&](int64_t begin, int64_t end, int) {
        // The first piece ending after `begin`, then on while pieces start before `end`.
        auto piece = std::upper_bound(
            group_pieces_.begin(), group_pieces_.end(), begin,
            [](int64_t row, const GroupPiece& p) { return row < p.first_row + p.w->n_rows; });
        for (; piece != group_pieces_.end() && piece->first_row < end; ++piece) {
          const int64_t b = std::max(begin, piece->first_row) - piece->first_row;
          const int64_t e = std::min(end, piece->first_row + piece->w->n_rows) - piece->first_row;
          matmul_q8(piece->xq, piece->rows, *piece->w, piece->y, piece->w->n_rows, b, e);
        }
      },
      kRowGrain);
  return true;
}

// Prefill: each thread takes whole 16-token groups through every matrix (the last chunk also takes
// the partial group, so every call has >= 16 tokens and the same bits as one call).
void CpuBackend::matmul_token_groups(int64_t T, std::span<const WeightMatrix* const> ws,
                                     std::span<float* const> ys) {
  const int64_t G = kTokenSplitGrain, K = ws[0]->n_cols;
  threads_.parallel_for(T / G, [&](int64_t u0, int64_t u1, int) {
    const int64_t t0 = u0 * G, t1 = u1 == T / G ? T : u1 * G;
    for (size_t i = 0; i < ws.size(); ++i) {
      const WeightMatrix& w = *ws[i];
      const int64_t N = w.n_rows;
      if (matmul_input(w, T) == MatmulInput::Q8) {
        matmul_q8(x_q8_.data() + t0 * (K / kQuantBlock), t1 - t0, w, ys[i] + t0 * N, N, 0, N);
        continue;
      }
      const float* xp = matmul_input(w, T) == MatmulInput::Bf16 ? x_bf16_.data() : x_float_.data();
      const int64_t per_token = prepared_activation_floats(w.dtype, G, K) / G;
      matmul_prepared(xp + t0 * per_token, t1 - t0, w, ys[i] + t0 * N, N, 0, N);
    }
  });
}

// Decode (and small prefills): the output rows of all matrices, concatenated, split over threads.
void CpuBackend::matmul_output_rows(int64_t T, std::span<const WeightMatrix* const> ws,
                                    std::span<float* const> ys, int64_t grain) {
  int64_t offsets[kMaxSharedInput + 1] = {0};
  const size_t n = ws.size();
  int64_t macs = 0;
  for (size_t i = 0; i < n; ++i) {
    offsets[i + 1] = offsets[i] + ws[i]->n_rows;
    macs += T * ws[i]->n_rows * ws[i]->n_cols;
  }
  parallel_for_work(
      macs, offsets[n],
      [&](int64_t begin, int64_t end, int) {
        for (size_t i = 0; i < n; ++i) {
          const int64_t b = std::max(begin, offsets[i]), e = std::min(end, offsets[i + 1]);
          if (b >= e) continue;
          const WeightMatrix& w = *ws[i];
          if (matmul_input(w, T) == MatmulInput::Q8) {
            matmul_q8(x_q8_.data(), T, w, ys[i], w.n_rows, b - offsets[i], e - offsets[i]);
          } else {
            const float* xp =
                matmul_input(w, T) == MatmulInput::Bf16 ? x_bf16_.data() : x_float_.data();
            matmul_prepared(xp, T, w, ys[i], w.n_rows, b - offsets[i], e - offsets[i]);
          }
        }
      },
      grain);
}

}  // namespace ember::cpu
