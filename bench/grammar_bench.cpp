// Grammar-constrained decoding cost per token: the token mask for each step of a JSON document
// under a JSON schema, over SmolLM2's vocabulary (49152 tokens). Compare with a decode step of
// the SmolLM2-shaped dummy (`ember bench --dummy -p 0 -n 128`): the target is <= 10% of it.
//   Steady: the grammar's mask cache is warm (a server answering the same schema again).
//   Cold:   a fresh grammar per document (the first request with a schema).
#include <benchmark/benchmark.h>

#include <filesystem>

#include "ember/engine/grammar/grammar_constraint.h"
#include "ember/engine/grammar/json_schema_grammar.h"
#include "ember/tokenizer/load_tokenizer.h"

namespace {

using namespace ember::grammar;

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
  "tags": {"type": "array", "items": {"type": "string"}}, "city": {"type": "string"},
  "active": {"type": "boolean"}}, "required": ["name", "age", "tags", "city", "active"]})";
const char* kDocument =
    R"({"name": "Ada Lovelace", "age": 36, "tags": ["mathematician", "writer", "analyst"], "city": "London", "active": true})";

std::shared_ptr<const TokenTrie> smollm2_trie() {
  static std::shared_ptr<const TokenTrie> trie = [] {
    std::filesystem::path dir = std::filesystem::path(EMBER_SOURCE_DIR) / "../shared/models/smollm2-135m-instruct";
    return build_token_trie(*ember::load_tokenizer_for_model(dir.string(), ""));
  }();
  return trie;
}

// Tokens of kDocument, greedily longest-first among the allowed ones (as a model would emit it).
int64_t run_document(const std::shared_ptr<const CompiledGrammar>& compiled) {
  const TokenTrie& trie = compiled->trie();
  GrammarConstraint c(compiled);
  std::vector<uint8_t> allowed;
  const std::string doc = kDocument;
  size_t pos = 0;
  int64_t steps = 0;
  while (pos < doc.size()) {
    c.allowed_tokens(allowed);
    int32_t best = -1;
    for (int32_t id = 0; id < trie.vocab_size; ++id) {
      const std::string& b = trie.token_bytes[static_cast<size_t>(id)];
      if (allowed[static_cast<size_t>(id)] && doc.compare(pos, b.size(), b) == 0 &&
          (best < 0 || b.size() > trie.token_bytes[static_cast<size_t>(best)].size())) {
        best = id;
      }
    }
    if (best < 0) break;
    c.accept(best);
    pos += trie.token_bytes[static_cast<size_t>(best)].size();
    ++steps;
  }
  return steps;
}

void BM_JsonSchemaMaskSteady(benchmark::State& state) {
  auto grammar = parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(kSchema)));
  auto compiled = std::make_shared<CompiledGrammar>(grammar, smollm2_trie());
  run_document(compiled);  // warm the cache
  int64_t steps = 0;
  for (auto _ : state) steps += run_document(compiled);
  state.counters["us_per_token"] = benchmark::Counter(static_cast<double>(steps), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_JsonSchemaMaskCold(benchmark::State& state) {
  auto grammar = parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(kSchema)));
  int64_t steps = 0;
  for (auto _ : state) steps += run_document(std::make_shared<CompiledGrammar>(grammar, smollm2_trie()));
  state.counters["us_per_token"] = benchmark::Counter(static_cast<double>(steps), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_JsonSchemaMaskSteady)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_JsonSchemaMaskCold)->Unit(benchmark::kMillisecond);

}  // namespace
