#!/usr/bin/env python3
"""Render every chat template x every conversation case with Python jinja2, the way
Hugging Face transformers' ``apply_chat_template`` does, and write/check the goldens.

    python3 render_reference.py                    # writes expected.json beside this script
    python3 render_reference.py --out /tmp/x.json  # writes elsewhere
    python3 render_reference.py --check expected.json   # CI: exit 1 if the goldens are stale
    python3 render_reference.py --show llama2-7b-chat.jinja multi_turn.json   # print one render

Environment (mirrors transformers.utils.chat_template_utils._compile_jinja_template and
PreTrainedTokenizerBase.apply_chat_template / render_jinja_template):

* jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
  extensions=[AssistantTracker, jinja2.ext.loopcontrols])
* filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=indent,
  separators=separators, sort_keys=sort_keys)   (overrides jinja's HTML-escaping tojson)
* globals["raise_exception"](msg) -> raises jinja2.exceptions.TemplateError(msg)
* globals["strftime_now"](fmt) -> datetime.now().strftime(fmt); here *fixed* to NOW below
* render(messages=..., tools=<list or None>, documents=<list or None>,
  add_generation_prompt=<bool, default False>, **special_tokens, **other case keys)
  -- note that ``tools`` and ``documents`` are always passed, as None when absent, so they
  are *defined* (and ``none``) inside templates, exactly as in transformers. expected.json
  records these as "context_defaults": a consumer must build the render context as
  {**special_tokens, **context_defaults, **case}.

transformers' AssistantTracker extension adds a ``{% generation %}...{% endgeneration %}``
block tag that only records character spans for ``return_assistant_tokens_mask``; when the
tracker is inactive (normal rendering) the block renders its body unchanged. It is mirrored
here as a pass-through so templates using the tag parse the same way (none of the corpus
templates currently use it).
"""

import argparse
import copy
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES_DIR = os.path.join(HERE, "templates")
CASES_DIR = os.path.join(HERE, "cases")
DEFAULT_OUT = os.path.join(HERE, "expected.json")

NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)
SPECIAL_TOKENS = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "pad_token": "<pad>",
}
# What apply_chat_template passes when the caller gives no value: tools and documents are
# passed explicitly as None (so `tools is defined` is true and `tools is none` is true), and
# add_generation_prompt defaults to False. A case's own keys override these; the render
# context is {**SPECIAL_TOKENS, **CONTEXT_DEFAULTS, **case}.
CONTEXT_DEFAULTS = {"tools": None, "documents": None, "add_generation_prompt": False}


class GenerationPassthrough(jinja2.ext.Extension):
    """transformers' AssistantTracker with the tracker never activated."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationPassthrough, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def read_text(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def list_files(directory, suffix):
    return sorted(n for n in os.listdir(directory) if n.endswith(suffix))


def render_one(env, template_src, case):
    # transformers: render(messages=chat, tools=tool_schemas, documents=documents,
    #                      add_generation_prompt=..., **{**special_tokens_map, **kwargs})
    context = {**SPECIAL_TOKENS, **CONTEXT_DEFAULTS, **copy.deepcopy(case)}
    return env.from_string(template_src).render(**context)


def render_all():
    env = make_env()
    templates = list_files(TEMPLATES_DIR, ".jinja")
    cases = {name: json.loads(read_text(os.path.join(CASES_DIR, name))) for name in list_files(CASES_DIR, ".json")}
    renders = []
    for tname in templates:
        src = read_text(os.path.join(TEMPLATES_DIR, tname))
        for cname in sorted(cases):
            entry = {"template": tname, "case": cname}
            try:
                entry["output"] = render_one(env, src, cases[cname])
            except Exception as e:  # noqa: BLE001 - every failure is a golden too
                entry["error"] = str(e)
                entry["error_type"] = type(e).__name__
            renders.append(entry)
    return {
        "jinja2_version": jinja2.__version__,
        "now": NOW.isoformat(),
        "special_tokens": SPECIAL_TOKENS,
        "context_defaults": CONTEXT_DEFAULTS,
        "renders": renders,
    }


def dumps(doc):
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


def check(path, fresh):
    with open(path, encoding="utf-8") as f:
        old = json.load(f)
    problems = []
    if old.get("jinja2_version") != fresh["jinja2_version"]:
        print(f"note: goldens were made with jinja2 {old.get('jinja2_version')}, "
              f"this is jinja2 {fresh['jinja2_version']}", file=sys.stderr)
    for key in ("now", "special_tokens", "context_defaults"):
        if old.get(key) != fresh[key]:
            problems.append(f"{key}: {old.get(key)!r} != {fresh[key]!r}")
    key = lambda r: (r["template"], r["case"])  # noqa: E731
    old_map = {key(r): r for r in old.get("renders", [])}
    new_map = {key(r): r for r in fresh["renders"]}
    for k in sorted(set(old_map) - set(new_map)):
        problems.append(f"{k[0]} x {k[1]}: in {path} but no longer rendered")
    for k in sorted(set(new_map) - set(old_map)):
        problems.append(f"{k[0]} x {k[1]}: missing from {path}")
    for k in sorted(set(old_map) & set(new_map)):
        a, b = old_map[k], new_map[k]
        if a == b:
            continue
        if ("output" in a) != ("output" in b):
            what = lambda r: "output" if "output" in r else f"error {r.get('error')!r}"  # noqa: E731
            problems.append(f"{k[0]} x {k[1]}: golden has {what(a)[:80]}, now {what(b)[:80]}")
        elif "output" in a:
            x, y = a["output"], b["output"]
            i = next((n for n in range(min(len(x), len(y))) if x[n] != y[n]), min(len(x), len(y)))
            problems.append(f"{k[0]} x {k[1]}: output differs at char {i}: "
                            f"golden {x[max(0, i - 20):i + 20]!r} vs now {y[max(0, i - 20):i + 20]!r}")
        else:
            problems.append(f"{k[0]} x {k[1]}: error differs: golden {a.get('error')!r} vs now {b.get('error')!r}")
    if old.get("renders") and [key(r) for r in old["renders"]] != sorted(key(r) for r in old["renders"]):
        problems.append("renders are not sorted by (template, case)")
    if problems:
        print(f"{path}: {len(problems)} difference(s) from a fresh jinja2 render:", file=sys.stderr)
        for p in problems[:50]:
            print("  " + p, file=sys.stderr)
        if len(problems) > 50:
            print(f"  ... and {len(problems) - 50} more", file=sys.stderr)
        return 1
    print(f"{path}: OK ({len(fresh['renders'])} renders match)")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--out", default=DEFAULT_OUT, help="where to write the goldens (default: expected.json beside this script)")
    g.add_argument("--check", metavar="PATH", help="re-render and exit non-zero if PATH differs")
    g.add_argument("--show", nargs=2, metavar=("TEMPLATE", "CASE"), help="print one rendering (or its error) to stdout")
    args = ap.parse_args(argv)

    if args.show:
        tname, cname = args.show
        src = read_text(os.path.join(TEMPLATES_DIR, tname))
        case = json.loads(read_text(os.path.join(CASES_DIR, cname)))
        try:
            sys.stdout.write(render_one(make_env(), src, case))
        except Exception as e:  # noqa: BLE001
            print(f"{type(e).__name__}: {e}", file=sys.stderr)
            return 2
        return 0

    fresh = render_all()
    if args.check:
        return check(args.check, fresh)
    text = dumps(fresh)
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    n_err = sum(1 for r in fresh["renders"] if "error" in r)
    print(f"wrote {args.out}: {len(fresh['renders'])} renders ({n_err} errors), {len(text.encode('utf-8'))} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
