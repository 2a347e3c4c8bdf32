// The CUDA decode matvec kernels on their own, on a lent GPU: each matrix product of a decode step
// (Q/K/V with the attention norm folded in, O with the residual add, gate/up with the FFN norm,
// down with the residual add, the output head) for an 8B-Llama and a SmolLM2-135M shape, in bf16,
// q8_0 and q4_0, with 1, 2 or 4 rows per warp and the default choice. Each product is timed over
// many launches (CUDA events) on copies of its weights that together outgrow L2, and reported as
// GB/s against this GPU's read-bandwidth probe (over the same random data); every variant's output
// is checked against one row per warp. Run: ./ember_cuda_matvec_bench --help
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ember/backend/cuda/cuda_backend.h"
#include "ember/backend/cuda/kernels.h"
#include "ember/core/dtype.h"

namespace {

using ember::DType;
using ember::WeightLayout;
using ember::WeightMatrix;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Product {
  const char* name;
  std::vector<int64_t> rows;  // matrices sharing x (one launch)
  int64_t K;
  bool norm;      // an RMSNorm folded in
  bool residual;  // a residual add folded in
};

struct Shape {
  const char* name;
  std::vector<Product> products;
};

std::vector<Shape> shapes() {
  return {
      {"8b",
       {{"qkv", {4096, 1024, 1024}, 4096, true, false},
        {"o", {4096}, 4096, false, true},
        {"gate_up", {14336, 14336}, 4096, true, false},
        {"down", {4096}, 14336, false, true},
        {"lm_head", {128256}, 4096, true, false}}},
      {"smollm2",
       {{"qkv", {576, 192, 192}, 576, true, false},
        {"o", {576}, 576, false, true},
        {"gate_up", {1536, 1536}, 576, true, false},
        {"down", {576}, 1536, false, true},
        {"lm_head", {49152}, 576, true, false}}},
  };
}

int64_t matrix_bytes(DType dtype, int64_t rows, int64_t K) {
  switch (dtype) {
    case DType::BF16:
      return rows * K * 2;
    case DType::Q8_0:
      return rows * K + rows * (K / 32) * 2;
    default:  // Q4_0
      return rows * K / 2 + rows * (K / 32) * 2;
  }
}

// Device memory filled with valid values: bf16 in [-1, 1] (any byte is a valid quant), and for
// q8_0/q4_0 f16 scales in [0.001, 0.01] after the quants.
struct DeviceMatrix {
  WeightMatrix w;
  void* data = nullptr;
};

DeviceMatrix make_matrix(DType dtype, int64_t rows, int64_t K, const std::vector<uint16_t>& bf16,
                         const std::vector<uint16_t>& f16) {
  DeviceMatrix m;
  const int64_t bytes = matrix_bytes(dtype, rows, K);
  check(cudaMalloc(&m.data, static_cast<size_t>(bytes)), "cudaMalloc");
  const int64_t block = static_cast<int64_t>(bf16.size()) * 2;
  for (int64_t off = 0; off < bytes; off += block) {
    check(cudaMemcpy(static_cast<uint8_t*>(m.data) + off, bf16.data(),
                     static_cast<size_t>(std::min(block, bytes - off)), cudaMemcpyHostToDevice),
          "fill");
  }
  m.w.dtype = dtype;
  m.w.data = m.data;
  m.w.n_rows = rows;
  m.w.n_cols = K;
  m.w.row_bytes = bytes / rows;
  m.w.layout = WeightLayout::Rows;
  if (dtype != DType::BF16) {
    m.w.layout = WeightLayout::QuantsThenScales;
    const int64_t quants = dtype == DType::Q8_0 ? rows * K : rows * K / 2;
    const int64_t scale_bytes = bytes - quants;
    const int64_t fblock = static_cast<int64_t>(f16.size()) * 2;
    for (int64_t off = 0; off < scale_bytes; off += fblock) {
      check(cudaMemcpy(static_cast<uint8_t*>(m.data) + quants + off, f16.data(),
                       static_cast<size_t>(std::min(fblock, scale_bytes - off)),
                       cudaMemcpyHostToDevice),
            "fill scales");
    }
  }
  return m;
}

uint16_t to_f16_bits(float f) {  // normal values only (the scales here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t exp = ((u >> 23) & 0xff) - 127 + 15;
  return static_cast<uint16_t>(((u >> 16) & 0x8000) | (exp << 10) | ((u >> 13) & 0x3ff));
}

float* device_floats(const std::vector<float>& v) {
  float* p = nullptr;
  check(cudaMalloc(&p, v.size() * 4), "cudaMalloc");
  check(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "copy");
  return p;
}

struct Args {
  int tokens = 1;
  int reps = 40;
  std::string shape;       // empty: all
  std::string dtype;       // empty: bf16, q8_0 and q4_0
  std::string product;     // empty: all
  int rows_per_warp = -1;  // -1: 1, 2, 4 and the default choice (0)
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--tokens" && i + 1 < argc) {
      a.tokens = std::atoi(argv[++i]);
    } else if (s == "--reps" && i + 1 < argc) {
      a.reps = std::atoi(argv[++i]);
    } else if (s == "--shape" && i + 1 < argc) {
      a.shape = argv[++i];
    } else if (s == "--dtype" && i + 1 < argc) {
      a.dtype = argv[++i];
    } else if (s == "--product" && i + 1 < argc) {
      a.product = argv[++i];
    } else if (s == "--rows-per-warp" && i + 1 < argc) {
      a.rows_per_warp = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: ember_cuda_matvec_bench [--tokens 1..8] [--reps N] "
                   "[--shape 8b|smollm2] [--dtype bf16|q8_0|q4_0]\n"
                   "  [--product qkv|o|gate_up|down|lm_head] [--rows-per-warp 0|1|2|4]\n"
                   "(0: the default choice; without it, 1, 2, 4 and the default)\n");
      std::exit(s == "--help" || s == "-h" ? 0 : 2);
    }
  }
  if (a.tokens < 1 || a.tokens > ember::cuda::kMatvecMaxTokens || a.reps < 1) {
    std::fprintf(stderr, "ember_cuda_matvec_bench: --tokens must be 1..8 and --reps positive\n");
    std::exit(2);
  }
  return a;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
}

struct Context {
  Args args;
  int sms = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::mt19937 rng{7};
  std::vector<uint16_t> bf16, f16;  // fill patterns: valid bf16 weights, f16 scales
  double probe_gbs = 0;
};

float uniform(Context& c) {
  return std::uniform_real_distribution<float>(-1.0f, 1.0f)(c.rng);
}

// The read-bandwidth probe over 4 GiB of the random bf16 pattern (the data matters: over constant
// bytes the same kernel measured 4.5-4.6 TB/s with 0x01 and 3.9-4.0 with 0x5a on an H200), best
// of 5.
double read_probe_gbs(Context& c) {
  const int64_t bytes = int64_t{4} << 30;
  DeviceMatrix buffer = make_matrix(DType::BF16, bytes / 2 / 4096, 4096, c.bf16, c.f16);
  uint32_t* sink = nullptr;
  check(cudaMalloc(&sink, 4), "cudaMalloc");
  float best_ms = 1e30f;
  for (int i = 0; i < 5; ++i) {
    best_ms =
        std::min(best_ms, ember::cuda::time_read_probe(buffer.data, bytes, sink, c.sms, c.stream));
  }
  check(cudaFree(buffer.data), "free");
  check(cudaFree(sink), "free");
  return static_cast<double>(bytes) / (best_ms * 1e6);
}

// Median microseconds per launch over 5 runs of `reps` launches.
template <typename Launch>
double time_launches(Context& c, int copies, const Launch& launch) {
  for (int w = 0; w < copies; ++w) launch(w);
  std::vector<double> runs;
  for (int run = 0; run < 5; ++run) {
    check(cudaEventRecord(c.start, c.stream), "event");
    for (int i = 0; i < c.args.reps; ++i) launch(i % copies);
    check(cudaEventRecord(c.stop, c.stream), "event");
    check(cudaEventSynchronize(c.stop), "timed runs");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, c.start, c.stop), "elapsed");
    runs.push_back(1000.0 * ms / c.args.reps);
  }
  std::sort(runs.begin(), runs.end());
  return runs[2];
}

// One product in one dtype for each rows-per-warp choice: a table row each, and its time added to
// step_us (1, 2, 4, default).
void bench_product(Context& c, const char* shape, DType dtype, const Product& p,
                   double step_us[4]) {
  const int T = c.args.tokens;
  int64_t bytes = 0, rows = 0;
  for (int64_t r : p.rows) {
    bytes += matrix_bytes(dtype, r, p.K);
    rows += r;
  }
  // Copies of the weights, used in turn, so that the launches read from memory, not L2.
  const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{512} << 20) / bytes + 1));
  std::vector<std::vector<DeviceMatrix>> sets(static_cast<size_t>(copies));
  for (auto& set : sets) {
    for (int64_t r : p.rows) set.push_back(make_matrix(dtype, r, p.K, c.bf16, c.f16));
  }
  std::vector<float> xh(static_cast<size_t>(T * p.K)), nw(static_cast<size_t>(p.K));
  for (float& v : xh) v = uniform(c);
  for (float& v : nw) v = 0.75f + 0.25f * uniform(c);
  float* x = device_floats(xh);
  float* norm_w = device_floats(nw);
  float* norm_out = device_floats(xh);
  std::vector<float*> ys;
  for (int64_t r : p.rows)
    ys.push_back(device_floats(std::vector<float>(static_cast<size_t>(T * r), 0.0f)));
  float* residual = device_floats(std::vector<float>(static_cast<size_t>(T * p.rows[0]), 0.0f));
  const ember::cuda::FoldedNorm norm{norm_w, 1e-5f, norm_out};
  auto launch = [&](int copy) {
    std::vector<const WeightMatrix*> ws;
    for (const DeviceMatrix& m : sets[static_cast<size_t>(copy)]) ws.push_back(&m.w);
    ember::cuda::launch_matvec(x, T, ws, ys, p.residual ? residual : nullptr,
                               p.norm ? &norm : nullptr, c.sms, c.stream);
  };
  auto outputs = [&] {
    std::vector<float> out;
    for (size_t i = 0; i < ys.size(); ++i) {
      std::vector<float> y(static_cast<size_t>(T * p.rows[i]));
      check(cudaMemcpy(y.data(), ys[i], y.size() * 4, cudaMemcpyDeviceToHost), "read");
      out.insert(out.end(), y.begin(), y.end());
    }
    return out;
  };
  std::vector<float> one_row;
  double one_row_us = 0;
  const int variants[] = {1, 2, 4, 0};
  for (int vi = 0; vi < 4; ++vi) {
    const int rows_per_warp = variants[vi];
    // One variant alone (a profiler's run): the 1-row reference output is not computed.
    if (c.args.rows_per_warp >= 0 && rows_per_warp != c.args.rows_per_warp) continue;
    ember::cuda::set_matvec_rows_per_warp(rows_per_warp);
    launch(0);
    check(cudaStreamSynchronize(c.stream), "run");
    const std::vector<float> out = outputs();
    if (rows_per_warp == 1 || one_row.empty()) one_row = out;
    const double diff = relative_difference(out, one_row);
    const double us = time_launches(c, copies, launch);
    if (rows_per_warp == 1) one_row_us = us;
    step_us[vi] += us;
    const int chosen = ember::cuda::matvec_rows_per_warp(rows, T, dtype != DType::BF16, c.sms);
    const std::string label = rows_per_warp == 0 ? "auto (" + std::to_string(chosen) + ")"
                                                 : std::to_string(rows_per_warp);
    const double gbs = static_cast<double>(bytes) / (us * 1e3);
    std::printf("| %s | %s | %s | %.1f | %s | %.2f | %.0f | %.0f%% | %.3fx%s |\n", shape,
                ember::dtype_name(dtype), p.name, bytes / 1e6, label.c_str(), us, gbs,
                100.0 * gbs / c.probe_gbs, one_row_us / us, diff > 1e-5 ? " OUTPUT DIFFERS" : "");
    if (diff > 1e-5) std::printf("  relative difference %.3g\n", diff);
  }
  ember::cuda::set_matvec_rows_per_warp(0);
  check(cudaStreamSynchronize(c.stream), "sync");
  for (auto& set : sets) {
    for (DeviceMatrix& m : set) check(cudaFree(m.data), "free");
  }
  for (float* y : ys) check(cudaFree(y), "free");
  for (float* f : {x, norm_w, norm_out, residual}) check(cudaFree(f), "free");
}

}  // namespace

int main(int argc, char** argv) {
  Context c;
  c.args = parse(argc, argv);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device");
  c.sms = prop.multiProcessorCount;
  check(cudaStreamCreate(&c.stream), "stream");
  check(cudaEventCreate(&c.start), "event");
  check(cudaEventCreate(&c.stop), "event");
  c.bf16.resize(size_t{16} << 20);
  c.f16.resize(size_t{1} << 20);
  for (uint16_t& v : c.bf16) {
    const float f = uniform(c);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    v = static_cast<uint16_t>(u >> 16);
  }
  for (uint16_t& v : c.f16) v = to_f16_bits(0.0055f + 0.0045f * uniform(c));
  c.probe_gbs = read_probe_gbs(c);
  std::printf("%s, %d SMs; read probe %.0f GB/s; %d token(s) per product; early loads %s\n",
              prop.name, c.sms, c.probe_gbs, c.args.tokens,
              ember::cuda::matvec_early_loads() ? "on" : "off (EMBER_CUDA_MATVEC_EARLY=0)");
  std::printf("| shape | dtype | product | MB | rows/warp | us | GB/s | of probe | vs 1 row |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const Shape& shape : shapes()) {
    if (!c.args.shape.empty() && c.args.shape != shape.name) continue;
    for (DType dtype : {DType::BF16, DType::Q8_0, DType::Q4_0}) {
      if (!c.args.dtype.empty() && c.args.dtype != ember::dtype_name(dtype)) continue;
      double step_us[4] = {0, 0, 0, 0};
      for (const Product& p : shape.products) {
        if (c.args.product.empty() || c.args.product == p.name)
          bench_product(c, shape.name, dtype, p, step_us);
      }
      std::printf("| %s | %s | **all** | | 1 / 2 / 4 / auto | %.1f / %.1f / %.1f / %.1f | | | |\n",
                  shape.name, ember::dtype_name(dtype), step_us[0], step_us[1], step_us[2],
                  step_us[3]);
    }
  }
  return 0;
}
