// The HF checkpoints of tests/reference/families.py and moe.py: each case's JSON names a
// config.json and its tensors with a deterministic generator's parameters; these write the same
// f32 weights as config.json + model.safetensors (+ a byte-level tokenizer.json of the 256 bytes),
// so a test can load the directory like any HF checkpoint.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace ember::test {

// tests/reference/families/<name>.json, and its contents.
std::filesystem::path family_case_file(const std::string& name);
nlohmann::json read_family_case(const std::string& name);

// Writes the case's HF checkpoint into a scratch directory (without the tensor `skip`, if named);
// returns it.
std::filesystem::path write_family_checkpoint(const nlohmann::json& spec,
                                              const std::string& skip = "");

}  // namespace ember::test
