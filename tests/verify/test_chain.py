"""Chain verification: exact output law by enumeration, greedy rule, and mutations that must be caught."""

import functools
import itertools

import pytest
import torch

from specdec.verify.chain import chain_laws
from specdec.verify.sampling import SamplingConfig, logits_to_probs

V = 4  # vocabulary for exact enumeration
# Laws are float32 (as in decoding); enumeration sums in float64. Exact agreement up to float32 rounding:
TOL = 1e-6


@functools.cache
def _logits(prefix: tuple, salt: int, shape: str = "dense") -> torch.Tensor:
    """A deterministic random next-token logit row for every prefix (a 'model' over sequences)."""
    gen = torch.Generator().manual_seed(hash((salt,) + prefix) % (2**31))
    logits = 2.0 * torch.randn(V, generator=gen, dtype=torch.float64)
    if shape == "one_hot":
        logits = torch.full((V,), -torch.inf, dtype=torch.float64)
        logits[int(torch.randint(V, (1,), generator=gen))] = 0.0
    elif shape == "half_support":  # the draft and target supports are disjoint on half the rows
        cut = torch.randperm(V, generator=gen)[: V // 2]
        logits[cut] = -torch.inf
    return logits


@functools.cache
def _law(prefix, salt, sampling, shape="dense") -> torch.Tensor:
    return logits_to_probs(_logits(prefix, salt, shape), sampling).double()


def round_law(sampling, k, *, deterministic, target_shape="dense", draft_shape="dense", laws_fn=chain_laws):
    """Exact law of the first k+1 tokens: one speculative round of k drafts, completed by AR sampling.

    Lossless means this equals the target's own joint law of k+1 tokens.
    """
    law: dict[tuple, float] = {}
    draft_sampling = SamplingConfig(temperature=1.0) if sampling.greedy else sampling

    def complete(prefix: tuple, weight: float):
        if len(prefix) == k + 1:
            law[prefix] = law.get(prefix, 0.0) + weight
            return
        p = _law(prefix, 0, sampling, target_shape)
        for tok in range(V):
            if p[tok] > 0:
                complete(prefix + (tok,), weight * float(p[tok]))

    # enumerate draft sequences with their proposal probability
    for drafts in itertools.product(range(V), repeat=k):
        if deterministic:
            # a fixed, prefix-dependent choice: argmax of an unrelated law (n-gram-like)
            chosen = tuple(int(_law(drafts[:i], 1, draft_sampling, draft_shape).argmax()) for i in range(k))
            if drafts != chosen:
                continue
            weight, draft_probs = 1.0, None
        else:
            rows = [_law(drafts[:i], 1, draft_sampling, draft_shape) for i in range(k)]
            weight = float(torch.prod(torch.stack([rows[i][drafts[i]] for i in range(k)]))) if k else 1.0
            if weight == 0.0:
                continue
            draft_probs = torch.stack(rows) if k else torch.zeros(0, V, dtype=torch.float64)
        target_probs = torch.stack([_law(drafts[:i], 0, sampling, target_shape) for i in range(k + 1)])
        laws = laws_fn(target_probs, torch.tensor(drafts, dtype=torch.long), draft_probs)
        reach = weight
        for i in range(k):
            a = float(laws.accept_probs[i])
            # rejected at i: emit drafts[:i] + residual token, then complete with the target
            for tok in range(V):
                r = float(laws.residual_probs[i][tok])
                if r > 0 and (1 - a) > 0:
                    complete(drafts[:i] + (tok,), reach * (1 - a) * r)
            reach *= a
        for tok in range(V):
            b = float(laws.bonus_probs[tok])
            if b > 0 and reach > 0:
                complete(tuple(drafts) + (tok,), reach * b)
    return law


def target_joint_law(sampling, n, target_shape="dense"):
    law = {}
    for seq in itertools.product(range(V), repeat=n):
        pr = 1.0
        for i in range(n):
            pr *= float(_law(seq[:i], 0, sampling, target_shape)[seq[i]])
        if pr > 0:
            law[seq] = pr
    return law


def law_distance(a: dict, b: dict) -> float:
    return max(abs(a.get(s, 0.0) - b.get(s, 0.0)) for s in set(a) | set(b))


SAMPLINGS = {
    "t1": SamplingConfig(temperature=1.0),
    "t0.6-top3": SamplingConfig(temperature=0.6, top_k=3),
    "t1.3-top-p0.7": SamplingConfig(temperature=1.3, top_p=0.7),
    "greedy": SamplingConfig(),
}


@pytest.mark.parametrize("deterministic", [False, True], ids=["draft-law", "deterministic-proposal"])
@pytest.mark.parametrize("name,k", [(name, k) for name in sorted(SAMPLINGS) for k in (1, 2)] + [("t1", 3)])
def test_round_law_equals_target_law(name, k, deterministic):
    sampling = SAMPLINGS[name]
    got = round_law(sampling, k, deterministic=deterministic)
    assert abs(sum(got.values()) - 1.0) < TOL
    assert law_distance(got, target_joint_law(sampling, k + 1)) < TOL


@pytest.mark.parametrize(
    "target_shape,draft_shape",
    [("one_hot", "dense"), ("dense", "one_hot"), ("half_support", "half_support"), ("one_hot", "one_hot")],
)
def test_round_law_on_degenerate_supports(target_shape, draft_shape):
    sampling = SamplingConfig(temperature=1.0)
    for deterministic in (False, True):
        got = round_law(sampling, 2, deterministic=deterministic, target_shape=target_shape, draft_shape=draft_shape)
        assert law_distance(got, target_joint_law(sampling, 3, target_shape)) < TOL


# mutations: each broken verifier must make the law check fail


def _argmax_matching(target_probs, draft_tokens, draft_probs):
    """Bug: greedy matching at T > 0 (accept iff the draft is the target argmax)."""
    laws = chain_laws(target_probs, draft_tokens, draft_probs)
    k = draft_tokens.numel()
    laws.accept_probs = (draft_tokens == target_probs[:k].argmax(-1)).to(target_probs.dtype)
    return laws


def _unclamped_residual(target_probs, draft_tokens, draft_probs):
    """Bug: residual p - q without clamping at zero (then renormalised)."""
    laws = chain_laws(target_probs, draft_tokens, draft_probs)
    k = draft_tokens.numel()
    if draft_probs is not None:
        res = target_probs[:k] - draft_probs
        laws.residual_probs = res / res.sum(-1, keepdim=True).clamp_min(1e-30)
    return laws


def _residual_keeps_token(target_probs, draft_tokens, draft_probs):
    """Bug: deterministic proposal whose residual still contains the rejected token."""
    laws = chain_laws(target_probs, draft_tokens, draft_probs)
    k = draft_tokens.numel()
    laws.residual_probs = target_probs[:k].clone()
    return laws


@pytest.mark.parametrize(
    "mutant,deterministic",
    [(_argmax_matching, False), (_argmax_matching, True), (_unclamped_residual, False), (_residual_keeps_token, True)],
    ids=["argmax-matching-draft-law", "argmax-matching-deterministic", "unclamped-residual", "residual-keeps-token"],
)
def test_law_check_catches_mutant(mutant, deterministic):
    sampling = SamplingConfig(temperature=1.0)
    got = round_law(sampling, 2, deterministic=deterministic, laws_fn=mutant)
    assert law_distance(got, target_joint_law(sampling, 3)) > 1e-3


def test_a_draft_its_law_gave_zero_is_never_accepted_and_a_residual_is_always_a_law():
    p = torch.tensor([[0.5, 0.5], [0.3, 0.7]])
    laws = chain_laws(p, torch.tensor([1]), torch.tensor([[1.0, 0.0]]))  # the drafter claims it could not draw 1
    assert laws.accept_probs.tolist() == [0.0]
    # a draft law at or above the target everywhere (rounding): no residual mass, yet acceptance below 1
    laws = chain_laws(p, torch.tensor([0]), torch.tensor([[0.6, 0.5]]))
    assert laws.accept_probs.item() < 1.0
    assert torch.equal(laws.residual_probs[0], p[0])


def test_chain_shapes_are_checked_and_named():
    from specdec.verify.chain import chain_accept

    v = 5
    drafts = torch.tensor([1, 2])
    greedy, sampled = SamplingConfig(), SamplingConfig(temperature=1.0)
    with pytest.raises(ValueError, match=r"target_logits: expected shape \[k \+ 1, V\] = \[3, V\] .*, got \(6, 5\)"):
        chain_accept(torch.zeros(6, v), drafts, None, sampling=greedy)  # extra rows are not dropped silently
    with pytest.raises(ValueError, match=r"target_logits: expected shape \[k \+ 1, V\] = \[3, V\] .*, got \(2, 5\)"):
        chain_accept(torch.zeros(2, v), drafts, None, sampling=greedy)  # no bonus row
    with pytest.raises(ValueError, match=r"draft_probs: expected shape \(2, 5\) \(one law a draft token\), got \(5, 5\)"):
        chain_accept(torch.zeros(3, v), drafts, torch.full((5, v), 0.2), sampling=sampled)
    with pytest.raises(ValueError, match=r"draft_tokens: expected a 1-D tensor \[k\]"):
        chain_laws(torch.full((3, v), 0.2), drafts[None], None)
    with pytest.raises(ValueError, match=r"target_probs: expected shape \[k \+ 1, V\] = \[3, V\]"):
        chain_laws(torch.full((4, v), 0.2), drafts, None)
    n, bonus = chain_accept(torch.eye(v)[[1, 2, 4]] * 5, drafts, None, sampling=greedy)
    assert (n, int(bonus)) == (2, 4)


@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(temperature=1.0)], ids=["greedy", "sampled"])
def test_draft_ids_are_int64_and_in_the_vocabulary(sampling):
    from specdec.verify.chain import chain_accept

    v = 5
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0, 9.0], [0.0] * 5, [0.0] * 5])
    # uint8 ids index the laws as a mask: [1, 1] would be read as rows 0 and 1 of every law
    with pytest.raises(TypeError, match=r"draft_tokens: expected int64 token ids, got torch.uint8"):
        chain_accept(logits, torch.tensor([1, 1], dtype=torch.uint8), None, sampling=sampling)
    with pytest.raises(TypeError, match=r"draft_tokens: expected int64 token ids, got torch.uint8"):
        chain_laws(torch.full((3, v), 0.2), torch.tensor([1, 1], dtype=torch.uint8), None)
    # -1 would wrap to V - 1 (the likeliest token here) and be accepted and emitted
    for drafts, message in ((torch.tensor([-1, 2]), r"draft_tokens\[0\] = -1"), (torch.tensor([4, 5]), r"draft_tokens\[1\] = 5")):
        with pytest.raises(ValueError, match=r"draft_tokens: expected token ids in \[0, 5\), got " + message):
            chain_accept(logits, drafts, None, sampling=sampling, generator=torch.Generator().manual_seed(0))
    n, _ = chain_accept(logits, torch.tensor([4, 0]), None, sampling=sampling, generator=torch.Generator().manual_seed(0))
    assert n >= 1  # p(4) > 0.99 at the first row


def test_a_tree_given_to_the_chain_verifier_is_named_in_a_warning_once():
    import warnings

    import specdec as sd
    from specdec.testing import tiny_target

    target, prompt = tiny_target(seed=0), torch.tensor([[1, 2, 3, 1, 2, 4, 1, 2]])
    verifier = sd.ChainVerifier()
    with pytest.warns(
        UserWarning, match=r"ChainVerifier: the drafter proposed a tree; only its first root-to-leaf path"
    ) as caught:
        spec = sd.generate(target, prompt, 12, drafter=sd.NGramDrafter(max_paths=2), verifier=verifier)
    assert sum("proposed a tree" in str(w.message) for w in caught) == 1  # once, however many rounds
    assert torch.equal(spec.tokens, sd.generate(target, prompt, 12).tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sd.generate(target, prompt, 12, drafter=sd.NGramDrafter(), verifier=sd.ChainVerifier())  # a chain: no warning
