"""An agent-like workload built offline: multi-turn code repair on HumanEval with tool calls and code blocks.

Each HumanEval problem is one user query. The SmolLM2-135M-Instruct target plays a coding agent whose
system prompt asks for the function in a ```python block followed by a
``<tool_call>{"name": "run_tests", ...}</tool_call>``. After every answer a tool turn reports
a failure inside ``<tool_response>...</tool_response>`` and asks for a fix, so later turns revisit the
same code. The tool verdict is synthetic (no generated code is executed): it always fails, quoting
the ``k``-th ``assert`` line of the problem's own test. Every assistant turn is the target's greedy
continuation (``max_new_tokens`` each), so the workload is reproducible; it is cached as JSON with
:func:`benchmarks.common.provenance`.

    python -m benchmarks.drafters.agentspec_workload --out benchmarks/results/agentspec_workload_cpu.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import specdec as sd
from benchmarks.common import provenance, provenance_line, write_json
from specdec.data import humaneval_problems, smollm2_target, smollm2_tokenizer

SYSTEM = (
    "You are a coding agent. Write the complete function in a ```python code block, then test it by calling the tool "
    'exactly like this: <tool_call>{"name": "run_tests", "arguments": {"function": "NAME"}}</tool_call>'
)
# relative to the repository root, where benchmarks run from
DEFAULT_OUT = "benchmarks/results/agentspec_workload_cpu.json"


def failing_assert(test_source: str, k: int) -> str:
    """The ``k``-th (cyclic) ``assert`` line of a HumanEval test, the synthetic tool's failure message.

    Example:
        >>> failing_assert("def check(c):\\n    assert c(1) == 2\\n    assert c(2) == 3\\n", 3)
        'assert c(2) == 3'
    """
    asserts = [line.strip() for line in test_source.splitlines() if line.strip().startswith("assert")]
    if not asserts:
        raise ValueError("test_source: expected at least one assert line, got none")
    return asserts[k % len(asserts)]


def tool_turn(entry_point: str, failure: str) -> str:
    """The user message that carries the synthetic tool response and asks for a fix."""
    payload = json.dumps({"name": "run_tests", "function": entry_point, "passed": False, "failure": failure})
    return (
        f"<tool_response>{payload}</tool_response>\nThe tests failed. Fix the function, show it again, and call run_tests again."
    )


def build(problem_ids: list[int], turns: int, max_new_tokens: int, *, progress: bool = True) -> dict:
    """Generate the workload: per problem, ``turns`` assistant turns; returns the JSON-ready dict.

    Each request records ``query`` (the problem index), ``turn``, ``prompt_ids`` (the chat so far,
    ending where the assistant's answer starts) and ``output_ids`` (the target's greedy answer).
    """
    tokenizer = smollm2_tokenizer()
    target = smollm2_target(progress=progress, max_seq_len=4096)
    problems = humaneval_problems()
    requests = []
    for q in problem_ids:
        problem = problems[q]
        system = SYSTEM.replace("NAME", problem["entry_point"])
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": "Complete this Python function:\n\n" + problem["prompt"]},
        ]
        for turn in range(turns):
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            prompt = tokenizer(text, return_tensors="pt").input_ids
            start = time.perf_counter()
            out = sd.generate(target, prompt, max_new_tokens)
            answer = out.tokens[0]
            if progress:
                print(
                    f"problem {q} turn {turn}: prompt {prompt.shape[1]} tokens, {time.perf_counter() - start:.1f} s", flush=True
                )
            requests.append({"query": q, "turn": turn, "prompt_ids": prompt[0].tolist(), "output_ids": answer.tolist()})
            messages.append({"role": "assistant", "content": tokenizer.decode(answer, skip_special_tokens=True)})
            messages.append({"role": "user", "content": tool_turn(problem["entry_point"], failing_assert(problem["test"], turn))})
    return {
        "workload": "multi-turn code repair on HumanEval, synthetic failing tool verdicts",
        "model": "SmolLM2-135M-Instruct (Q4_1 GGUF dequantised to fp32), greedy",
        "system_prompt": SYSTEM,
        "problem_ids": problem_ids,
        "turns": turns,
        "max_new_tokens": max_new_tokens,
        "requests": requests,
    }


def load_or_build(path: Path, problem_ids: list[int], turns: int, max_new_tokens: int) -> dict:
    """The cached workload at ``path`` if it was built with these settings, else a fresh build written there."""
    if path.exists():
        cached = json.loads(path.read_text())
        if (cached["problem_ids"], cached["turns"], cached["max_new_tokens"]) == (problem_ids, turns, max_new_tokens):
            return cached
    workload = build(problem_ids, turns, max_new_tokens)
    write_json(path, workload, provenance(seed=None))
    return json.loads(path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(DEFAULT_OUT))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    prov = provenance(seed=None)
    print(provenance_line(prov))
    workload = build(args.problems, args.turns, args.max_new_tokens)
    print(write_json(args.out, workload, prov))


if __name__ == "__main__":
    main()
