// The GGUF metadata of a model ember writes: for a checkpoint that is not GGUF already (an HF
// directory, a llama2.c .bin), the keys llama.cpp's converter would write and its loader reads -
// general.*, the <arch>.* hyperparameters and the tokenizer.ggml.* vocabulary; for any output,
// the quantization keys.
#pragma once

#include <vector>

#include "ember/model/checkpoint.h"
#include "ember/model/quant_presets.h"

namespace ember {

class GgufWriter;

// general.architecture/name, <arch>.context_length, embedding_length, feed_forward_length,
// block_count, attention.head_count(_kv), attention.key_length/value_length (when head_dim is
// not d_model / n_heads), attention.layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count,
// vocab_size, and the tokenizer the checkpoint names (tokenizer.json beside an HF directory,
// tokenizer.bin beside a llama2.c file) with its chat template and pad token when it has them.
// Throws ember::Error naming the checkpoint when its tokenizer cannot be read or has no GGUF
// form.
void add_model_metadata(GgufWriter& writer, const Checkpoint& checkpoint);

// Llama 3 RoPE scaling as GGUF stores it (rope_freqs.weight): per rotated pair, the divisor that
// turns the plain inverse frequency into the scaled one. Empty when the config has no scaling.
std::vector<float> rope_freq_factors(const ModelConfig& config);

// general.quantization_version = 2 and general.file_type = the preset's number, appended last
// (replacing any earlier values), as llama.cpp's quantizer leaves them.
void set_quantization_metadata(GgufWriter& writer, QuantPreset preset);

}  // namespace ember
