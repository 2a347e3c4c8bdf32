#include "ember/parallel/tensor_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "ember/core/error.h"
#include "ember/parallel/communicator.h"

namespace ember::parallel {

namespace {

// FNV-1a of this process's command line (/proc/self/cmdline): ranks given different flags would
// load or run different things and wait on each other's collectives.
uint64_t command_line_hash() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// The ranks of this rank's pipeline stage, which split its heads (world() without --pp).
std::unique_ptr<Communicator>& tensor_group() {
  static std::unique_ptr<Communicator> group;
  return group;
}

// Rank 0's line at exit: what the all-reduces cost.
void print_comm_stats() {
  if (!tensor_group()) return;
  const CommStats& s = tensor_group()->stats();
  if (s.all_reduces == 0) return;
  if (s.on_device > 0) {
    std::fprintf(stderr,
                 "[ember] tp %d: %lld all-reduces of %.1f KiB on average on the GPUs (NCCL, "
                 "timed within each step), %lld in host memory in %.3f s\n",
                 tensor_group()->size(), static_cast<long long>(s.all_reduces),
                 s.bytes / static_cast<double>(s.all_reduces) / 1024.0,
                 static_cast<long long>(s.all_reduces - s.on_device), s.seconds);
    return;
  }
  std::fprintf(stderr,
               "[ember] tp %d: %lld all-reduces of %.1f KiB on average, %.1f us each, %.3f s in "
               "all (waiting for the other ranks included)\n",
               tensor_group()->size(), static_cast<long long>(s.all_reduces),
               s.bytes / static_cast<double>(s.all_reduces) / 1024.0,
               1e6 * s.seconds / static_cast<double>(s.all_reduces), s.seconds);
}

// Stage 0's hand-offs to the next stage (--pp): a step cut into micro-batches hands each on.
struct HandOffStats {
  int stages = 0;
  int64_t steps = 0, hand_offs = 0;
  int64_t overlapped = 0;  // steps launched while an earlier step's logits were on their way
  double bytes = 0;
};
HandOffStats& hand_off_stats() {
  static HandOffStats stats;
  return stats;
}

void print_hand_off_stats() {
  const HandOffStats& s = hand_off_stats();
  if (s.hand_offs == 0) return;
  std::fprintf(stderr,
               "[ember] pp %d: %lld steps handed on as %lld micro-batches of %.1f KiB on average; "
               "%lld steps launched while an earlier one was in flight\n",
               s.stages, static_cast<long long>(s.steps), static_cast<long long>(s.hand_offs),
               s.bytes / static_cast<double>(s.hand_offs) / 1024.0,
               static_cast<long long>(s.overlapped));
}

}  // namespace

ParallelLayout join_parallel(int tp, int pp) {
  const char* option = pp > 1 ? "--pp" : "--tp";
  const std::string flag = std::string(option) + " " + std::to_string(pp > 1 ? pp : tp);
  if (tp < 1) throw Error::invalid_request("--tp", "--tp must be at least 1");
  if (pp < 1) throw Error::invalid_request("--pp", "--pp must be at least 1");
  const int n = tp * pp;
  if (!built_with_mpi()) {
    throw Error::invalid_request(
        option, flag + ": this ember was built without MPI (install libopenmpi-dev, rebuild)");
  }
  if (!launched_by_mpi()) {
    throw Error::invalid_request(option, flag + " runs as " + std::to_string(n) +
                                             " processes: start it with mpirun -np " +
                                             std::to_string(n) + " ember ...");
  }
  Communicator& w = world();
  if (w.size() != n) {
    throw Error::invalid_request(option, flag + " but mpirun started " + std::to_string(w.size()) +
                                             " processes (mpirun -np " + std::to_string(n) + ")");
  }
  // Ranks stage by stage: rank = stage x tp + its place among the stage's tp ranks.
  ParallelLayout layout;
  if (tp > 1) layout.tensor = {w.rank() % tp, tp};
  if (pp > 1) layout.pipeline = {w.rank() / tp, pp};
  return layout;
}

void cut_checkpoint(Checkpoint& ckpt, const ParallelLayout& layout) {
  if (layout.tensor.size > 1) ckpt = shard_checkpoint(ckpt, layout.tensor);
  if (layout.pipeline.stages > 1) ckpt = stage_checkpoint(ckpt, layout.pipeline);
}

void attach_tensor_sums(ModelWeights& weights, Communicator& w) {
  Backend* backend = weights.backend.get();
  weights.reduce_partial_sums = [&w, backend](float* x, int64_t n) {
    backend->all_reduce_sum(x, n, w);
  };
  weights.reduce_host_sums = [&w](float* x, int64_t n) { w.all_reduce_sum(x, n); };
  // Logits: each rank's [rows, its vocabulary part], padded to the same size, gathered.
  const int64_t vocab = weights.config.vocab_size;
  const int64_t per = vocab_rows(vocab, {0, w.size()}).count;
  weights.gather_logits = [&w, vocab, per](const float* mine, int64_t rows, float* all) {
    thread_local std::vector<float> padded, gathered;
    const int64_t own = vocab_rows(vocab, {w.rank(), w.size()}).count;
    padded.assign(static_cast<size_t>(rows * per), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(mine + r * own, mine + (r + 1) * own, padded.begin() + r * per);
    }
    gathered.resize(static_cast<size_t>(rows * per * w.size()));
    w.all_gather(padded.data(), rows * per * static_cast<int64_t>(sizeof(float)), gathered.data());
    for (int k = 0; k < w.size(); ++k) {
      const Range part = vocab_rows(vocab, {k, w.size()});
      for (int64_t r = 0; r < rows; ++r) {
        const float* src = gathered.data() + (k * rows + r) * per;
        std::copy(src, src + part.count, all + r * vocab + part.begin);
      }
    }
  };
}

void attach_parallel(ModelWeights& weights, const ParallelLayout& layout) {
  Communicator& w = world();
  const uint64_t mine[2] = {weights.fingerprint, command_line_hash()};
  std::vector<uint64_t> all(static_cast<size_t>(2 * w.size()));
  w.all_gather(mine, sizeof mine, all.data());
  for (int r = 1; r < w.size(); ++r) {
    if (all[static_cast<size_t>(2 * r)] != all[0]) {
      throw Error(ErrorKind::InvalidArgument,
                  "rank " + std::to_string(r) + " opened a different model than rank 0");
    }
    if (all[static_cast<size_t>(2 * r + 1)] != all[1]) {
      throw Error(
          ErrorKind::InvalidArgument,
          "rank " + std::to_string(r) + " was started with a different command line than rank 0");
    }
  }
  const int tp = layout.tensor.size;
  if (layout.pipeline.stages > 1) {
    // The same place in the previous and next stages; the last stage's first rank broadcasts.
    const int stage = layout.pipeline.stage, last = layout.pipeline.stages - 1;
    const int prev = w.rank() - tp, next = w.rank() + tp, root = last * tp;
    if (stage > 0) {
      weights.receive_hidden = [&w, prev](float* x, int64_t n) { w.receive(x, n, prev); };
    }
    if (stage < last) {
      weights.send_hidden = [&w, next](const float* x, int64_t n) {
        w.send(x, n, next);
        ++hand_off_stats().hand_offs;
        hand_off_stats().bytes += static_cast<double>(n) * sizeof(float);
      };
    }
    // The last stage's first rank sends each step's logits to every rank of the earlier stages
    // (the last stage's other ranks gathered them themselves), without waiting: the ranks take
    // them when their engine needs them (finish_logits, oldest first).
    auto started = std::make_shared<std::deque<std::vector<int64_t>>>();
    weights.start_logits = [&w, root, stage, last, started](float* logits, int64_t n) {
      std::vector<int64_t> transfers;
      const auto bytes = static_cast<int64_t>(n * sizeof(float));
      if (n > 0 && w.rank() == root) {
        for (int r = 0; r < root; ++r)
          transfers.push_back(w.start_send(logits, bytes, r, kLogitsTag));
      } else if (n > 0 && stage < last) {
        transfers.push_back(w.start_receive(logits, bytes, root, kLogitsTag));
      }
      if (!started->empty()) ++hand_off_stats().overlapped;
      started->push_back(std::move(transfers));
      ++hand_off_stats().steps;
    };
    weights.finish_logits = [&w, started] {
      if (started->empty()) return;
      for (const int64_t t : started->front()) w.finish_transfer(t, "last stage's logits");
      started->pop_front();
    };
    weights.progress_transfers = [&w, started] {
      for (std::vector<int64_t>& transfers : *started) {
        std::erase_if(transfers, [&](int64_t t) { return w.transfer_done(t); });
      }
    };
    weights.pipeline_stages = layout.pipeline.stages;
    hand_off_stats().stages = layout.pipeline.stages;
  }
  if (tp > 1) {
    tensor_group() = w.split(layout.pipeline.stage, layout.tensor.rank);
    attach_tensor_sums(weights, *tensor_group());
  }
  if (w.rank() == 0) {
    std::atexit(print_comm_stats);
    std::atexit(print_hand_off_stats);
  }
  if (w.rank() != 0) {
    std::fflush(stdout);
    if (std::freopen("/dev/null", "w", stdout) == nullptr) {
      throw Error("rank " + std::to_string(w.rank()) + " cannot quiet its output");
    }
  }
}

}  // namespace ember::parallel
