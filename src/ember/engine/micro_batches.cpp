#include "ember/engine/micro_batches.h"

#include <algorithm>

namespace ember {

std::vector<MicroBatch> cut_micro_batches(const Batch& step, int64_t parts) {
  const int64_t T = step.size();
  parts = std::clamp<int64_t>(parts, 1, std::max<int64_t>(1, T));
  if (!step.hidden_rows.empty()) parts = 1;
  std::vector<MicroBatch> out(static_cast<size_t>(parts));
  // Micro-batch p takes the step's tokens [p T / parts, (p + 1) T / parts).
  size_t seq = 0;
  int64_t used = 0;  // tokens of sequences[seq] already given to earlier micro-batches
  int64_t begin = 0;
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t end = (p + 1) * T / parts;
    MicroBatch& mb = out[static_cast<size_t>(p)];
    mb.batch.tokens.assign(step.tokens.begin() + begin, step.tokens.begin() + end);
    for (int64_t t = begin; t < end;) {
      const BatchSequence& s = step.sequences[seq];
      const int64_t take = std::min(s.n_tokens - used, end - t);
      BatchSequence part = s;
      part.start_position = s.start_position + used;
      part.n_tokens = take;
      mb.batch.sequences.push_back(part);
      t += take;
      used += take;
      if (used == s.n_tokens) {
        ++seq;
        used = 0;
      }
    }
    for (size_t i = 0; i < step.logit_rows.size(); ++i) {
      const int32_t row = step.logit_rows[i];
      if (row < begin || row >= end) continue;
      mb.batch.logit_rows.push_back(static_cast<int32_t>(row - begin));
      mb.logit_index.push_back(static_cast<int32_t>(i));
    }
    if (!step.hidden_rows.empty()) mb.batch.hidden_rows = step.hidden_rows;  // parts == 1
    mb.batch.observed_sequence = parts == 1 ? step.observed_sequence : -1;
    mb.batch.finalize();
    begin = end;
  }
  return out;
}

}  // namespace ember
