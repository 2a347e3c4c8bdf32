#include "ember/model/model_quantizer.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <vector>

#include "ember/core/dequantize.h"
#include "ember/core/error.h"
#include "ember/core/quantize.h"
#include "ember/core/thread_pool.h"
#include "ember/formats/gguf.h"
#include "ember/formats/gguf_writer.h"
#include "ember/model/gguf_model_metadata.h"
#include "ember/model/quantize_plan.h"

namespace ember {

namespace {

namespace fs = std::filesystem;

// Output rows converted per write: bounds memory whatever the tensor's size.
constexpr uint64_t kSlabBytes = 16ull << 20;

void check_output_path(const std::string& input, const std::string& output) {
  std::error_code ec;
  const fs::path out(output);
  const fs::path dir = out.parent_path();
  if (!dir.empty() && !fs::is_directory(dir, ec)) {
    throw Error::in_file(ErrorKind::NotFound, output,
                         "cannot write the output: directory " + dir.string() + " does not exist");
  }
  if (fs::is_directory(out, ec)) {
    throw Error::in_file(ErrorKind::InvalidArgument, output, "the output is a directory");
  }
  if (fs::exists(out, ec) && fs::exists(input, ec) && fs::equivalent(out, input, ec)) {
    throw Error::in_file(ErrorKind::InvalidArgument, output,
                         "the output would overwrite the input");
  }
}

// Fails before anything is written when the preset needs a quantizer this build lacks.
void check_quantizers(const QuantizePlan& plan) {
  std::set<DType> missing;
  for (const PlannedTensor& t : plan.tensors) {
    if (t.target != t.source_dtype && !can_quantize_to(t.target)) missing.insert(t.target);
  }
  if (missing.empty()) return;
  std::string names;
  for (DType d : missing) names += std::string(names.empty() ? "" : ", ") + dtype_name(d);
  throw Error(ErrorKind::Unsupported, std::string("preset ") + quant_preset_info(plan.preset).name +
                                          " needs quantizing to " + names +
                                          ", which is not implemented in this build");
}

void add_metadata(GgufWriter& w, const QuantizePlan& plan) {
  if (plan.gguf) {
    // Every key carries over; general.alignment too, so the layout stays the source's.
    for (const auto& [key, value] : plan.gguf->metadata()) w.set(key, value);
  } else {
    add_model_metadata(w, *plan.checkpoint);
  }
  set_quantization_metadata(w, plan.preset);
  for (const PlannedTensor& t : plan.tensors) w.add_tensor(t.name, t.target, t.shape);
}

// Removes OUT.tmp unless the write got as far as renaming it.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    std::error_code ignored;
    if (!committed_) fs::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }
  void commit_as(const std::string& final_path) {
    std::error_code ec;
    fs::rename(path_, final_path, ec);
    if (ec) {
      throw Error::in_file(ErrorKind::Unavailable, final_path,
                           "cannot move " + path_ + " into place: " + ec.message());
    }
    committed_ = true;
  }

 private:
  std::string path_;
  bool committed_ = false;
};

class TensorStreamer {
 public:
  TensorStreamer(GgufWriter& writer, int threads) : writer_(writer), pool_(threads) {
    scratch_.resize(static_cast<size_t>(pool_.size()));
  }

  void write(const PlannedTensor& t) {
    const int64_t rows = t.rows(), cols = t.cols();
    const int64_t in_row = dtype_row_bytes(t.source_dtype, cols);
    if (t.is_copy()) {
      writer_.write_tensor_data(t.source, static_cast<uint64_t>(rows * in_row));
      return;
    }
    const int64_t out_row = dtype_row_bytes(t.target, cols);
    const int64_t slab_rows = std::max<int64_t>(1, static_cast<int64_t>(kSlabBytes) / out_row);
    slab_.resize(static_cast<size_t>(std::min(rows, slab_rows) * out_row));
    for (int64_t first = 0; first < rows; first += slab_rows) {
      const int64_t n = std::min(slab_rows, rows - first);
      convert_rows(t, first, n, in_row, out_row);
      writer_.write_tensor_data(slab_.data(), static_cast<uint64_t>(n * out_row));
    }
  }

 private:
  // Rows [first, first + n) of `t` into slab_, in parallel; each row on its own.
  void convert_rows(const PlannedTensor& t, int64_t first, int64_t n, int64_t in_row,
                    int64_t out_row) {
    std::mutex error_mutex;
    std::exception_ptr error;
    pool_.parallel_for(n, [&](int64_t begin, int64_t end, int thread) {
      try {
        std::vector<float>& row = scratch_[static_cast<size_t>(thread)];
        row.resize(static_cast<size_t>(t.cols()));
        for (int64_t i = begin; i < end; ++i) {
          const uint8_t* src = t.source + source_row(t, first + i) * in_row;
          uint8_t* dst = slab_.data() + i * out_row;
          if (t.target == t.source_dtype) {
            std::memcpy(dst, src, static_cast<size_t>(out_row));
          } else {
            dequantize_row(t.source_dtype, src, row.data(), t.cols());
            convert_row(row.data(), t.target, dst, t.cols());
          }
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
    if (error) std::rethrow_exception(error);
  }

  // HF half-rotation -> GGUF interleaved pairs: output row 2i + c of a head reads row
  // c * head_dim / 2 + i of the same head.
  static int64_t source_row(const PlannedTensor& t, int64_t row) {
    const int64_t hd = t.permute_head_dim;
    if (hd == 0) return row;
    const int64_t head = row / hd, j = row % hd;
    return head * hd + (j % 2) * (hd / 2) + j / 2;
  }

  GgufWriter& writer_;
  ThreadPool pool_;
  std::vector<std::vector<float>> scratch_;  // one row of floats per thread
  std::vector<uint8_t> slab_;
};

void release_source(const QuantizePlan& plan, const PlannedTensor& t) {
  const auto bytes = static_cast<size_t>(t.rows() * dtype_row_bytes(t.source_dtype, t.cols()));
  for (const auto& mapping : plan.mappings) {
    if (mapping->release_pages(t.source, bytes)) return;
  }
}

}  // namespace

bool can_quantize_to(DType dtype) {
  constexpr int64_t kN = 256;  // a whole block of every type
  std::vector<float> x(kN);
  for (int64_t i = 0; i < kN; ++i) x[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i - 100);
  std::vector<uint8_t> out(static_cast<size_t>(dtype_row_bytes(dtype, kN)));
  try {
    convert_row(x.data(), dtype, out.data(), kN);
    return true;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Unsupported) return false;
    throw;
  }
}

QuantizeSummary quantize_model(const QuantizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  check_output_path(options.input, options.output);
  const QuantizePlan plan =
      plan_quantization(options.input, options.preset, options.tokenizer_path);
  check_quantizers(plan);

  TempFile tmp(options.output + ".tmp");  // declared first: removed after the writer closes
  GgufWriter writer;
  add_metadata(writer, plan);
  writer.open(tmp.path());
  TensorStreamer streamer(writer, options.threads);
  QuantizeSummary summary;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const PlannedTensor& t = plan.tensors[i];
    streamer.write(t);
    release_source(plan, t);
    summary.tensor_bytes += writer.tensors()[i].nbytes;
    summary.n_elements += t.numel();
    ++summary.tensors_by_type[ggml_type_name(ggml_type_of(t.target))];
    if (options.on_tensor) {
      options.on_tensor({i + 1, plan.tensors.size(), &t.name, t.target, writer.bytes_written()});
    }
  }
  writer.close();
  tmp.commit_as(options.output);

  summary.output = options.output;
  summary.n_tensors = plan.tensors.size();
  summary.file_bytes = writer.bytes_written();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace ember
