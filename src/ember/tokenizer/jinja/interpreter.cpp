// Executes a parsed template: statements append to an output string, expressions evaluate to
// Values. Scopes follow Jinja: a for loop's body and a macro's body get their own scope (a
// `set` inside does not leak out, which is why templates use namespace()); if blocks do not.
#include <cmath>
#include <cstdint>
#include <ctime>

#include "ember/core/error.h"
#include "ember/tokenizer/jinja/builtins.h"
#include "ember/tokenizer/jinja/parser.h"
#include "ember/tokenizer/jinja/template.h"

namespace ember::jinja {

namespace {

[[noreturn]] void fail(int line, const std::string& what) {
  throw Error(ErrorKind::InvalidArgument,
              "chat template: line " + std::to_string(line) + ": " + what);
}

class Scope {
 public:
  explicit Scope(const Scope* parent) : parent_(parent) {}
  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent_) {
      for (const auto& [k, v] : s->vars_) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [k, v] : vars_) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars_.emplace_back(name, std::move(value));
  }

 private:
  std::vector<std::pair<std::string, Value>> vars_;
  const Scope* parent_;
};

enum class Flow { Normal, Break, Continue };

constexpr int kMaxCallDepth = 200;

class Interpreter {
 public:
  Interpreter(const Value& variables, const RenderOptions& options)
      : root_(nullptr), max_loop_bodies_(options.max_loop_bodies) {
    install_globals(options);
    if (variables.is_dict()) {
      for (const auto& [k, v] : variables.as_dict().entries) root_.set(k, v);
    }
  }

  std::string run(const Body& body) {
    std::string out;
    exec(body, root_, out);
    return out;
  }

 private:
  void install_globals(const RenderOptions& options) {
    root_.set("raise_exception",
              Value(Callable{"raise_exception", [](const CallArgs& a) -> Value {
                               const Value* msg = a.get(0, "message");
                               throw Error(
                                   ErrorKind::InvalidArgument,
                                   "chat template raised: " + (msg ? msg->str() : std::string()));
                             }}));
    std::tm now{};
    if (options.now) {
      now = *options.now;
    } else {
      std::time_t t = std::time(nullptr);
      localtime_r(&t, &now);
    }
    root_.set("strftime_now",
              Value(Callable{"strftime_now", [now](const CallArgs& a) -> Value {
                               const Value* fmt = a.get(0, "format");
                               if (!fmt || !fmt->is_string()) {
                                 throw Error(ErrorKind::InvalidArgument,
                                             "chat template: strftime_now needs a format");
                               }
                               char buf[256];
                               size_t n =
                                   std::strftime(buf, sizeof buf, fmt->as_string().c_str(), &now);
                               return Value(std::string(buf, n));
                             }}));
    root_.set("range", Value(Callable{"range", [](const CallArgs& a) -> Value {
                                        int64_t start = 0, stop = 0, step = 1;
                                        if (a.positional.size() == 1) {
                                          stop = a.positional[0].as_int();
                                        } else if (a.positional.size() >= 2) {
                                          start = a.positional[0].as_int();
                                          stop = a.positional[1].as_int();
                                          if (a.positional.size() > 2)
                                            step = a.positional[2].as_int();
                                        }
                                        if (step == 0)
                                          throw Error(ErrorKind::InvalidArgument,
                                                      "chat template: range() step is 0");
                                        List items;
                                        for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
                                          if (items.size() > 1'000'000)
                                            throw Error(ErrorKind::InvalidArgument,
                                                        "chat template: range() too long");
                                          items.push_back(Value(i));
                                          if (__builtin_add_overflow(i, step, &i))
                                            break;  // past int64: done
                                        }
                                        return Value(std::move(items));
                                      }}));
    auto make_dict = [](bool is_namespace) {
      return [is_namespace](const CallArgs& a) -> Value {
        Dict d;
        d.is_namespace = is_namespace;
        for (const Value& p : a.positional) {
          if (p.is_dict()) {
            for (const auto& [k, v] : p.as_dict().entries) d.set(k, v);
          }
        }
        for (const auto& [k, v] : a.keyword) d.set(k, v);
        return Value(std::move(d));
      };
    };
    root_.set("namespace", Value(Callable{"namespace", make_dict(true)}));
    root_.set("dict", Value(Callable{"dict", make_dict(false)}));
  }

  // ---- statements ----

  Flow exec(const Body& body, Scope& scope, std::string& out) {
    for (const StmtPtr& s : body) {
      Flow f = exec_stmt(*s, scope, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec_stmt(const Stmt& s, Scope& scope, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text:
        out += s.text;
        return Flow::Normal;
      case Stmt::Kind::Print:
        out += eval(*s.expr, scope).str();
        return Flow::Normal;
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.conditions.size(); ++i) {
          if (eval(*s.conditions[i], scope).truthy()) return exec(s.bodies[i], scope, out);
        }
        return exec(s.else_body, scope, out);
      case Stmt::Kind::For:
        exec_for(s, scope, out);
        return Flow::Normal;
      case Stmt::Kind::Set:
        exec_set(s, scope);
        return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        std::string captured;
        Scope inner(&scope);
        exec(s.body, inner, captured);
        Value v(std::move(captured));
        if (s.expr) v = eval_filter_chain(*s.expr, v, scope);
        scope.set(s.targets[0], std::move(v));
        return Flow::Normal;
      }
      case Stmt::Kind::Macro:
        scope.set(s.text, make_macro(s, nullptr));
        return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        // {% call m(args) %}body{% endcall %}: m(args, caller=<body as a macro>).
        Value callee = eval(*s.expr->object, scope);
        if (!callee.is_callable()) fail(s.line, "{% call %} needs a macro");
        CallArgs args = eval_args(s.expr->args, scope);
        args.keyword.emplace_back("caller", make_macro(s, &scope));
        out += callee.as_callable().call(args).str();
        return Flow::Normal;
      }
      case Stmt::Kind::FilterBlock: {
        std::string captured;
        Flow f = exec(s.body, scope, captured);
        out += eval_filter_chain(*s.expr, Value(std::move(captured)), scope).str();
        return f;
      }
      case Stmt::Kind::Break:
        return Flow::Break;
      case Stmt::Kind::Continue:
        return Flow::Continue;
      case Stmt::Kind::Generation:
        return exec(s.body, scope, out);
    }
    return Flow::Normal;
  }

  void assign(Scope& scope, const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) {
      scope.set(targets[0], v);
      return;
    }
    List items = iterate(v);
    if (items.size() != targets.size()) {
      fail(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                     std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
  }

  void exec_set(const Stmt& s, Scope& scope) {
    Value v = eval(*s.expr, scope);
    if (s.attribute.empty()) {
      assign(scope, s.targets, v, s.line);
      return;
    }
    const Value* ns = scope.lookup(s.targets[0]);
    if (!ns || !ns->is_dict() || !ns->as_dict().is_namespace) {
      fail(s.line, "cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
    }
    ns->mutable_dict().set(s.attribute, std::move(v));
  }

  void exec_for(const Stmt& s, Scope& scope, std::string& out) {
    if (s.recursive) fail(s.line, "recursive for loops are not supported");
    Value iterable = eval(*s.expr, scope);
    if (!iterable.is_list() && !iterable.is_dict() && !iterable.is_string() &&
        !iterable.is_undefined()) {
      fail(s.line, std::string("'") + iterable.type_name() + "' object is not iterable");
    }
    List all = iterate(iterable);
    List items;
    if (s.condition) {
      for (const Value& item : all) {
        Scope probe(&scope);
        assign(probe, s.targets, item, s.line);
        if (eval(*s.condition, probe).truthy()) items.push_back(item);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) {
      exec(s.else_body, scope, out);
      return;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      // Nested loops over long ranges would render for hours: a chat template that runs this
      // many loop bodies in one render is refused.
      if (++loop_bodies_ > max_loop_bodies_) {
        fail(s.line,
             "the template ran more than " + std::to_string(max_loop_bodies_) + " loop iterations");
      }
      Scope body(&scope);
      assign(body, s.targets, items[i], s.line);
      body.set("loop", loop_value(items, i));
      Flow f = exec(s.body, body, out);
      if (f == Flow::Break) break;
    }
  }

  static Value loop_value(const List& items, int64_t i) {
    const int64_t n = static_cast<int64_t>(items.size());
    Dict loop;
    loop.set("index", Value(i + 1));
    loop.set("index0", Value(i));
    loop.set("revindex", Value(n - i));
    loop.set("revindex0", Value(n - i - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == n - 1));
    loop.set("length", Value(n));
    loop.set("depth", Value(1));
    loop.set("depth0", Value(0));
    loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("previtem"));
    loop.set("nextitem",
             i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("nextitem"));
    loop.set("cycle",
             Value(Callable{"cycle", [i](const CallArgs& a) -> Value {
                              if (a.positional.empty()) {
                                throw Error(ErrorKind::InvalidArgument,
                                            "chat template: loop.cycle() needs values");
                              }
                              return a.positional[static_cast<size_t>(i) % a.positional.size()];
                            }}));
    return Value(std::move(loop));
  }

  // A macro (or a call block's `caller`) as a callable; `closure` is the scope a caller's body
  // sees, null for macros (which see the template's top level).
  Value make_macro(const Stmt& s, const Scope* closure) {
    const Scope* parent = closure ? closure : &root_;
    return Value(Callable{s.text, [this, &s, parent](const CallArgs& a) -> Value {
                            if (++depth_ > kMaxCallDepth) {
                              --depth_;
                              fail(s.line, "macro calls nested too deeply");
                            }
                            Scope local(parent);
                            for (size_t i = 0; i < s.params.size(); ++i) {
                              const Value* arg = a.get(i, s.params[i].name);
                              if (arg) {
                                local.set(s.params[i].name, *arg);
                              } else if (s.params[i].default_value) {
                                local.set(s.params[i].name,
                                          eval(*s.params[i].default_value, local));
                              } else {
                                local.set(s.params[i].name, Value::undefined(s.params[i].name));
                              }
                            }
                            if (const Value* caller = a.get(SIZE_MAX, "caller"))
                              local.set("caller", *caller);
                            std::string out;
                            try {
                              exec(s.body, local, out);
                            } catch (...) {
                              --depth_;
                              throw;
                            }
                            --depth_;
                            return Value(std::move(out));
                          }});
  }

  // ---- expressions ----

  Value eval_filter_chain(const Expr& e, const Value& input, Scope& scope) {
    Value in = e.object ? eval_filter_chain(*e.object, input, scope) : input;
    return apply_filter(e.name, in, eval_args(e.args, scope));
  }

  CallArgs eval_args(const CallSyntax& syntax, Scope& scope) {
    CallArgs args;
    for (const ExprPtr& p : syntax.positional) args.positional.push_back(eval(*p, scope));
    for (const auto& [k, v] : syntax.keyword) args.keyword.emplace_back(k, eval(*v, scope));
    return args;
  }

  Value eval(const Expr& e, Scope& scope) {
    try {
      return eval_inner(e, scope);
    } catch (const Error& err) {
      std::string what = err.what();
      if (what.rfind("chat template", 0) == 0) throw;
      fail(e.line, what);
    }
  }

  Value eval_inner(const Expr& e, Scope& scope) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.value;
      case Expr::Kind::Name: {
        const Value* v = scope.lookup(e.name);
        return v ? *v : Value::undefined(e.name);
      }
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        List items;
        for (const ExprPtr& item : e.items) items.push_back(eval(*item, scope));
        return e.kind == Expr::Kind::Tuple ? Value::tuple(std::move(items))
                                           : Value(std::move(items));
      }
      case Expr::Kind::Dict: {
        Dict d;
        for (size_t i = 0; i < e.keys.size(); ++i) {
          Value key = eval(*e.keys[i], scope);
          if (!key.is_string()) fail(e.line, "dict keys must be strings here");
          d.set(key.as_string(), eval(*e.items[i], scope));
        }
        return Value(std::move(d));
      }
      case Expr::Kind::Getattr:
        return get_attribute(eval(*e.object, scope), e.name);
      case Expr::Kind::Getitem:
        return get_item(eval(*e.object, scope), eval(*e.items[0], scope));
      case Expr::Kind::Slice: {
        Value obj = eval(*e.object, scope);
        auto bound = [&](size_t i) -> std::optional<int64_t> {
          if (!e.items[i]) return std::nullopt;
          Value v = eval(*e.items[i], scope);
          if (v.is_none()) return std::nullopt;
          if (!v.is_int() && !v.is_bool()) fail(e.line, "slice indices must be integers");
          return v.as_int();
        };
        return get_slice(obj, bound(0), bound(1), bound(2));
      }
      case Expr::Kind::Call: {
        Value callee = eval(*e.object, scope);
        if (callee.is_undefined()) fail(e.line, "'" + callee.undefined_name() + "' is undefined");
        if (!callee.is_callable()) {
          fail(e.line, std::string("'") + callee.type_name() + "' object is not callable");
        }
        return callee.as_callable().call(eval_args(e.args, scope));
      }
      case Expr::Kind::Filter:
        return apply_filter(e.name, eval(*e.object, scope), eval_args(e.args, scope));
      case Expr::Kind::Test: {
        bool r = apply_test(e.name, eval(*e.object, scope), eval_args(e.args, scope));
        return Value(e.negated ? !r : r);
      }
      case Expr::Kind::Not:
        return Value(!eval(*e.object, scope).truthy());
      case Expr::Kind::Negate:
      case Expr::Kind::Plus: {
        Value v = eval(*e.object, scope);
        if (!v.is_number())
          fail(e.line, std::string("bad operand type for unary -: '") + v.type_name() + "'");
        if (e.kind == Expr::Kind::Plus) return v.is_bool() ? Value(v.as_int()) : v;
        return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
      }
      case Expr::Kind::Binary:
        return eval_binary(e, scope);
      case Expr::Kind::Compare:
        return eval_compare(e, scope);
      case Expr::Kind::Condition:
        if (eval(*e.object, scope).truthy()) return eval(*e.items[0], scope);
        return e.items[1] ? eval(*e.items[1], scope) : Value::undefined("");
    }
    return Value();
  }

  Value eval_compare(const Expr& e, Scope& scope) {
    Value left = eval(*e.object, scope);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      Value right = eval(*e.items[i], scope);
      const std::string& op = e.ops[i];
      bool r;
      if (op == "==") {
        r = values_equal(left, right);
      } else if (op == "!=") {
        r = !values_equal(left, right);
      } else if (op == "<") {
        r = value_less(left, right);
      } else if (op == ">") {
        r = value_less(right, left);
      } else if (op == "<=") {
        r = !value_less(right, left);
      } else if (op == ">=") {
        r = !value_less(left, right);
      } else if (op == "in") {
        r = value_contains(right, left);
      } else {
        r = !value_contains(right, left);
      }
      if (!r) return Value(false);
      left = std::move(right);
    }
    return Value(true);
  }

  Value eval_binary(const Expr& e, Scope& scope);
  static int64_t integer_arithmetic(const std::string& op, int64_t a, int64_t b, int line);

  Scope root_;
  int depth_ = 0;
  const int64_t max_loop_bodies_;
  int64_t loop_bodies_ = 0;
};

[[noreturn]] void operand_error(int line, const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    fail(line, "'" + u.undefined_name() + "' is undefined");
  }
  fail(line, "unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                 b.type_name() + "'");
}

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value(std::move(out));
}

// + - * ** of two integers. Python's integers do not overflow; ours are int64, so a result past
// it is an error (never undefined behaviour), and ** squares its way up (2 ** 10**18 is an
// overflow after a few steps, not a loop of 10**18 multiplications).
int64_t Interpreter::integer_arithmetic(const std::string& op, int64_t a, int64_t b, int line) {
  int64_t r = 0;
  bool overflow = false;
  if (op == "+") {
    overflow = __builtin_add_overflow(a, b, &r);
  } else if (op == "-") {
    overflow = __builtin_sub_overflow(a, b, &r);
  } else if (op == "*") {
    overflow = __builtin_mul_overflow(a, b, &r);
  } else {  // ** with b >= 0
    r = 1;
    int64_t base = a;
    for (int64_t n = b; n > 0 && !overflow; n >>= 1) {
      if (n & 1) overflow = __builtin_mul_overflow(r, base, &r);
      if (n > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
    }
  }
  if (overflow) fail(line, "integer overflow in " + op);
  return r;
}

Value Interpreter::eval_binary(const Expr& e, Scope& scope) {
  const std::string& op = e.name;
  Value a = eval(*e.object, scope);
  if (op == "and") return a.truthy() ? eval(*e.items[0], scope) : a;
  if (op == "or") return a.truthy() ? a : eval(*e.items[0], scope);
  Value b = eval(*e.items[0], scope);
  if (op == "~") return Value(a.str() + b.str());
  if (a.is_number() && b.is_number()) {
    bool floats = a.is_float() || b.is_float();
    if (op == "+" || op == "-" || op == "*" || op == "**") {
      if (floats || (op == "**" && b.as_int() < 0)) {
        const double x = a.as_double(), y = b.as_double();
        return Value(op == "+" ? x + y : op == "-" ? x - y : op == "*" ? x * y : std::pow(x, y));
      }
      return Value(integer_arithmetic(op, a.as_int(), b.as_int(), e.line));
    }
    if (b.as_double() == 0.0) fail(e.line, "division by zero");
    if (op == "/") return Value(a.as_double() / b.as_double());
    if (op == "//") {
      if (floats) return Value(std::floor(a.as_double() / b.as_double()));
      if (a.as_int() == INT64_MIN && b.as_int() == -1) fail(e.line, "integer overflow");
      int64_t q = a.as_int() / b.as_int();
      if ((a.as_int() % b.as_int() != 0) && ((a.as_int() < 0) != (b.as_int() < 0))) --q;
      return Value(q);
    }
    if (op == "%") {
      if (floats) {
        double m = std::fmod(a.as_double(), b.as_double());
        if (m != 0 && ((m < 0) != (b.as_double() < 0))) m += b.as_double();
        return Value(m);
      }
      if (b.as_int() == -1) return Value(int64_t{0});
      int64_t m = a.as_int() % b.as_int();
      if (m != 0 && ((m < 0) != (b.as_int() < 0))) m += b.as_int();
      return Value(m);
    }
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    if (!a.is_markup() && !b.is_markup()) return Value(a.as_string() + b.as_string());
    return Value::markup((a.is_markup() ? a.as_string() : html_escape(a.as_string())) +
                         (b.is_markup() ? b.as_string() : html_escape(b.as_string())));
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    List out = a.as_list();
    out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return Value(std::move(out));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))
    return repeat(a, b.as_int());
  if (op == "*" && (b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))
    return repeat(b, a.as_int());
  if (op == "%" && a.is_string()) {
    CallArgs args;
    args.positional = b.is_list() ? b.as_list() : List{b};
    return apply_filter("format", a, args);
  }
  operand_error(e.line, op, a, b);
}

}  // namespace

Template::Template(std::string_view source)
    : body_(std::make_shared<const Body>(parse_template(source))) {}

std::string Template::render(const Value& variables, const RenderOptions& options) const {
  Interpreter interpreter(variables, options);
  return interpreter.run(*body_);
}

}  // namespace ember::jinja
