// The step rank 0 sends the ranks that follow it under serve --tp/--pp (parallel/step_mirror.h):
// what a follower decodes is the batch rank 0 ran, block tables and window tables included, and a
// malformed message is an error, never a read past its end.
#include <gtest/gtest.h>

#include <vector>

#include "ember/core/error.h"
#include "ember/parallel/step_mirror.h"

namespace ember {
namespace {

TEST(StepMirror, AStepSurvivesTheTrip) {
  // Two sequences in blocks of 4: one decoding at position 9 (3 blocks), one prefilling 6
  // tokens from position 0 (2 blocks) with a window table.
  const std::vector<int32_t> table_a = {7, 3, 12}, table_b = {5, 1}, window_b = {-1, 4};
  Batch sent;
  sent.tokens = {11, 21, 22, 23, 24, 25, 26};
  sent.sequences.push_back({table_a.data(), 9, 1});
  sent.sequences.push_back({table_b.data(), 0, 6, window_b.data()});
  sent.logit_rows = {0, 6};
  sent.hidden_rows = {3};
  sent.observed_sequence = 1;
  const std::vector<int32_t> message = parallel::encode_step(sent, 4);

  Batch got;
  std::vector<int32_t> tables;
  parallel::decode_step(message, got, tables);
  EXPECT_EQ(got.tokens, sent.tokens);
  EXPECT_EQ(got.logit_rows, sent.logit_rows);
  EXPECT_EQ(got.hidden_rows, sent.hidden_rows);
  EXPECT_EQ(got.observed_sequence, 1);
  ASSERT_EQ(got.sequences.size(), 2u);
  EXPECT_EQ(got.sequences[0].start_position, 9);
  EXPECT_EQ(got.sequences[0].n_tokens, 1);
  EXPECT_EQ(std::vector<int32_t>(got.sequences[0].block_table, got.sequences[0].block_table + 3),
            table_a);
  EXPECT_EQ(got.sequences[0].window_block_table, nullptr);
  EXPECT_EQ(std::vector<int32_t>(got.sequences[1].block_table, got.sequences[1].block_table + 2),
            table_b);
  ASSERT_NE(got.sequences[1].window_block_table, nullptr);
  EXPECT_EQ(std::vector<int32_t>(got.sequences[1].window_block_table,
                                 got.sequences[1].window_block_table + 2),
            window_b);
  got.finalize();  // consistent as the runner needs it
  EXPECT_EQ(got.positions[0], 9);
  EXPECT_EQ(got.positions[6], 5);

  // Cut short or padded: an error naming the problem.
  std::vector<int32_t> cut(message.begin(), message.end() - 1);
  EXPECT_THROW(parallel::decode_step(cut, got, tables), Error);
  std::vector<int32_t> padded = message;
  padded.push_back(0);
  EXPECT_THROW(parallel::decode_step(padded, got, tables), Error);
}

}  // namespace
}  // namespace ember
