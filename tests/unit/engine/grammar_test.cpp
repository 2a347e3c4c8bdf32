// Grammar-constrained decoding: GBNF parsing and matching (bytes, UTF-8 classes, repetition),
// the trie-walked token mask against a token-by-token check over SmolLM2's real vocabulary, and
// JSON schemas whose every sampled output is validated by python3-jsonschema.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>

#include "ember/core/error.h"
#include "ember/engine/grammar/grammar_constraint.h"
#include "ember/engine/grammar/json_schema_grammar.h"
#include "ember/tokenizer/load_tokenizer.h"
#include "test_util.h"

namespace ember::grammar {
namespace {

bool matches(const Grammar& g, const std::string& text) {
  return can_end(advance_bytes(g, initial_stacks(g), text));
}

bool prefix_ok(const Grammar& g, const std::string& text) {
  return !advance_bytes(g, initial_stacks(g), text).empty();
}

TEST(Grammar, LiteralsClassesAndRepetition) {
  Grammar g = parse_gbnf(R"(
    root ::= greeting " " name{1,2} "!"?   # a comment
    greeting ::= "hi" | "hello"
    name ::= [A-Z] [a-z]*
  )");
  EXPECT_TRUE(matches(g, "hi Bob"));
  EXPECT_TRUE(matches(g, "hello AnnBo!"));
  EXPECT_FALSE(matches(g, "hello AnnBoCy"));  // at most two names
  EXPECT_FALSE(matches(g, "hey Bob"));
  EXPECT_FALSE(matches(g, "hi bob"));
  EXPECT_TRUE(prefix_ok(g, "hel"));
  EXPECT_FALSE(prefix_ok(g, "hx"));

  Grammar counted = parse_gbnf(R"(root ::= "a"{2} "b"{1,} "c"{0,2})");
  EXPECT_TRUE(matches(counted, "aab"));
  EXPECT_TRUE(matches(counted, "aabbbcc"));
  EXPECT_FALSE(matches(counted, "ab"));
  EXPECT_FALSE(matches(counted, "aabccc"));
}

TEST(Grammar, UnicodeClassesMatchCodePointsNotBytes) {
  Grammar g = parse_gbnf(R"(root ::= [^a"] [à-ÿ] . "€")");
  EXPECT_TRUE(matches(g, "éüx€"));
  EXPECT_TRUE(matches(g, "😀àé€"));
  EXPECT_FALSE(matches(g, "aàé€"));
  EXPECT_FALSE(matches(g, "xaé€"));            // 'a' is outside [à-ÿ]
  EXPECT_FALSE(matches(g, "x\xC3\xA0\xFF€"));  // invalid UTF-8 is no character
  EXPECT_TRUE(prefix_ok(g, "\xF0\x9F"));       // half of an emoji: still a prefix
  Grammar escapes = parse_gbnf(R"(root ::= "\x41\u00e9\n" [\x30-\x39])");
  EXPECT_TRUE(matches(escapes, "Aé\n7"));
}

TEST(Grammar, MultiLineRulesAndGroups) {
  Grammar g = parse_gbnf(
      "root ::= item (\",\" item)*\n"
      "item ::=\n"
      "    \"x\"\n"
      "  | \"y\" (\"1\" |\n"
      "         \"2\")\n");
  EXPECT_TRUE(matches(g, "x,y1,y2"));
  EXPECT_FALSE(matches(g, "x,y3"));
}

TEST(Grammar, ErrorsNameTheProblem) {
  auto error_of = [](const std::string& text) {
    try {
      parse_gbnf(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<parsed>");
  };
  EXPECT_NE(error_of("root ::= missing").find("'missing' is used but never defined"),
            std::string::npos);
  EXPECT_NE(error_of("start ::= \"a\"").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(error_of("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nx ::= [abc").find("line 2"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
}

class GrammarVocab : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = test::fixture("models/smollm2-135m-instruct");
    EMBER_REQUIRE_FIXTURE(dir / "tokenizer.json");
    if (!trie_) trie_ = build_token_trie(*load_tokenizer_for_model(dir.string(), ""));
  }
  static std::shared_ptr<const TokenTrie> trie_;
};
std::shared_ptr<const TokenTrie> GrammarVocab::trie_;

// The mask equals checking every token's bytes one by one, at each step of a JSON document
// (inside strings the cached mask is reused and its uncertain tokens re-checked).
TEST_F(GrammarVocab, MaskEqualsTokenByTokenCheck) {
  auto compiled = std::make_shared<CompiledGrammar>(parse_gbnf(json_object_gbnf()), trie_);
  GrammarConstraint c(compiled);
  const std::string doc = R"({"name": "Ada \"L\"", "tags": ["x", "yz"], "n": -1.5e3, "ok": true})";
  std::vector<uint8_t> allowed;
  size_t pos = 0;
  int checked = 0;
  while (pos < doc.size()) {
    c.allowed_tokens(allowed);
    // Every 7th id both ways, and 300 of the allowed tokens: no false negatives, no false
    // positives (a strided sample keeps the sanitizer build's run short).
    size_t allowed_checked = 0;
    for (int32_t id = 0; id < trie_->vocab_size; ++id) {
      const bool is_allowed = allowed[static_cast<size_t>(id)] != 0;
      if (id % 7 != 0 && !(is_allowed && id % 3 == 0 && allowed_checked++ < 300)) continue;
      const std::string& bytes = trie_->token_bytes[static_cast<size_t>(id)];
      const bool want =
          !bytes.empty() && !advance_bytes(compiled->grammar(), c.stacks(), bytes).empty();
      ASSERT_EQ(is_allowed, want) << "token " << id << " '" << bytes << "' after '"
                                  << doc.substr(0, pos) << "'";
    }
    // Advance by the longest allowed token that is a prefix of the rest of the document.
    int32_t best = -1;
    for (int32_t id = 0; id < trie_->vocab_size; ++id) {
      const std::string& bytes = trie_->token_bytes[static_cast<size_t>(id)];
      if (allowed[static_cast<size_t>(id)] && doc.compare(pos, bytes.size(), bytes) == 0 &&
          (best < 0 || bytes.size() > trie_->token_bytes[static_cast<size_t>(best)].size())) {
        best = id;
      }
    }
    ASSERT_GE(best, 0) << "no token continues '" << doc.substr(0, pos) << "'";
    c.accept(best);
    pos += trie_->token_bytes[static_cast<size_t>(best)].size();
    ++checked;
  }
  EXPECT_TRUE(c.can_end());
  EXPECT_GT(checked, 10);
  EXPECT_GT(compiled->hits(), 0u) << "states inside strings recur";
  EXPECT_THROW(c.accept(0), Error);  // nothing may follow a complete object
}

// Samples `n` documents from the grammar of `schema` by walking random allowed tokens (ending as
// soon as the grammar allows), validates each against the schema with python3-jsonschema.
void sample_and_validate(const std::shared_ptr<const TokenTrie>& trie, const std::string& schema,
                         int n) {
  auto parsed = nlohmann::ordered_json::parse(schema);
  auto compiled = std::make_shared<CompiledGrammar>(parse_gbnf(json_schema_to_gbnf(parsed)), trie);
  std::mt19937 rng(42);
  auto dir = test::scratch_dir("grammar-validate");
  std::ofstream(dir / "schema.json") << schema;
  std::ofstream docs(dir / "docs.jsonl");
  std::vector<uint8_t> allowed;
  int complete = 0;
  for (int i = 0; i < n; ++i) {
    GrammarConstraint c(compiled);
    std::string text;
    for (int step = 0; step < 300 && !(c.can_end() && (step > 0 && rng() % 3 == 0)); ++step) {
      c.allowed_tokens(allowed);
      // A few random allowed tokens (rejection sampling; a scan where few are allowed), preferring
      // structure (quotes, brackets, digits) so that documents finish within the budget.
      std::vector<int32_t> ids;
      for (int tries = 0; tries < 64 && ids.size() < 16; ++tries) {
        const auto id = static_cast<int32_t>(rng() % allowed.size());
        if (allowed[static_cast<size_t>(id)]) ids.push_back(id);
      }
      if (ids.empty()) {
        for (size_t id = 0; id < allowed.size(); ++id) {
          if (allowed[id]) ids.push_back(static_cast<int32_t>(id));
        }
      }
      if (ids.empty()) break;
      int32_t pick = ids[rng() % ids.size()];
      for (int32_t cand : ids) {
        if (trie->token_bytes[static_cast<size_t>(cand)].find_first_of("\"]}0123456789") !=
            std::string::npos) {
          pick = cand;
          break;
        }
      }
      c.accept(pick);
      text += trie->token_bytes[static_cast<size_t>(pick)];
    }
    if (!c.can_end()) continue;  // ran out of budget mid-document
    ++complete;
    ASSERT_FALSE(nlohmann::json::parse(text, nullptr, false).is_discarded()) << text;
    docs << nlohmann::json(text).dump() << "\n";
  }
  docs.close();
  EXPECT_GE(complete, n / 2) << "too few documents completed";
  std::string python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  if (std::system((python + " -c 'import jsonschema' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "python3-jsonschema is needed to validate (scripts/setup.sh installs it)";
  }
  std::string script =
      "import json, sys, jsonschema\n"
      "schema = json.load(open(sys.argv[1]))\n"
      "bad = 0\n"
      "for line in open(sys.argv[2]):\n"
      "    doc = json.loads(json.loads(line))\n"
      "    try: jsonschema.validate(doc, schema)\n"
      "    except jsonschema.ValidationError as e: bad += 1; print(e.message, json.dumps(doc))\n"
      "sys.exit(1 if bad else 0)\n";
  std::ofstream(dir / "validate.py") << script;
  std::string cmd = python + " " + (dir / "validate.py").string() + " " +
                    (dir / "schema.json").string() + " " + (dir / "docs.jsonl").string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "some sampled documents do not validate: " << cmd;
}

TEST_F(GrammarVocab, SampledJsonSchemaOutputsValidate) {
  sample_and_validate(trie_, R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 12},
      "age": {"type": "integer", "minimum": 0},
      "email": {"type": ["string", "null"]},
      "role": {"enum": ["admin", "user", 3, null]},
      "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
      "address": {"$ref": "#/$defs/address"},
      "score": {"anyOf": [{"type": "number"}, {"type": "boolean"}]},
      "born": {"type": "string", "format": "date"},
      "id": {"type": "string", "format": "uuid"}
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": false,
    "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string"},
              "zip": {"type": "string", "maxLength": 5}}, "required": ["city"]}}
  })",
                      40);
  sample_and_validate(trie_, R"({"type": "object", "properties": {
      "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,4}$"},
      "word": {"type": "string", "pattern": "^(?:yes|no|maybe)!?$"},
      "free": {"type": "string", "pattern": "^x[^\"]{1,3}y$"}}, "required": ["code", "word", "free"]})",
                      20);
  sample_and_validate(trie_, R"({"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3,
    "$defs": {"node": {"type": "object", "properties": {"v": {"const": "leaf"},
              "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v"]}}})",
                      15);
}

// A schema's pattern, matched against JSON string literals (the text between the quotes is
// JSON-escaped: a '"' in the value is \" in the document).
TEST(JsonSchemaGrammar, PatternsMatchLikeTheRegex) {
  auto g = [](const std::string& pattern) {
    return parse_gbnf(json_schema_to_gbnf({{"type", "string"}, {"pattern", pattern}}));
  };
  Grammar phone = g("^\\+?[0-9]{1,3}-\\d{3}-\\d{4}$");
  EXPECT_TRUE(matches(phone, R"("+1-555-1234")"));
  EXPECT_TRUE(matches(phone, R"("44-555-1234")"));
  EXPECT_FALSE(matches(phone, R"("+1-55-1234")"));
  EXPECT_FALSE(matches(phone, R"("x+1-555-1234")"));
  Grammar alt = g("^(?:cat|dog)s?$");
  EXPECT_TRUE(matches(alt, R"("dogs")"));
  EXPECT_TRUE(matches(alt, R"("cat")"));
  EXPECT_FALSE(matches(alt, R"("cow")"));
  Grammar unanchored = g("ab");  // a search: anything around it
  EXPECT_TRUE(matches(unanchored, R"("xxabyy")"));
  EXPECT_FALSE(matches(unanchored, R"("xxayby")"));
  Grammar escapes = g("^[^a-z]\"\\\\.$");  // one non-lowercase, a quote, a backslash, anything
  EXPECT_TRUE(matches(escapes, R"("Q\"\\é")"));
  EXPECT_FALSE(matches(escapes, R"("q\"\\é")"));
  EXPECT_FALSE(matches(escapes, R"("Q"\\é")")) << "a bare quote ends the JSON string";
}

TEST(JsonSchemaGrammar, RefusesWhatItCannotEnforce) {
  auto error_of = [](const std::string& schema) {
    try {
      json_schema_to_gbnf(nlohmann::ordered_json::parse(schema));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "^(a)\\1$"})").find("backreferences"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "integer", "maximum": 5})").find("'maximum'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "format": "email"})").find("'email'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "#/$defs/missing"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "object", "required": ["x"]})").find("'x'"), std::string::npos);
  EXPECT_EQ(error_of(R"({"type": "object", "title": "t", "description": "d"})"), "<accepted>");
}

}  // namespace
}  // namespace ember::grammar
