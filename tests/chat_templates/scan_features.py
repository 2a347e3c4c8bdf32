#!/usr/bin/env python3
"""List every Jinja feature the template corpus uses, with the templates that use it.

    python3 scan_features.py              # markdown report on stdout
    python3 scan_features.py --json       # machine-readable

Two independent scans:
1. jinja2's own parser (same environment as render_reference.py): every AST node type, filter,
   test, method call (x.name(...)), attribute of `loop`, global function, operator, literal kind.
2. Raw-text regexes over the sources (what a grep would find): whitespace-control markers,
   statement keywords, `| name`, `is [not] name`, `.name(`, string-literal escape sequences.
Anything found by (2) but not by (1) is reported, so the list can't silently miss a feature.
"""

import argparse
import collections
import json
import os
import re
import sys

import jinja2
from jinja2 import nodes

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_reference as rr  # noqa: E402

BINOPS = {nodes.Add: "+", nodes.Sub: "-", nodes.Mul: "*", nodes.Div: "/", nodes.FloorDiv: "//",
          nodes.Mod: "%", nodes.Pow: "**", nodes.Concat: "~", nodes.And: "and", nodes.Or: "or"}
UNOPS = {nodes.Not: "not", nodes.Neg: "unary -", nodes.Pos: "unary +"}
CMP = {"eq": "==", "ne": "!=", "lt": "<", "lteq": "<=", "gt": ">", "gteq": ">=", "in": "in", "notin": "not in"}


def ast_features(src, env):
    feats = set()
    tree = env.parse(src)
    macro_names = {m.name for m in tree.find_all(nodes.Macro)}

    def add(kind, name):
        feats.add((kind, name))

    for node in tree.find_all(nodes.Node):
        t = type(node)
        if isinstance(node, nodes.For):
            add("statement", "for")
            if node.else_:
                add("statement", "for ... else")
            if node.test is not None:
                add("statement", "for ... if <cond> (filtered loop)")
            if node.recursive:
                add("statement", "for ... recursive")
            if isinstance(node.target, nodes.Tuple):
                add("statement", "for a, b in ... (tuple unpacking)")
        elif isinstance(node, nodes.If):
            add("statement", "if")
            if node.elif_:
                add("statement", "elif")
            if node.else_:
                add("statement", "else")
        elif isinstance(node, nodes.Assign):
            if isinstance(node.target, nodes.NSRef):
                add("statement", "set ns.attr = ... (namespace attribute assignment)")
            elif isinstance(node.target, nodes.Tuple):
                add("statement", "set a, b = ... (tuple unpacking)")
            else:
                add("statement", "set")
        elif isinstance(node, nodes.AssignBlock):
            add("statement", "set ... endset (block set)")
        elif isinstance(node, nodes.Macro):
            add("statement", "macro")
            if node.defaults:
                add("statement", "macro with default arguments")
        elif isinstance(node, nodes.CallBlock):
            if isinstance(node.call, nodes.Call) and isinstance(node.call.node, nodes.ExtensionAttribute):
                add("statement", "generation (transformers AssistantTracker)")
            else:
                add("statement", "call (call block / caller())")
        elif isinstance(node, nodes.FilterBlock):
            add("statement", "filter ... endfilter (filter block)")
        elif isinstance(node, nodes.With):
            add("statement", "with")
        elif isinstance(node, nodes.Break):
            add("statement", "break (loopcontrols)")
        elif isinstance(node, nodes.Continue):
            add("statement", "continue (loopcontrols)")
        elif isinstance(node, nodes.ExprStmt):
            add("statement", "do")
        elif isinstance(node, (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends, nodes.Block)):
            add("statement", t.__name__.lower())
        elif isinstance(node, nodes.Filter):
            add("filter", node.name + ("(...)" if (node.args or node.kwargs) else ""))
            if node.name in ("select", "reject", "selectattr", "rejectattr"):
                i = 1 if node.name.endswith("attr") else 0
                if len(node.args) > i and isinstance(node.args[i], nodes.Const):
                    add("test", str(node.args[i].value) + "  (named inside " + node.name + ")")
            if node.kwargs:
                add("filter kwargs", node.name + "(" + ", ".join(k.key + "=" for k in node.kwargs) + ")")
        elif isinstance(node, nodes.Test):
            add("test", node.name)
        elif isinstance(node, nodes.Call):
            if isinstance(node.node, nodes.Getattr):
                add("method call", "." + node.node.attr + "()")
            elif isinstance(node.node, nodes.Name):
                if node.node.name in macro_names:
                    add("statement", "macro call (user macro invoked as a function)")
                else:
                    add("function call", node.node.name + "()")
            if node.kwargs:
                add("call syntax", "keyword arguments f(k=v)")
            if node.dyn_args or node.dyn_kwargs:
                add("call syntax", "*args / **kwargs")
        elif isinstance(node, nodes.Getattr):
            if isinstance(node.node, nodes.Name) and node.node.name == "loop":
                add("loop attribute", "loop." + node.attr)
            else:
                add("expression", "attribute access a.b")
        elif isinstance(node, nodes.Getitem):
            if isinstance(node.arg, nodes.Slice):
                s = node.arg
                parts = []
                for p in (s.start, s.stop, s.step):
                    if p is None:
                        parts.append("")
                    elif isinstance(p, nodes.Const):
                        parts.append(str(p.value))
                    elif isinstance(p, nodes.Neg) and isinstance(p.node, nodes.Const):
                        parts.append("-" + str(p.node.value))
                    else:
                        parts.append("expr")
                shape = ":".join(parts) if s.step is not None else ":".join(parts[:2])
                add("slice", "[" + shape + "]")
            elif isinstance(node.arg, nodes.Neg) or (isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, int) and node.arg.value < 0):
                add("subscript", "negative index a[-n]")
            elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
                add("subscript", "a['key']")
            elif isinstance(node.arg, nodes.Const):
                add("subscript", "a[int]")
            else:
                add("subscript", "a[expr]")
        elif t in BINOPS:
            add("operator", BINOPS[t])
        elif t in UNOPS:
            add("operator", UNOPS[t])
        elif isinstance(node, nodes.Compare):
            for op in node.ops:
                add("operator", CMP.get(op.op, op.op))
            if len(node.ops) > 1:
                add("operator", "chained comparison a < b < c")
        elif isinstance(node, nodes.CondExpr):
            add("operator", "inline if: a if c else b" if node.expr2 is not None else "inline if without else: a if c")
        elif isinstance(node, nodes.Const):
            v = node.value
            if v is None:
                add("literal", "none")
            elif isinstance(v, bool):
                add("literal", "true/false")
            elif isinstance(v, int):
                add("literal", "integer")
            elif isinstance(v, float):
                add("literal", "float")
            elif isinstance(v, str):
                add("literal", "string")
        elif isinstance(node, nodes.List):
            add("literal", "list [...]")
        elif isinstance(node, nodes.Dict):
            add("literal", "dict {...}")
        elif isinstance(node, nodes.Tuple) and node.ctx == "load":
            add("literal", "tuple (a, b)")
        elif isinstance(node, nodes.TemplateData):
            pass
    # names read from the render context (heuristic): outside macro bodies, a name that is loaded
    # before any assignment in document order, or whose definedness is probed (`x is defined`).
    def outside_macros(node):
        for child in node.iter_child_nodes():
            if isinstance(child, nodes.Macro):
                continue
            yield child
            yield from outside_macros(child)

    top = list(outside_macros(tree))
    loop_vars = set()
    for f in (n for n in top if isinstance(n, nodes.For)):
        loop_vars.update(n.name for n in ([f.target] if isinstance(f.target, nodes.Name) else f.target.find_all(nodes.Name)))
    first = {}
    for n in top:
        if isinstance(n, nodes.Name):
            first.setdefault(n.name, n.ctx)
    probed = {t.node.name for t in top if isinstance(t, nodes.Test) and t.name == "defined" and isinstance(t.node, nodes.Name)}
    for name, ctx in first.items():
        if name in macro_names or name in loop_vars or name in ("loop", "caller"):
            continue
        if ctx == "load" or name in probed:
            add("global" if name in env.globals else "context variable", name)
    return feats


TAG_RE = re.compile(r"\{%.*?%\}|\{\{.*?\}\}", re.S)
STR_RE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", re.S)


def text_features(src):
    feats = set()
    for m in re.finditer(r"\{%-|-%\}|\{\{-|-\}\}|\{#-|-#\}|\{%\+|\+%\}", src):
        feats.add(("whitespace control", m.group(0)))
    if re.search(r"\{#", src):
        feats.add(("syntax", "comment {# ... #}"))
    for m in re.finditer(r"\{%[-+]?\s*([a-z_]+)", src):
        feats.add(("grep statement keyword", m.group(1)))
    for tag in TAG_RE.findall(src):
        body = STR_RE.sub("''", tag)
        for m in re.finditer(r"\|\s*([A-Za-z_]\w*)", body):
            feats.add(("grep filter", m.group(1)))
        for m in re.finditer(r"\bis\s+(not\s+)?([A-Za-z_]\w*)", body):
            feats.add(("grep test", m.group(2)))
            if m.group(1):
                feats.add(("operator", "is not <test>"))
        for m in re.finditer(r"\b(True|False|None)\b", body):
            feats.add(("literal", "capitalised " + m.group(1) + " (Python spelling)"))
        for m in re.finditer(r"\.([A-Za-z_]\w*)\s*\(", body):
            feats.add(("grep method", "." + m.group(1) + "()"))
        for m in re.finditer(r"\bloop\.([A-Za-z_]\w*)", body):
            feats.add(("grep loop attribute", "loop." + m.group(1)))
        for s in STR_RE.findall(tag):
            for e in re.finditer(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|.)", s, re.S):
                esc = "\\" + e.group(1)
                feats.add(("string escape in literal", repr(esc)[1:-1] if esc[1] in "\n\t" else esc))
            if s.startswith('"'):
                feats.add(("syntax", 'double-quoted string "..."'))
            else:
                feats.add(("syntax", "single-quoted string '...'"))
            if "\n" in s:
                feats.add(("syntax", "raw newline inside a string literal"))
    return feats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = rr.make_env()
    uses = collections.defaultdict(set)
    names = rr.list_files(rr.TEMPLATES_DIR, ".jinja")
    for name in names:
        src = rr.read_text(os.path.join(rr.TEMPLATES_DIR, name))
        for f in ast_features(src, env) | text_features(src):
            uses[f].add(name[: -len(".jinja")])

    # consistency: grep hits must be explained by the parser scan
    ast_filters = {n.split("(")[0] for k, n in uses if k == "filter"}
    ast_tests = {n.split()[0] for k, n in uses if k == "test"}
    ast_methods = {n for k, n in uses if k == "method call"}
    ast_loop = {n for k, n in uses if k == "loop attribute"}
    unexplained = []
    for (k, n) in list(uses):
        if (k == "grep filter" and n not in ast_filters) or (k == "grep test" and n not in ast_tests) \
                or (k == "grep method" and n not in ast_methods) or (k == "grep loop attribute" and n not in ast_loop):
            unexplained.append((k, n))

    if args.json:
        out = {f"{k}: {n}": sorted(v) for (k, n), v in sorted(uses.items())}
        json.dump({"templates": len(names), "features": out, "grep_only": unexplained}, sys.stdout, indent=1)
        print()
        return 0
    order = ["statement", "whitespace control", "syntax", "filter", "filter kwargs", "test", "method call",
             "function call", "global", "loop attribute", "operator", "subscript", "slice", "expression", "literal",
             "call syntax", "string escape in literal", "context variable"]
    print(f"# Jinja features used by the {len(names)} templates (jinja2 {jinja2.__version__})\n")
    print("Generated by `scan_features.py`; count = number of templates using the feature.\n")
    for kind in order:
        items = sorted(((n, v) for (k, n), v in uses.items() if k == kind), key=lambda x: (-len(x[1]), x[0]))
        if not items:
            continue
        print(f"## {kind}\n")
        for n, v in items:
            who = ", ".join(sorted(v)) if len(v) <= 6 else ", ".join(sorted(v)[:6]) + ", ..."
            print(f"- `{n}` ({len(v)}): {who}")
        print()
    print("## grep cross-check\n")
    print("Raw-text grep (`| name`, `is [not] name`, `.name(`, `loop.name`, `{%- keyword`) found nothing the parser scan "
          "missed." if not unexplained else "Found by grep but not by the parser scan: " + ", ".join(f"{k} {n}" for k, n in unexplained))
    kw = sorted(n for (k, n) in uses if k == "grep statement keyword")
    print(f"\nStatement keywords seen after `{{%`: {', '.join(kw)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
