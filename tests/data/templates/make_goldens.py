#!/usr/bin/python3
"""Generates golden renders of the chat templates in this folder with Python's jinja2, set up the
way Hugging Face transformers renders chat templates (apply_chat_template):

  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[AssistantTracker, jinja2.ext.loopcontrols])
  filters["tojson"]  = json.dumps(x, ensure_ascii=False, indent=, separators=, sort_keys=)
  globals["raise_exception"], globals["strftime_now"] (pinned to FIXED_NOW for determinism)
  render(messages=..., tools=None, documents=None, add_generation_prompt=..., bos_token=..., ...)

Writes <template>.goldens.json (one per template: every conversation below, with its context and
the expected text or error) and snippets.goldens.json (small expression-level templates).
Run from anywhere: /usr/bin/python3 tests/data/templates/make_goldens.py
"""

import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
# Must match kFixedNow in src/template/chat_template_test.cc.
FIXED_NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)


class TemplateRaised(Exception):
    pass


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} tag, without the assistant-mask bookkeeping."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_generation_support")
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise TemplateRaised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, context):
    """Returns {"expected": text} or {"error": message, "raised": bool}."""
    try:
        return {"expected": env.from_string(source).render(**context)}
    except TemplateRaised as e:
        return {"error": str(e), "raised": True}
    except Exception as e:  # noqa: BLE001 - any jinja/Python error is an expected failure
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


# ----------------------------------------------------------------------------- conversations

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.\n",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "description": "Forecast days", "minimum": 1},
            },
            "required": ["location"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web — returns snippets.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        "return": {"type": "string"},
    },
}
CALL = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius", "days": 2, "threshold": 0.5}},
}
CALL_ROME = {
    "id": "call54321",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Rome", "nested": {"list": [1, [2, 3]], "none": None}}},
}
CALL_STR_ARGS = {
    "id": "call67890",
    "type": "function",
    "function": {"name": "search", "arguments": '{"query": "weather in Paris"}'},
}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": '{"temperature": 18.5, "sky": "clear"}'}
TOOL_RESULT_2 = {"role": "tool", "tool_call_id": "call67890", "name": "search", "content": "Sunny all week."}

USER = {"role": "user", "content": "Hello! How are you?"}
SYSTEM = {"role": "system", "content": "You are a terse assistant."}
ASSISTANT = {"role": "assistant", "content": "I am fine, thanks."}
USER2 = {"role": "user", "content": "What is 2 + 2?"}

# (name, messages, tools, extra variables)
CONVERSATIONS = [
    ("single_user", [USER], None, {}),
    ("system_user", [SYSTEM, USER], None, {}),
    ("multi_turn", [USER, ASSISTANT, USER2], None, {}),
    ("system_multi_turn", [SYSTEM, USER, ASSISTANT, USER2], None, {}),
    ("ends_with_assistant", [USER, ASSISTANT], None, {}),
    ("unicode_whitespace", [
        {"role": "system", "content": "  Réponds en français. /no_think\n"},
        {"role": "user", "content": "\n  Grüße 👋 — \"quoted\" \\ back\\slash\ttab  \n"},
    ], None, {}),
    ("thinking_history", [
        USER,
        {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHi there!"},
        USER2,
    ], None, {}),
    ("reasoning_content", [
        USER,
        {"role": "assistant", "content": "Hi there!", "reasoning_content": "Greeting detected."},
        USER2,
        {"role": "assistant", "content": "4", "reasoning_content": "2 + 2 = 4."},
    ], None, {}),
    ("enable_thinking_false", [SYSTEM, USER], None, {"enable_thinking": False}),
    ("enable_thinking_true", [USER, ASSISTANT, USER2], None, {"enable_thinking": True}),
    ("thinking_true", [USER], None, {"thinking": True}),
    ("tools_defined_no_calls", [SYSTEM, USER], [WEATHER_TOOL, SEARCH_TOOL], {}),
    ("tool_call_round_trip", [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        TOOL_RESULT,
        {"role": "assistant", "content": "It is 18.5 °C and clear."},
        {"role": "user", "content": "Thanks"},
    ], [WEATHER_TOOL], {}),
    ("tool_call_pending", [
        SYSTEM,
        {"role": "user", "content": "Weather in Paris, and search news?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL, CALL_STR_ARGS]},
        TOOL_RESULT,
        TOOL_RESULT_2,
    ], [WEATHER_TOOL, SEARCH_TOOL], {}),
    ("tool_call_single_no_tools_var", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        TOOL_RESULT,
    ], None, {}),
    ("tool_calls_parallel", [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [CALL, CALL_ROME]},
        TOOL_RESULT,
        dict(TOOL_RESULT, tool_call_id="call54321", content='{"temperature": 21}'),
    ], [WEATHER_TOOL], {}),
    ("tool_call_with_reasoning", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Need the tool.", "tool_calls": [CALL]},
        TOOL_RESULT,
    ], [WEATHER_TOOL], {"enable_thinking": True}),
    ("template_syntax_in_content", [
        {"role": "user", "content": "Explain {{ messages }} and {% if x %} and {# c #} literally."},
    ], None, {}),
    ("llama_builtin_tools", [
        {"role": "user", "content": "Search for llamas"},
    ], [WEATHER_TOOL], {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]}),
    ("llama_tools_in_system", [SYSTEM, USER], [WEATHER_TOOL], {"tools_in_user_message": False, "date_string": "01 Jan 2025"}),
    ("custom_vars", [USER], None, {"custom_tools": [SEARCH_TOOL]}),
    # Error paths: templates that validate the conversation raise here.
    ("roles_not_alternating", [USER, USER2], None, {}),
    ("leading_assistant", [ASSISTANT, USER], None, {}),
    ("bad_tool_call_id", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [dict(CALL, id="short")]},
    ], [WEATHER_TOOL], {}),
    ("empty_messages", [], None, {}),
]

TOKENS = {
    "meta-llama": ("<|begin_of_text|>", "<|eot_id|>"),
    "Qwen": ("", "<|im_end|>"),
    "HuggingFaceTB": ("", "<|im_end|>"),
    "google": ("<bos>", "<eos>"),
    "mistralai": ("<s>", "</s>"),
    "microsoft": ("<s>", "<|endoftext|>"),
    "deepseek": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
}


def tokens_for(filename):
    for prefix, toks in TOKENS.items():
        if filename.startswith(prefix):
            return toks
    raise KeyError(filename)


def template_cases(env, filename, source):
    bos, eos = tokens_for(filename)
    cases = []
    for name, messages, tools, extra in CONVERSATIONS:
        for agp in (True, False):
            context = {
                "messages": messages,
                "tools": tools,
                "documents": None,
                "add_generation_prompt": agp,
                "bos_token": bos,
                "eos_token": eos,
            }
            context.update(extra)
            case = {"name": f"{name}{'' if agp else '_no_gen'}", "context": context}
            case.update(render(env, source, context))
            cases.append(case)
    return cases


# ------------------------------------------------------------------------------- snippets
# (template, context). Each checks one interpreter behaviour against jinja2.
SNIPPETS = [
    # whitespace control, trim_blocks / lstrip_blocks
    ("a\n  {% if true %}\n  x\n  {% endif %}\nb", {}),
    ("a  {#- c #}  b {{- 1 -}}  c", {}),
    ("a\n  {# c #}\nb\n", {}),
    ("{% if true %}   {% if true %}z{% endif %}{% endif %}", {}),
    ("a {% if true %}\n  x {% endif +%}\ny", {}),
    ("  {%- if true %}a{% endif %}\n\n", {}),
    ("x\n\t {% raw %}{{ a }}{% endraw %}\n", {}),
    ("{{ 1 }}\n  {% if true %}z{% endif %}", {}),
    ("line1\r\nline2\r\n{% if true %}\r\nx{% endif %}", {}),
    ("{%+ if true %}y{% endif %}|  {%+ if true %}y{% endif %}", {}),
    # literals and formatting
    ("{{ [1, 'a', none, true, 1.5, {'k': \"v'\"}] }}", {}),
    ("{{ 1e20 }} {{ 1.0 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1e16 }} {{ 123456789012345678.0 }} {{ 0.1 + 0.2 }} {{ -2.5 }}", {}),
    ("{{ 'a' 'b' }}{{ 1_000 }}{{ \"\\u00e9\\x41\\n|\\q\" }}", {}),
    ("{{ (1, 2) }}{{ (1,) }}{{ () }}", {}),
    ("{{ x }}|{{ y }}|{{ z }}", {"x": None, "y": True, "z": {"a": [1, 2.0, "é\n"]}}),
    ("{{ \"it's\" }}|{{ [\"it's\", 'say \"hi\"', 'both \\' \"'] }}", {}),
    # arithmetic and comparisons
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ 6 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 'a' * 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", {}),
    ("{{ 1 == 1.0 }} {{ true == 1 }} {{ [1, 2] == [1, 2] }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 3 >= 3.0 }}", {}),
    ("{{ true + 1 }} {{ 1 + 2.5 }} {{ 'a' ~ 1 ~ none ~ u }} {{ [1] + [2] }} {{ -x }} {{ +x }}", {"x": 3}),
    ("{{ '1' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ u + 1 }}", {}),
    ("{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'x' not in 'abc' }} {{ 'a' in u }}", {}),
    ("{{ 1 in 'abc' }}", {}),
    ("{{ 'a' in none }}", {}),
    ("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ not 0 }} {{ not 'a' == 'a' }}", {}),
    ("{{ 'yes' if x else 'no' }}|{{ 'yes' if not x }}|{{ 1 if x else 2 if y else 3 }}", {"x": 0, "y": 1}),
    # undefined
    ("{{ x.a }}|{{ y.b }}|{{ z[5] }}|{{ 'abc'[5] }}|{{ d.missing }}|{{ u }}", {"x": None, "y": "str", "z": [1], "d": {}}),
    ("{{ x.a.b }}", {}),
    ("{{ d.missing.deeper }}", {"d": {}}),
    ("{{ u|length }}|{{ u|list }}|{{ u|join(',') }}|{{ u|first }}|{{ u|string }}|{{ u|upper }}|{{ u|items|list }}|{% for i in u %}x{% endfor %}", {}),
    ("{{ u == u }}|{{ u is none }}|{{ u is defined }}|{{ u is undefined }}|{{ none is defined }}", {}),
    ("{{ u|tojson }}", {}),
    ("{{ u() }}", {}),
    # tests
    ("\n".join(
        f"{t}: {{{{ [u is {t}, none is {t}, {{}} is {t}, 's' is {t}, 1 is {t}, true is {t}, [] is {t}, 1.5 is {t}, "
        f"false is {t}, x is {t}, f is {t}, ns is {t}, (1,) is {t}, u is not {t}] }}}}"
        for t in ["iterable", "sequence", "mapping", "string", "number", "integer", "float", "boolean", "none",
                  "callable", "true", "false", "defined", "undefined", "lower", "upper", "escaped"]),
     {"x": 0}),
    ("{% set ns = namespace() %}{% macro f() %}{% endmacro %}{{ [ns is mapping, ns is iterable, f is callable, "
     "range is callable, 'a'.upper is callable, ns is defined] }}", {}),
    ("{{ 3 is divisibleby 3 }} {{ 3 is odd }} {{ 4 is even }} {{ 'a' is lower }} {{ 'A' is upper }} {{ 2 is in [1, 2] }} {{ 1 is equalto 1 }} {{ 1 is eq 2 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is gt 1 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ none is sameas none }} {{ x is sameas x }} {{ 'upper' is filter }} {{ 'odd' is test }}", {"x": [1]}),
    # filters
    ("{{ '  hi  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ none|trim }}|{{ '\u00a0hi\u2003'|trim }}|{{ 5|string }}|{{ [1, 'a']|string }}", {}),
    ("{{ 'abc'|length }}|{{ 'héllo'|length }}|{{ [1, 2]|count }}|{{ {'a': 1}|length }}", {}),
    ("{{ 5|length }}", {}),
    ("{{ 'hello World'|capitalize }}|{{ ' hello wORLD-foo (bar'|title }}|{{ 'Ab'|upper }}{{ 'Ab'|lower }}|{{ 'éa'|upper }}", {}),
    ("{{ [3, 1, 2]|first }}{{ [3, 1, 2]|last }}{{ 'abc'|first }}{{ 'abc'|last }}{{ {'a': 1}|first }}|{{ []|first }}|", {}),
    ("{{ ['a', 'b']|join }}|{{ ['a', 1, none]|join(', ') }}|{{ [{'n': 'x'}, {'n': 'y'}]|join('-', attribute='n') }}", {}),
    ("{{ u|default('d') }}|{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ 0|d('z', boolean=true) }}|{{ 'v'|default('d') }}", {}),
    ("{{ {'b': 1, 'a': [1, 2]}|items|list }}|{% for k, v in {'x': 1, 'y': 2}|items %}{{ k }}={{ v }};{% endfor %}|{{ {'b': 1, 'a': 2}|dictsort }}", {}),
    ("{{ 'abc'|list }}|{{ {'a': 1, 'b': 2}|list }}|{{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{{ range(5, 0, -2)|list }}", {}),
    ("{{ 'a-b-c'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'ab'|replace('', '.') }}", {}),
    ("{{ 3.7|int }}|{{ '3.7'|int }}|{{ 'x'|int }}|{{ ' 42 '|int }}|{{ '4'|float }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 7|round }}|{{ 2.1|round(0, 'ceil') }}|{{ -3|abs }}", {}),
    ("{{ [3, 1, 2]|sort }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ ['b', 'A', 'c']|sort }}|{{ [{'n': 2}, {'n': 1}]|sort(attribute='n') }}|{{ [3, 1, 2]|max }}|{{ [3, 1, 2]|min }}|{{ [1, 2, 2, 1]|unique|list }}|{{ [1, 2.5]|sum }}|{{ [1, 2]|reverse|list }}|{{ 'abc'|reverse }}", {}),
    ("{{ 'x'|indent(2) }}|{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(width='> ', blank=true) }}", {}),
    ("{{ [1, 2]|map('string')|list }}|{{ [{'a': 1}, {'a': 2}, {}]|map(attribute='a', default=0)|list }}|{{ ['a', 'b']|map('upper')|join }}", {}),
    ("{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3]|reject('odd')|list }}|{{ [0, 1, '', 'a']|select|list }}|{{ [1, 5, 9]|select('gt', 4)|list }}", {}),
    ("{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}|{{ msgs|rejectattr('role', 'equalto', 'user')|map(attribute='content')|list }}|{{ msgs|selectattr('flag')|list }}", {
        "msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "flag": True}, {"role": "user", "content": "c"}]}),
    ("{{ '<a href=\"x\">&\\'</a>'|e }}|{{ '<a>'|safe }}|{{ '<a>'|escape|length }}", {}),
    ("{{ 'one two  three'|wordcount }}|{{ x|attr('a') }}", {"x": {"a": 5}}),
    ("{% filter upper %}hello {{ name }}{% endfilter %}", {"name": "bob"}),
    # tojson as transformers defines it
    ("{{ x|tojson }}", {"x": {"b": [1, 2.5, None, True], "a": "é\"\\\n\t\u0001/<>&'", "c": {}, "d": [], "e": 1e100, "f": -0.0}}),
    ("{{ x|tojson(indent=2) }}\n{{ x|tojson(ensure_ascii=true) }}\n{{ x|tojson(sort_keys=true) }}\n{{ x|tojson(separators=(',', ':')) }}", {"x": {"z": "日本 🙂", "a": [1, {"k": []}], "m": {"n": {}}}}),
    ("{{ 'abc'|tojson }}{{ 5|tojson }}{{ none|tojson }}{{ 1.0|tojson }}{{ (1, 2)|tojson }}", {}),
    # string methods
    ("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'a b c'.rsplit(' ', 1) }}{{ ' a b  c '.rsplit(None, 1) }}{{ 'a</think>b</think>c'.split('</think>')[-1] }}", {}),
    ("{{ 'hello world-foo'.title() }}|{{ 'aBC'.capitalize() }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}", {}),
    ("{{ 'x'.startswith(('a', 'x')) }}{{ 'abc'.endswith('bc') }}{{ 'abcabc'.find('c') }}{{ 'abcabc'.rfind('c') }}{{ 'héllo'.find('l') }}{{ 'abcabc'.count('b') }}{{ ','.join(['a', 'b']) }}", {}),
    ("{{ 'abc'.strip('ac') }}|{{ '  x '.lstrip() }}|{{ '  x '.rstrip() }}|{{ '\n\nx\n'.strip('\n') }}|{{ 'xyx'.lstrip('x') }}", {}),
    ("{{ 'a\nb\r\nc'.splitlines() }}{{ '123'.isdigit() }}{{ 'ab'.isalpha() }}{{ '  '.isspace() }}", {}),
    ("{{ 'héllo wörld'[1] }}|{{ 'héllo'[-1] }}|{{ 'héllo'[1:3] }}|{{ 'abcdef'[::2] }}|{{ 'abc'[::-1] }}|{{ [1, 2, 3, 4][1:] }}|{{ [1, 2, 3, 4][:-1] }}|{{ [1, 2, 3, 4][::-1] }}|{{ [1, 2, 3][-2:] }}|{{ [1, 2, 3][5:] }}|{{ [1, 2, 3, 4, 5][4:0:-2] }}", {}),
    # dict methods and attribute resolution
    ("{{ d.get('a') }}{{ d.get('b', 5) }}{{ d.get('b') }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}", {"d": {"a": 1}}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{{ d['items'] }}|{{ d.content }}|{{ d['content'] }}", {"d": {"items": 1, "content": "c"}}),
    ("{{ [1, 2].append(3) }}", {}),
    # loops
    ("{% for x in [10, 20, 30] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a', 'b') }};{% endfor %}", {}),
    ("{% for x in [1, 2, 3, 4, 5] if x is odd %}{{ x }}{{ loop.index }}{{ loop.last }},{% else %}empty{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %}|{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", {}),
    ("{% for i in [1, 2] %}{% for j in [3, 4] %}{{ loop.index }}{{ i }}{{ j }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("{% for x in 5 %}{% endfor %}", {}),
    # scoping
    ("{% for i in [1, 2, 3] %}{{ x }}{% set x = i %}{% endfor %}|{{ x }}", {"x": 0}),
    ("{% set x = 5 %}{% for i in [1, 2, 3] %}{% if i == 2 %}{% set x = i %}{% endif %}{{ x }}{% endfor %}|{{ x }}", {}),
    ("{% for i in [1, 2, 3] %}{% if i == 1 %}{% set x = 9 %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% set ns = namespace(n=0, items=[]) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}|{% set ns2 = namespace() %}{% set ns2.a = 'x' %}{{ ns2.a }}|{{ ns.missing }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set c = [1, 2] %}{{ c }}|{% set t %}block {{ a }}{% endset %}{{ t }}", {}),
    ("{% set messages = messages[1:] %}{{ messages|length }}", {"messages": [1, 2, 3]}),
    ("{% set x.y = 1 %}", {"x": {}}),
    ("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    # macros
    ("{% macro m(a, b=2) %}[{{ a }}{{ b }}{{ g }}]{% endmacro %}{% set g = 7 %}{{ m(1) }}{{ m(1, b=3) }}{{ m(b=4, a=5) }}{{ m() }}", {}),
    ("{% macro outer(x) %}<{{ caller(x * 2) }}>{% endmacro %}{% call(v) outer(3) %}v={{ v }}{% endcall %}", {}),
    ("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", {}),
    ("{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}", {}),
    # printf-style formatting
    ("{{ '%s and %s'|format(1, 'b') }}|{{ '%d%%'|format(42.9) }}|{{ '%5.2f|%-4s|%04d|%x|%r'|format(3.14159, 'ab', 7, 255, 'q') }}|{{ '%(a)s-%(b)d'|format(a='x', b=2) }}", {}),
    ("{{ 'Hello %s!' % name }}|{{ '%s=%s' % ('k', [1]) }}|{{ '%.3s' % 'abcdef' }}|{{ '%s' % none }}", {"name": "Wörld"}),
    ("{{ '%s %s' % ('only one',) }}", {}),
    # patterns from other real templates (gemma4, GLM, Mistral Small, Command-R)
    ("{%- macro fmt(argument, escape_keys=True) -%}{%- if argument is string -%}{{- '<' + argument + '>' -}}"
     "{%- elif argument is boolean -%}{{- 'true' if argument else 'false' -}}{%- elif argument is mapping -%}{{- '{' -}}"
     "{%- for key, value in argument | dictsort -%}{%- if not loop.first %},{% endif -%}{{- key if not escape_keys else '<' + key + '>' -}}"
     ":{{- fmt(value, escape_keys=escape_keys) -}}{%- endfor -%}{{- '}' -}}{%- elif argument is sequence -%}[{%- for item in argument -%}"
     "{{- fmt(item, escape_keys=escape_keys) -}}{{- ',' if not loop.last -}}{%- endfor -%}]{%- else -%}{{- argument -}}{%- endif -%}{%- endmacro -%}"
     "{{ fmt(args) }}|{{ fmt(args, escape_keys=False) }}|{{ fmt(args, False) }}",
     {"args": {"z": [1, "two", True, None, 2.5], "a": {"y": False, "b": "s"}}}),
    ("{{ ['string', 'Object']|map('upper')|list }}|{{ x['required']|default([]) }}|{{ 'a' + x['name']|default('unknown') + 'b' }}|{{ not enable_thinking|default(false) }}|{% set ns = namespace(prev=None) %}{{ ns.prev }}", {"x": {}}),
    ("{% set l = [] %}{% for m in ms %}{% if m != 2 %}{% set l = l + [m] %}{% endif %}{% endfor %}{{ l }}|{% set acc = [] %}{% for m in ms %}{% set acc = acc + [m] %}{% endfor %}{{ acc }}", {"ms": [1, 2, 3]}),
    ("{% for m in ms %}{% for later in ms[loop.index0 + 1:] %}{% if later > 2 %}{% break %}{% endif %}{{ later }}{% endfor %};{% endfor %}", {"ms": [1, 2, 3, 4]}),
    ("{{ m.get('tool_calls') }}|{{ m.get('role') }}|{{ (m.tool_calls or {}).items()|list }}|{{ m.role|lower == 'user' }}|{{ 'abcdefghijk'[-9:] }}", {"m": {"role": "USER"}}),
    ("{{ 'Paris.\\\nLine two' }}|{{ \"tab\\there\" }}", {}),
    ("{{ '{} and {}'.format(1, 'b') }}|{{ '{1}{0}{{x}}'.format('a', 'b') }}|{{ '{name}={v!r}'.format(name='k', v='s') }}", {}),
    # edge semantics found by differential fuzzing against jinja2
    ("{{ -1.5|wordcount }}|{{ 1 // 0.1 }}|{{ -7.5 // 2 }}|{{ 0.0 % -1.5 }}|{{ (1, 'x') is lower }}|{{ ' ' is lower }}|{{ 2.5 is odd }}|{{ 3.0 is odd }}"
     "|{{ 0|select('odd')|list }}|{{ false|map('string')|list }}|{{ [u, none] }}|{{ ' x ' % [3] }}|{{ {'a': 1, 'b': 2}|last }}", {}),
    ("{{ u|int }}", {}),
    ("{{ [] in {'a': 1} }}", {}),
    ("{{ [1] < (1,) }}", {}),
    ("{{ 'x'|indent }}{{ 5|indent }}", {}),
    # globals
    ("{{ raise_exception('custom failure: ' ~ 42) }}", {}),
    ("before{% if true %}{{ raise_exception('inside if') }}{% endif %}", {}),
    ("{{ strftime_now('%Y-%m-%d %H:%M:%S %d %b %Y %A %B %j') }}", {}),
    ("{{ dict(a=1, b='x') }}{{ namespace(a=1).a }}", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
]


def write_goldens(path, header, cases):
    """One case per line keeps the files small and their diffs readable."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for key, value in header.items():
            f.write(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},\n")
        f.write('"cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")


def main():
    env = make_env()
    print(f"jinja2 {jinja2.__version__}, python {sys.version.split()[0]}")
    for filename in sorted(os.listdir(HERE)):
        if not filename.endswith(".jinja"):
            continue
        with open(os.path.join(HERE, filename), encoding="utf-8") as f:
            source = f.read()
        cases = template_cases(env, filename, source)
        out = os.path.join(HERE, filename[: -len(".jinja")] + ".goldens.json")
        write_goldens(out, {"template": filename}, cases)
        ok = sum("expected" in c for c in cases)
        print(f"{filename}: {len(cases)} cases ({ok} render, {len(cases) - ok} error)")
    snippets = []
    for source, context in SNIPPETS:
        case = {"template": source, "context": context}
        case.update(render(env, source, context))
        snippets.append(case)
    write_goldens(os.path.join(HERE, "snippets.goldens.json"), {}, snippets)
    print(f"snippets: {len(snippets)} cases")


if __name__ == "__main__":
    main()
