#include "ember/backend/batch.h"

#include <string>

#include "ember/core/error.h"

namespace ember {

void Batch::clear() {
  tokens.clear();
  sequences.clear();
  logit_rows.clear();
  hidden_rows.clear();
  observed_sequence = -1;
  positions.clear();
  sequence_of.clear();
}

void Batch::finalize() {
  const int64_t T = size();
  int64_t covered = 0;
  for (const auto& s : sequences) covered += s.n_tokens;
  if (covered != T) {
    throw Error("forward step: sequences cover " + std::to_string(covered) +
                " tokens but the batch has " + std::to_string(T));
  }
  positions.resize(static_cast<size_t>(T));
  sequence_of.resize(static_cast<size_t>(T));
  int64_t t = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    for (int64_t i = 0; i < sequences[s].n_tokens; ++i, ++t) {
      positions[t] = static_cast<int32_t>(sequences[s].start_position + i);
      sequence_of[t] = static_cast<int32_t>(s);
    }
  }
  for (int32_t row : logit_rows) {
    if (row < 0 || row >= T) throw Error("forward step: logit row out of range");
  }
}

}  // namespace ember
