// cut_micro_batches (--pp): a step's tokens in consecutive parts, sequences cut where a part
// ends, each logit row in the part holding its token and mapped back to its place in the step.
#include <gtest/gtest.h>

#include <vector>

#include "ember/engine/micro_batches.h"

namespace ember {
namespace {

// Two sequences: 5 prompt tokens from position 0 (logits of the last), then 4 tokens from
// position 10 (logits of all 4, as speculation's verify wants).
Batch two_sequences(const std::vector<int32_t>& tables) {
  Batch b;
  b.tokens = {10, 11, 12, 13, 14, 20, 21, 22, 23};
  b.sequences = {{tables.data(), 0, 5, nullptr}, {tables.data() + 1, 10, 4, nullptr}};
  b.logit_rows = {4, 5, 6, 7, 8};
  b.finalize();
  return b;
}

TEST(MicroBatches, PartsCutSequencesWhereTheyEndAndKeepEachLogitRowsPlace) {
  const std::vector<int32_t> tables = {7, 9};
  const Batch step = two_sequences(tables);
  const std::vector<MicroBatch> parts = cut_micro_batches(step, 2);
  ASSERT_EQ(parts.size(), 2u);
  // Tokens [0, 4) and [4, 9): the first sequence is cut after 4 of its 5 tokens.
  const Batch& a = parts[0].batch;
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{10, 11, 12, 13}));
  ASSERT_EQ(a.sequences.size(), 1u);
  EXPECT_EQ(a.sequences[0].start_position, 0);
  EXPECT_EQ(a.sequences[0].n_tokens, 4);
  EXPECT_TRUE(a.logit_rows.empty());
  const Batch& b = parts[1].batch;
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{14, 20, 21, 22, 23}));
  ASSERT_EQ(b.sequences.size(), 2u);
  EXPECT_EQ(b.sequences[0].block_table, tables.data());
  EXPECT_EQ(b.sequences[0].start_position, 4);  // where the first part stopped
  EXPECT_EQ(b.sequences[0].n_tokens, 1);
  EXPECT_EQ(b.sequences[1].block_table, tables.data() + 1);
  EXPECT_EQ(b.sequences[1].start_position, 10);
  EXPECT_EQ(b.positions, (std::vector<int32_t>{4, 10, 11, 12, 13}));
  EXPECT_EQ(b.logit_rows, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(parts[1].logit_index, (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(MicroBatches, EveryTokenAndLogitRowLandsOnceWhateverTheCount) {
  const std::vector<int32_t> tables = {7, 9};
  const Batch step = two_sequences(tables);
  for (int64_t n = 1; n <= 12; ++n) {
    SCOPED_TRACE(n);
    const std::vector<MicroBatch> parts = cut_micro_batches(step, n);
    EXPECT_EQ(static_cast<int64_t>(parts.size()), std::min<int64_t>(n, step.size()));
    std::vector<int32_t> tokens, positions, logit_index;
    for (const MicroBatch& mb : parts) {
      EXPECT_FALSE(mb.batch.tokens.empty());
      tokens.insert(tokens.end(), mb.batch.tokens.begin(), mb.batch.tokens.end());
      positions.insert(positions.end(), mb.batch.positions.begin(), mb.batch.positions.end());
      for (size_t i = 0; i < mb.logit_index.size(); ++i) {
        // The row is the same token as in the step.
        EXPECT_EQ(mb.batch.tokens[static_cast<size_t>(mb.batch.logit_rows[i])],
                  step.tokens[static_cast<size_t>(step.logit_rows[mb.logit_index[i]])]);
        logit_index.push_back(mb.logit_index[i]);
      }
    }
    EXPECT_EQ(tokens, step.tokens);
    EXPECT_EQ(positions, step.positions);
    EXPECT_EQ(logit_index, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  }
}

TEST(MicroBatches, AStepThatWantsHiddenStatesStaysWhole) {
  const std::vector<int32_t> tables = {7, 9};
  Batch step = two_sequences(tables);
  step.hidden_rows = {4, 8};
  const std::vector<MicroBatch> parts = cut_micro_batches(step, 3);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].batch.tokens, step.tokens);
  EXPECT_EQ(parts[0].batch.hidden_rows, step.hidden_rows);
}

}  // namespace
}  // namespace ember
