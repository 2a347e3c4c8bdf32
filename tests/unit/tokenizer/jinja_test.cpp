// The Jinja engine's semantics one feature at a time; the expected strings are what Jinja2
// 3.1 renders with transformers' settings (trim_blocks, lstrip_blocks). The corpus test
// (chat_template_corpus_test.cpp) checks whole real templates against Jinja2 itself.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ember/core/error.h"
#include "ember/tokenizer/jinja/template.h"

namespace ember::jinja {
namespace {

std::string render(const std::string& source, const std::string& json_vars = "{}") {
  RenderOptions options;
  std::tm now{};
  now.tm_year = 2024 - 1900;
  now.tm_mon = 6;
  now.tm_mday = 26;
  now.tm_hour = 12;
  options.now = now;
  return Template(source).render(Value::from_json(nlohmann::ordered_json::parse(json_vars)),
                                 options);
}

TEST(Jinja, TextAndExpressions) {
  EXPECT_EQ(render("Hello {{ name }}!", R"({"name": "world"})"), "Hello world!");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }}"),
            "7 3 -4 1 2");
  EXPECT_EQ(render("{{ 1 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 0.1 + 0.2 }}"),
            "0.5 2.0 1024 0.30000000000000004");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }}"), "a1None abab");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ missing }}|"), "None True |");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v'} }}"),
            "[1, 'a', None, True, 1.5] {'k': 'v'}");
  EXPECT_EQ(render("{{ \"it's\" }} {{ ['it\\'s'] }}"), "it's [\"it's\"]");
  EXPECT_EQ(render("{{ 'x' if false }}|{{ 'y' if 1 > 0 else 'n' }}"), "|y");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }}"),
            "True False True True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }}"),
            "True False True");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ not [] }}"), "x b True");
  EXPECT_EQ(render("{{ 'a' 'b' }} {{ '\\u00e9\\n'|length }}"), "ab 2");
}

TEST(Jinja, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before one.
  EXPECT_EQ(render("{% if true %}\n  yes\n  {% endif %}\nend"), "  yes\nend");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(render("{{ 'x' }}\n{# comment #}\ny"), "x\ny");
  EXPECT_EQ(render("x {{- ' y ' -}} z"), "x y z");
  EXPECT_EQ(render("line\n"), "line");  // one trailing newline dropped
  EXPECT_EQ(render("a\r\nb"), "a\nb");
  EXPECT_EQ(render("{% raw %}{{ not evaluated }}{% endraw %}"), "{{ not evaluated }}");
}

TEST(Jinja, LoopsAndScopes) {
  const char* vars = R"({"xs": ["a", "b", "c"]})";
  EXPECT_EQ(
      render(
          "{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
          vars),
      "1a,2b,3c");
  EXPECT_EQ(
      render("{% for x in xs if x != 'b' %}{{ loop.index0 }}/{{ loop.length }}{{ x }} {% endfor %}",
             vars),
      "0/2a 1/2c ");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(
      render("{% for x in xs %}{% if x == 'b' %}{% break %}{% endif %}{{ x }}{% endfor %}", vars),
      "a");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{{ x }}{% endfor %}",
                   vars),
            "ac");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
  // set inside a loop does not leak; a namespace does.
  EXPECT_EQ(
      render("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in xs %}{% set n = n + 1 %}"
             "{% set ns.n = ns.n + 1 %}{% endfor %}{{ n }} {{ ns.n }}",
             vars),
      "0 3");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.cycle('o', 'e') }}{% endfor %}", vars), "oeo");
  EXPECT_EQ(render("{% if false %}a{% elif true %}b{% else %}c{% endif %}"), "b");
}

TEST(Jinja, MacrosCallsAndFilterBlocks) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('a') }} {{ greet('b', punct='?') }}"),
            "Hi a! Hi b?");
  EXPECT_EQ(
      render("{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}in{% endcall %}"),
      "[in]");
  EXPECT_EQ(render("{% filter upper %}abc{% endfilter %}"), "ABC");
  EXPECT_EQ(render("{% set x %}block {{ 1 }}{% endset %}{{ x }}"), "block 1");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
}

TEST(Jinja, Filters) {
  EXPECT_EQ(
      render("{{ '  x  '|trim }}|{{ 'Ab'|upper }}{{ 'Ab'|lower }}|{{ 'a-b'|replace('-', '+') }}"),
      "x|ABab|a+b");
  EXPECT_EQ(render("{{ [1, 2]|join(', ') }} {{ 'abc'|length }} {{ [3, 1, 2]|sort|list }}"),
            "1, 2 3 [1, 2, 3]");
  EXPECT_EQ(render("{{ missing|default('d') }} {{ ''|default('d', true) }} {{ 'x'|default('d') }}"),
            "d d x");
  EXPECT_EQ(render("{{ {'a': [1, 'é'], 'b': none}|tojson }}"), "{\"a\": [1, \"é\"], \"b\": null}");
  EXPECT_EQ(render("{{ {'a': [1, 2]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
  EXPECT_EQ(render("{{ 'a\"b\\n'|tojson }}"), "\"a\\\"b\\n\"");
  const char* msgs =
      R"({"m": [{"role": "system", "c": 1}, {"role": "user", "c": 2}, {"role": "user", "c": 3}]})";
  EXPECT_EQ(render("{{ m|selectattr('role', 'equalto', 'user')|map(attribute='c')|list }}", msgs),
            "[2, 3]");
  EXPECT_EQ(render("{{ m|rejectattr('role', 'eq', 'user')|list|length }}", msgs), "1");
  EXPECT_EQ(render("{{ m|map(attribute='role')|unique|list }} {{ m|first }}", msgs),
            "['system', 'user'] {'role': 'system', 'c': 1}");
  EXPECT_EQ(render("{{ ['a', 'b']|map('upper')|join }} {{ [1, 2, 3]|select('odd')|list }}"),
            "AB [1, 3]");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|dictsort }} {{ {'x': 1}|items|list }}"),
            "[('a', 2), ('b', 1)] [('x', 1)]");
  EXPECT_EQ(render("{{ 'a\nb'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}"), "a\n  b|  a\n  b");
  EXPECT_EQ(
      render(
          "{{ '%s-%d'|format('x', 3) }} {{ '%s!' % 'y' }} {{ 2.567|round(1) }} {{ '3'|int + 1 }}"),
      "x-3 y! 2.6 4");
}

TEST(Jinja, TestsAndMethods) {
  EXPECT_EQ(render("{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} "
                   "{{ 3 is odd }}"),
            "False True True True True");
  EXPECT_EQ(render("{{ [] is iterable }} {{ 1 is number }} {{ 'a' is not string }} {{ 4 is "
                   "divisibleby 2 }}"),
            "True True False True");
  EXPECT_EQ(render("{{ ' x '.strip() }}|{{ 'a,b,c'.split(',') }}|{{ 'a b  c'.split() }}|{{ "
                   "'a,b,c'.split(',', 1) }}"),
            "x|['a', 'b', 'c']|['a', 'b', 'c']|['a', 'b,c']");
  EXPECT_EQ(
      render(
          "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'xxa'.lstrip('x') }}"),
      "True True a");
  EXPECT_EQ(render("{{ 'héllo'[1] }} {{ 'héllo'[-2:] }} {{ 'abc'[::-1] }} {{ [1, 2, 3][1:] }} {{ "
                   "[1, 2][5] }}|"),
            "é lo cba [2, 3] |");
  EXPECT_EQ(render("{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b', 7) }} {{ {'a': 1}.keys()|list }}"),
            "1 7 ['a']");
  EXPECT_EQ(render("{{ 'a</think>b'.split('</think>')[-1] }} {{ 'hello world'.title() }}"),
            "b Hello World");
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }} {{ range(3)|list }}"), "26 Jul 2024 [0, 1, 2]");
}

TEST(Jinja, ErrorsNameTheProblem) {
  try {
    render("{{ raise_exception('roles must alternate') }}");
    FAIL() << "raise_exception did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("roles must alternate"), std::string::npos) << e.what();
  }
  EXPECT_THROW(render("{% if x %}unterminated"), Error);
  EXPECT_THROW(render("{{ 1 + }}"), Error);
  EXPECT_THROW(render("{% include 'other.jinja' %}"), Error);
  EXPECT_THROW(render("{{ missing.attr }}"), Error);  // attribute of an undefined value
  EXPECT_THROW(render("{{ 1 + 'a' }}"), Error);
  EXPECT_THROW(render("{{ x|nosuchfilter }}", R"({"x": 1})"), Error);
  EXPECT_THROW(render("{% set xs = [] %}{{ xs.append(1) }}"), Error);  // immutable sandbox
  EXPECT_THROW(render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
               Error);  // recursion limit
}

// Found by fuzzing (fuzz/corpus/chat_template/crash-*): each was a crash or an exception other than
// ember::Error (std::bad_variant_access, a null expression dereferenced).
TEST(Jinja, TemplateMistakesFoundByFuzzingAreErrors) {
  auto message = [](const std::string& source) -> std::string {
    try {
      render(source, R"({"xs": [1, 2], "s": "ab"})");
    } catch (const Error& e) {
      return e.what();
    }
    return "(rendered)";
  };
  EXPECT_NE(message("{{ xs[] }}").find("expected an index or a slice"), std::string::npos);
  EXPECT_NE(message("{{ '%d' % undefined_name }}").find("expected a number"), std::string::npos);
  EXPECT_NE(message("{{ '%d' % s }}").find("expected a number, got str"), std::string::npos);
  EXPECT_NE(message("{{ '%d' % 1e300 }}").find("outside the integer range"), std::string::npos);
  EXPECT_EQ(render("{{ '%d|%x' % (7.9, 255) }}"), "7|ff");  // Python truncates floats
  // Integers are int64 here (Python's do not overflow): past it is an error, never UB.
  EXPECT_NE(message("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(message("{{ 2 ** 1000000000000000000 }}").find("integer overflow"), std::string::npos);
  EXPECT_EQ(render("{{ 2 ** 62 }}|{{ (-1) ** 1000000000000000001 }}"), "4611686018427387904|-1");
  EXPECT_NE(message("{{ 1e99999 | int }}").find("cannot convert float"), std::string::npos);
  EXPECT_EQ(render("{{ 1e99999 }}"), "inf");
  EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807, 5) | list }}"),
            "[9223372036854775806]");
  // A render is bounded: nested loops over long ranges are refused, not run for hours. The
  // bound is lowered here (a million loop bodies take 80 s under ASan); the default stays 10^6.
  EXPECT_EQ(RenderOptions{}.max_loop_bodies, 1'000'000);
  RenderOptions bounded;
  bounded.max_loop_bodies = 20'000;
  const Template nested(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  std::string refused = "(rendered)";
  try {
    nested.render(Value(), bounded);
  } catch (const Error& e) {
    refused = e.what();
  }
  EXPECT_NE(refused.find("more than 20000 loop iterations"), std::string::npos) << refused;
  // Within the bound it renders.
  EXPECT_EQ(Template("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}ok")
                .render(Value(), bounded),
            "ok");
}

}  // namespace
}  // namespace ember::jinja
