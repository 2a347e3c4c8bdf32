// How attention turns a query and a key into a score, for every backend and kernel:
//   s = scale * (q . k);  s = softcap * tanh(s / softcap) when softcap > 0 (Gemma 2);
// and with a sliding window (Mistral, Phi-3, Gemma's local layers) the query at position i sees
// only the keys j with 0 <= i - j < window. A plain float converts to {scale}: no cap, no window.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ember {

struct AttentionScores {
  float scale = 1.0f;
  float softcap = 0.0f;  // 0: none
  int64_t window = 0;    // 0: the whole causal context

  AttentionScores(float s) : scale(s) {}  // NOLINT(google-explicit-constructor): the common case
  AttentionScores(float s, float cap, int64_t w) : scale(s), softcap(cap), window(w) {}

  // The first key position a query with context [0, ctx_len) attends to.
  int64_t first_key(int64_t ctx_len) const {
    return window > 0 ? std::max<int64_t>(0, ctx_len - window) : 0;
  }
};

}  // namespace ember
