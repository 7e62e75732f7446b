"""``generate``: autoregressive and speculative decoding on the same lean runtime.

The loop is :func:`_generate_one`; what surrounds it (prompt forms, argument checks, stops, streaming,
the output) lives in :mod:`specdec.generation`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from specdec.contracts.drafter import Drafter, FinishingDrafter
from specdec.contracts.sampling import SamplingConfig
from specdec.contracts.verifier import RequestScopedVerifier
from specdec.generation import (
    GenerationOutput,
    GenerationStats,
    StopCondition,
    Stream,
    build_output,
    check_decode_args,
    check_proposal_size,
    prepare_requests,
    request_seeds,
)
from specdec.verify.chain import ChainVerifier
from specdec.verify.processors import process_logits
from specdec.verify.sampling import logits_to_probs, sample

__all__ = ["GenerationOutput", "GenerationStats", "generate"]

# On an accelerator, AR decoding looks for EOS only every this many tokens (no host sync per token).
_EOS_CHECK_EVERY = 16


@torch.no_grad()
def generate(
    target,
    input_ids,
    max_new_tokens: int = 256,
    drafter: Drafter | None = None,
    verifier=None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | Sequence[int] | None = None,
    *,
    num_draft_tokens: int = 4,
    eos_token_id: int | Sequence[int] | None = None,
    attention_mask: torch.Tensor | None = None,
    tokenizer=None,
    stop_strings: str | Sequence[str] | None = None,
    streamer=None,
    repetition_penalty: float = 1.0,
    logits_processor: Sequence | None = None,
) -> GenerationOutput:
    """Decode ``max_new_tokens`` per request, autoregressively (``drafter=None``) or speculatively.

    Requests are decoded one after another on the target's batch-1 cache, each exactly as if alone.

    Args:
        target: a :class:`specdec.contracts.Target`.
        input_ids: ``[batch, prompt_len]`` integer prompts; a list of 1-D prompts of any lengths; or, with
            ``tokenizer``, a string or a list of strings.
        max_new_tokens: tokens to generate per request (fewer if a stop comes first).
        drafter: a :class:`specdec.drafters.Drafter`; ``None`` = plain autoregressive decoding.
        verifier: default :class:`specdec.ChainVerifier`.
        temperature, top_p, top_k: the target law; ``temperature=0`` is greedy.
        seed: per-request seeds (an int gives ``seed + row``); ``None`` draws from torch's global RNG.
        num_draft_tokens: the most tokens a drafter may propose per round (a :class:`~specdec.TwoLevelVerifier`
            drafts its second subtree to its own ``budget``; tokens past ``max_new_tokens`` are dropped and not counted).
        eos_token_id: stop a request after emitting any of these ids; ``None`` never stops early.
        attention_mask: ``[batch, prompt_len]``, 1 = real token (transformers' convention). All ones is
            the plain batch; a left-padded row is decoded from its real tokens alone; right padding or
            holes raise ``ValueError`` (pass a list of 1-D prompts instead).
        tokenizer: a transformers tokenizer: text prompts, ``out.text``, ``stop_strings``.
        stop_strings: stop after the token that completes any of them (transformers' semantics).
        streamer: transformers' ``TextStreamer`` (any object with ``put``/``end``) or a callable that
            receives each round's new tokens ``[m]``; see :class:`specdec.generation.Stream`.
        repetition_penalty: transformers' repetition penalty on the target law (1.0 = off).
        logits_processor: transformers ``LogitsProcessor`` objects applied to the target's logits (after
            the repetition penalty, before temperature/top-k/top-p), each verify row with its own prefix.

    Returns:
        :class:`GenerationOutput`: ``tokens [batch, new_tokens]`` (a list when lengths differ or the
        prompts came as a list), ``stats``, ``per_request``, and ``text`` with a tokenizer.

    Example:
        >>> from specdec.testing import tiny_target
        >>> from specdec.drafters import NGramDrafter
        >>> target = tiny_target(seed=0)
        >>> prompt = torch.tensor([[1, 2, 3, 1, 2]])
        >>> ar = generate(target, prompt, max_new_tokens=12)
        >>> spec = generate(target, prompt, max_new_tokens=12, drafter=NGramDrafter())
        >>> torch.equal(ar.tokens, spec.tokens), ar.tokens.shape
        (True, torch.Size([1, 12]))
        >>> out = generate(target, [torch.tensor([1, 2, 3]), torch.tensor([4])], max_new_tokens=5, repetition_penalty=1.3)
        >>> [t.shape[0] for t in out.tokens]
        [5, 5]
    """
    requests = prepare_requests(target, input_ids, attention_mask, tokenizer)
    check_decode_args(target, requests.prompts, max_new_tokens, drafter, num_draft_tokens)
    sampling = SamplingConfig(
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        repetition_penalty=repetition_penalty,
        logits_processor=logits_processor,
    )
    if verifier is not None and drafter is None:
        raise ValueError(
            f"verifier: a {type(verifier).__name__} was given without a drafter; plain AR decoding has no rounds to verify "
            "(pass drafter=...)"
        )
    if isinstance(verifier, type):
        raise TypeError(f"verifier: expected a verifier instance, got the class {verifier.__name__} (pass {verifier.__name__}())")
    if verifier is not None and not callable(getattr(verifier, "verify", None)):
        raise TypeError(f"verifier: expected a verifier with verify() (ChainVerifier, TreeVerifier, ...), got {verifier!r}")
    verifier = verifier if verifier is not None else ChainVerifier()
    stop = StopCondition(eos_token_id, stop_strings, tokenizer, vocab_size=target.vocab_size, device=target.device)
    stream = Stream(streamer) if streamer is not None else None
    outputs, per_request = [], []
    for prompt, row_seed in zip(requests.prompts, request_seeds(seed, len(requests.prompts))):
        generator = None if row_seed is None else torch.Generator(device=target.device).manual_seed(row_seed)
        if isinstance(verifier, RequestScopedVerifier):
            verifier.start_request()
        try:
            tokens, stats = _generate_one(
                target, prompt, max_new_tokens, drafter, verifier, sampling, generator, num_draft_tokens, stop, stream
            )
        finally:
            if isinstance(drafter, FinishingDrafter):
                drafter.finish()
        outputs.append(tokens)
        per_request.append(stats)
    return build_output(outputs, per_request, as_list=requests.as_list, text_form=requests.text_form, tokenizer=tokenizer)


def _pick(logits: torch.Tensor, context: torch.Tensor, sampling: SamplingConfig, generator) -> torch.Tensor:
    """The next token after ``context [n]`` from its logits ``[V]``."""
    if sampling.needs_prefix:
        logits = process_logits(logits[None], [context], sampling)[0]
    if sampling.greedy:
        return logits.argmax(-1)
    return sample(logits_to_probs(logits, sampling), generator)


def _generate_one(target, prompt, max_new, drafter, verifier, sampling, generator, k_max, stop, stream):
    stats = GenerationStats()
    plen = prompt.numel()
    # [plen + max_new + k_max]: context so far; a round may emit up to k_max + 1 tokens past max_new - 1
    buf = torch.empty(plen + max_new + k_max + 1, dtype=torch.long, device=prompt.device)
    buf[:plen] = prompt
    start = time.perf_counter()
    target.reset()
    if drafter is not None:
        drafter.reset()
    if stream is not None:
        stream.start(prompt)
    taps = tuple(getattr(drafter, "target_layer_ids", ()) or ()) if drafter is not None else ()
    prefill = target(prompt[None], hidden_layers=taps)
    target.commit(plen)
    # [rows, taps, H] features of the rows committed since the drafter last saw any
    fresh_hidden = torch.stack([h[0] for h in prefill.hidden], dim=1) if taps else None
    buf[plen] = _pick(prefill.logits[0, -1], prompt, sampling, generator)
    length, scanned = plen + 1, plen  # tokens in buf / tokens already checked for stops and streamed
    stats.target_passes = 1
    stats.verify_s += time.perf_counter() - start
    # A host read per token is free on the CPU; on an accelerator AR looks for stops every few tokens.
    per_token = target.device.type == "cpu" or drafter is not None or stream is not None or stop.per_token
    check_every = 1 if per_token else _EOS_CHECK_EVERY
    round_start = round_accepted = None  # a speculative round's first position and drafts, counted at its scan
    while True:
        if length - scanned >= check_every or length - plen >= max_new:
            limit = min(length, plen + max_new)
            end = stop.first_stop(buf, scanned, limit)
            if stream is not None:
                stream.put(buf[scanned : limit if end is None else end])
            scanned = limit if end is None else end
            if round_start is not None:
                # the drafts of the last round that the output keeps (a stop or max_new may end it inside the
                # round); the last kept token counts as its bonus, so tokens = rounds + accepted drafts + 1
                stats.record_round(min(round_accepted, scanned - round_start - 1))
                round_start = None
            if end is not None or length - plen >= max_new:
                break
        t0 = time.perf_counter()
        if drafter is None:
            logits = target(buf[length - 1 : length][None]).logits[0, -1]
            target.commit(1)
            buf[length] = _pick(logits, buf[:length], sampling, generator)
            length += 1
        else:
            k = max(0, min(k_max, max_new - (length - plen) - 1, target.room() - 1))
            extra = {"target_hidden": fresh_hidden} if taps else {}
            proposal = drafter.propose(buf[:length], k, sampling=sampling, generator=generator, **extra)
            check_proposal_size(proposal, k)
            tree = proposal.as_tree()  # a tree given as parents: one host read of them, which a tree verifier makes too
            offered = tree.max_depth if tree is not None else proposal.num_tokens
            stats.longest_proposal = max(stats.longest_proposal, offered)
            t1 = time.perf_counter()
            extra = {"hidden_layers": taps} if taps else {}
            result = verifier.verify(
                target,
                buf[length - 1 : length],
                proposal,
                sampling=sampling,
                generator=generator,
                context=buf[:length],
                drafter=drafter,
                **extra,
            )
            fresh_hidden = result.hidden
            m = result.emitted.numel()
            if length + m > buf.numel():  # a verifier that drafts again may emit more than k + 1 tokens
                buf = torch.cat([buf, buf.new_empty(length + m - buf.numel())])
            buf[length : length + m] = result.emitted
            round_start, round_accepted = length, result.num_accepted
            length += m
            stats.draft_s += t1 - t0
            t0 = t1
        stats.verify_s += time.perf_counter() - t0
        stats.target_passes += 1
    if stream is not None:
        stream.end()
    stats.new_tokens = scanned - plen
    if target.device.type == "cuda":
        torch.cuda.synchronize(target.device)
    stats.other_s = max(0.0, time.perf_counter() - start - stats.draft_s - stats.verify_s)
    return buf[plen:scanned].clone(), stats
