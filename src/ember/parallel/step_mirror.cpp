#include "ember/parallel/step_mirror.h"

#include <deque>
#include <string>
#include <utility>

#include "ember/core/error.h"
#include "ember/parallel/communicator.h"

namespace ember::parallel {

namespace {

// Header of a message: its kind and the int32s of the step that follows.
enum : int64_t { kStop = 0, kStep = 1 };

// Rank 0's messages on their way: each stays until every follower has it, so rank 0 runs its
// part of a step while a later stage still runs an earlier one (--pp with steps in flight).
struct Outgoing {
  int64_t header[2] = {0, 0};
  std::vector<int32_t> body;
  std::vector<int64_t> transfers;
};
std::deque<Outgoing>& outgoing() {
  static std::deque<Outgoing> messages;
  return messages;
}

// Drops the messages every follower has; with `all`, waits for the rest.
void finish_sent(bool all) {
  Communicator& w = world();
  std::deque<Outgoing>& out = outgoing();
  while (!out.empty()) {
    std::vector<int64_t>& t = out.front().transfers;
    if (all) {
      for (const int64_t id : t) w.finish_transfer(id, "step's hand-off");
      t.clear();
    } else {
      std::erase_if(t, [&](int64_t id) { return w.transfer_done(id); });
    }
    if (!t.empty()) return;
    out.pop_front();
  }
}

void send(int64_t kind, std::vector<int32_t> body) {
  Communicator& w = world();
  finish_sent(false);
  Outgoing& m = outgoing().emplace_back();
  m.header[0] = kind;
  m.header[1] = static_cast<int64_t>(body.size());
  m.body = std::move(body);
  for (int r = 1; r < w.size(); ++r) {
    m.transfers.push_back(w.start_send(m.header, sizeof m.header, r, kStepTag));
    if (!m.body.empty()) {
      m.transfers.push_back(w.start_send(
          m.body.data(), static_cast<int64_t>(m.body.size() * sizeof(int32_t)), r, kStepTag));
    }
  }
}

}  // namespace

// A step as int32s: T, S, logit rows, hidden rows, observed sequence, block size; the tokens;
// per sequence its start and token count; the logit and hidden rows; then per sequence its block
// table and its window table (-2 first when it has none), each ceil((start + n) / block size)
// entries.
std::vector<int32_t> encode_step(const Batch& batch, int64_t block_size) {
  std::vector<int32_t> out = {static_cast<int32_t>(batch.tokens.size()),
                              static_cast<int32_t>(batch.sequences.size()),
                              static_cast<int32_t>(batch.logit_rows.size()),
                              static_cast<int32_t>(batch.hidden_rows.size()),
                              batch.observed_sequence,
                              static_cast<int32_t>(block_size)};
  out.insert(out.end(), batch.tokens.begin(), batch.tokens.end());
  for (const BatchSequence& s : batch.sequences) {
    out.push_back(static_cast<int32_t>(s.start_position));
    out.push_back(static_cast<int32_t>(s.n_tokens));
  }
  out.insert(out.end(), batch.logit_rows.begin(), batch.logit_rows.end());
  out.insert(out.end(), batch.hidden_rows.begin(), batch.hidden_rows.end());
  for (const BatchSequence& s : batch.sequences) {
    const int64_t n = (s.start_position + s.n_tokens + block_size - 1) / block_size;
    out.insert(out.end(), s.block_table, s.block_table + n);
    out.push_back(s.window_block_table != nullptr ? 1 : -2);
    if (s.window_block_table != nullptr) {
      out.insert(out.end(), s.window_block_table, s.window_block_table + n);
    }
  }
  return out;
}

// Reads `encode`'s int32s back; `tables` keeps the block tables the batch points into.
void decode_step(const std::vector<int32_t>& in, Batch& batch, std::vector<int32_t>& tables) {
  size_t at = 0;
  const auto next = [&]() {
    if (at >= in.size()) throw Error("serve --tp: a step from rank 0 ended early");
    return in[at++];
  };
  const auto take = [&](std::vector<int32_t>& to, int64_t n) {
    for (int64_t i = 0; i < n; ++i) to.push_back(next());
  };
  batch.clear();
  const int32_t T = next(), S = next(), n_logits = next(), n_hidden = next();
  batch.observed_sequence = next();
  const int64_t block_size = next();
  take(batch.tokens, T);
  for (int32_t s = 0; s < S; ++s) {
    BatchSequence seq;
    seq.start_position = next();
    seq.n_tokens = next();
    batch.sequences.push_back(seq);
  }
  take(batch.logit_rows, n_logits);
  take(batch.hidden_rows, n_hidden);
  // Offsets first: `tables` must not grow once the batch points into it.
  tables.clear();
  std::vector<std::pair<int64_t, int64_t>> offsets;  // per sequence: table, window table (or -1)
  for (const BatchSequence& seq : batch.sequences) {
    const int64_t n = (seq.start_position + seq.n_tokens + block_size - 1) / block_size;
    const auto table = static_cast<int64_t>(tables.size());
    take(tables, n);
    int64_t window = -1;
    if (next() == 1) {
      window = static_cast<int64_t>(tables.size());
      take(tables, n);
    }
    offsets.emplace_back(table, window);
  }
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    batch.sequences[s].block_table = tables.data() + offsets[s].first;
    if (offsets[s].second >= 0) {
      batch.sequences[s].window_block_table = tables.data() + offsets[s].second;
    }
  }
  if (at != in.size()) throw Error("serve --tp: a step from rank 0 has trailing data");
}

void send_step(const Batch& batch, int64_t block_size) {
  send(kStep, encode_step(batch, block_size));
}

void send_stop() {
  send(kStop, {});
  finish_sent(true);
}

bool receive_step(Batch& batch, std::vector<int32_t>& tables) {
  Communicator& w = world();
  int64_t header[2] = {0, 0};
  // Between requests: no deadline, and no core held while waiting.
  w.finish_transfer(w.start_receive(header, sizeof header, 0, kStepTag), "step", /*idle=*/true);
  if (header[0] == kStop) return false;
  if (header[0] != kStep || header[1] < 0)
    throw Error("serve --tp: an unknown message from rank 0");
  thread_local std::vector<int32_t> body;
  body.resize(static_cast<size_t>(header[1]));
  if (!body.empty()) {
    w.finish_transfer(
        w.start_receive(body.data(), static_cast<int64_t>(body.size() * sizeof(int32_t)), 0,
                        kStepTag),
        "step");
  }
  decode_step(body, batch, tables);
  return true;
}

int64_t rank0_value(int64_t value) {
  world().broadcast_bytes(&value, sizeof value, 0, /*idle=*/false);
  return value;
}

}  // namespace ember::parallel
