"""TreeVerifier on the lean runtime: tree speculative decoding is lossless.

* greedy, fp32: ``sd.generate(..., verifier=TreeVerifier(...))`` equals autoregressive decoding token
  for token (``torch.equal``), for trees built from draft laws and for explicit trees, with the KV
  cache beyond the committed length poisoned with NaN after every commit;
* a chain-shaped tree reproduces ChainVerifier exactly (greedy) and has the same law (sampling);
* one sampled verify round on a real tiny target: every draw enumerated, the output law equals the
  autoregressive sequence law;
* mutation tests: a verifier that does not compact the accepted rows, or uses flat positions, is
  caught.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specdec as sd
import specdec.contracts.plan as plan_mod
import specdec.verify.tree as tree_mod
import specdec.verify.walks as walks_mod
from specdec.drafters.base import DraftProposal
from specdec.testing import ForcedDrafter, tiny_target
from specdec.verify.chain import ChainVerifier, chain_laws
from specdec.verify.sampling import SamplingConfig, logits_to_probs
from specdec.verify.tree import Tree, TreeVerifier, match_walk

VOCAB = 97
_TARGETS: dict = {}


def target_for(model_type: str, seed: int, max_seq_len: int):
    key = (model_type, seed, max_seq_len)
    if key not in _TARGETS:
        _TARGETS[key] = tiny_target(model_type, seed=seed, max_seq_len=max_seq_len)
    return _TARGETS[key]


def poison_after_commit(target):
    """Fill every cache slot past the committed length with NaN after each commit: a verifier that
    leaves the accepted rows anywhere but the front of the window then reads NaN."""
    commit = target.commit

    def poisoned(accepted):
        commit(accepted)
        for k_cache, v_cache in zip(target.k_caches, target.v_caches):
            k_cache[:, :, target.length :] = float("nan")
            v_cache[:, :, target.length :] = float("nan")

    target.commit = poisoned
    return target


def unpoison(target):
    target.__dict__.pop("commit", None)


# drafters that know the greedy continuation and hide it inside a tree
class RankNoiseDrafter:
    """Per-depth draft laws in which the true next token sits at a random rank in [0, max_rank].

    The proposed chain is the argmax path; TreeVerifier builds its best-first tree from the laws, so
    the truth is accepted only where the tree reaches down to it.
    """

    vocab_size = VOCAB

    def __init__(self, truth: torch.Tensor, prompt_len: int, seed: int, max_rank: int, sharpness: float = 4.0):
        self.truth, self.prompt_len, self.seed, self.max_rank, self.sharpness = truth, prompt_len, seed, max_rank, sharpness

    def reset(self) -> None:
        self.gen = torch.Generator().manual_seed(self.seed)

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        if max_tokens == 0:
            return DraftProposal(tokens=context.new_zeros(0))
        done = context.numel() - self.prompt_len  # emitted so far, root included
        logits = torch.randn(max_tokens, VOCAB, generator=self.gen) * self.sharpness
        want = self.truth[done : done + max_tokens]
        ranks = torch.randint(0, self.max_rank + 1, (want.numel(),), generator=self.gen)
        order = torch.sort(logits, dim=-1, descending=True, stable=True).indices
        for d in range(want.numel()):
            a, b = int(order[d, ranks[d]]), int(want[d])
            logits[d, a], logits[d, b] = logits[d, b].clone(), logits[d, a].clone()
        probs = torch.softmax(logits, -1)  # [k, V]
        return DraftProposal(tokens=probs.argmax(-1), draft_probs=probs)


@dataclass
class TreeProposal(DraftProposal):
    tree: Tree | None = None


class PathsDrafter:
    """Several continuations merged into a trie: the truth (cut or corrupted at a random depth), some
    random paths and a duplicate; at most ``max_tokens`` nodes and depth."""

    vocab_size = VOCAB

    def __init__(self, truth: torch.Tensor, prompt_len: int, seed: int, num_paths: int):
        self.truth, self.prompt_len, self.seed, self.num_paths = truth, prompt_len, seed, num_paths

    def reset(self) -> None:
        self.gen = torch.Generator().manual_seed(self.seed)

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        g = self.gen
        done = context.numel() - self.prompt_len
        true = self.truth[done : done + max_tokens].tolist()
        paths = []
        for _ in range(self.num_paths):
            length = int(torch.randint(0, max_tokens + 1, (1,), generator=g))
            keep = int(torch.randint(0, length + 1, (1,), generator=g))
            path = true[:keep] + torch.randint(0, VOCAB, (length,), generator=g).tolist()[keep:]
            paths.append(path[:length])
        order = torch.randperm(len(paths), generator=g).tolist()
        tree = Tree.from_paths([paths[i] for i in order])
        tree = tree.truncate(max_tokens)
        # sometimes a leaf that duplicates the first root child, in front of it: the walk must take
        # the first of two equal siblings, which then ends the round early
        if 0 < tree.num_nodes < max_tokens and bool(torch.randint(0, 2, (1,), generator=g)):
            tree = Tree(
                tokens=torch.cat([tree.tokens[:1], tree.tokens]),
                parents=torch.cat([torch.tensor([-1]), torch.where(tree.parents >= 0, tree.parents + 1, tree.parents)]),
            )
        spine = tree.tokens[tree.path(int(tree.depth.argmax()))] if tree.num_nodes else context.new_zeros(0)
        return TreeProposal(tokens=spine, draft_probs=None, tree=tree)


@settings(
    max_examples=20,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    model_type=st.sampled_from(["llama", "qwen3"]),
    target_seed=st.integers(0, 1),
    prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=9),
    max_new=st.integers(1, 28),
    spare=st.sampled_from([0, 3, 64]),
    drafter_kind=st.sampled_from(["rank-noise", "paths"]),
    budget=st.sampled_from([1, 2, 5, 16, 64]),
    k=st.integers(0, 7),
    max_rank=st.integers(0, 4),
    drafter_seed=st.integers(0, 2**16),
)
def test_tree_speculative_equals_autoregressive(
    model_type, target_seed, prompt, max_new, spare, drafter_kind, budget, k, max_rank, drafter_seed
):
    prompt_ids = torch.tensor([prompt])
    target = target_for(model_type, target_seed, len(prompt) + max_new + spare)
    ar = sd.generate(target, prompt_ids, max_new)
    truth = torch.cat([ar.tokens[0], torch.zeros(16, dtype=torch.long)])
    if drafter_kind == "rank-noise":
        drafter = RankNoiseDrafter(truth, len(prompt), drafter_seed, max_rank)
    else:
        drafter = PathsDrafter(truth, len(prompt), drafter_seed, num_paths=max_rank + 1)
    verifier = TreeVerifier(budget=budget)
    poison_after_commit(target)
    try:
        spec = sd.generate(target, prompt_ids, max_new, drafter=drafter, verifier=verifier, num_draft_tokens=k)
    finally:
        unpoison(target)
    assert torch.equal(spec.tokens, ar.tokens)
    assert spec.stats.new_tokens == max_new


def test_tree_accepts_off_spine_nodes_and_beats_the_chain():
    prompt = torch.tensor([[5, 17, 3, 5, 17]])
    target = target_for("llama", 0, 256)
    ar = sd.generate(target, prompt, 48)
    truth = torch.cat([ar.tokens[0], torch.zeros(16, dtype=torch.long)])
    chain = sd.generate(target, prompt, 48, drafter=RankNoiseDrafter(truth, 5, 3, max_rank=2), num_draft_tokens=5)
    verifier = TreeVerifier(budget=32)
    tree = sd.generate(
        target, prompt, 48, drafter=RankNoiseDrafter(truth, 5, 3, max_rank=2), verifier=verifier, num_draft_tokens=5
    )
    assert torch.equal(tree.tokens, ar.tokens) and torch.equal(chain.tokens, ar.tokens)
    assert tree.stats.target_passes < chain.stats.target_passes
    assert max(n for n, c in enumerate(tree.stats.accepted_histogram) if c) >= 3


@pytest.mark.parametrize("drafter_name", ["ngram", "forced-0", "forced-2", "forced-9", "model-greedy"])
def test_chain_tree_reproduces_chain_verifier_greedy(drafter_name):
    target = target_for("llama", 0, 256)
    prompt = torch.tensor([[1, 2, 3, 1, 2, 3, 1, 2]])

    def drafter():
        if drafter_name == "ngram":
            return sd.NGramDrafter()
        if drafter_name == "model-greedy":
            return sd.ModelDrafter(tiny_target(seed=1, max_seq_len=256))
        return ForcedDrafter(target, accept=int(drafter_name.split("-")[1]))

    chain = sd.generate(target, prompt, 30, drafter=drafter(), verifier=ChainVerifier(), num_draft_tokens=4)
    tree = sd.generate(target, prompt, 30, drafter=drafter(), verifier=TreeVerifier(budget=8), num_draft_tokens=4)
    assert torch.equal(tree.tokens, chain.tokens)
    assert tree.stats.accepted_histogram == chain.stats.accepted_histogram


def test_chain_tree_logits_are_bitwise_the_chain_forward():
    target = target_for("qwen3", 0, 64)
    target.reset()
    target(torch.tensor([[4, 8, 15, 16]]))
    target.commit(4)
    rows = torch.tensor([[23, 42, 7, 7]])
    chain_logits = target(rows).logits
    tree = Tree.chain(rows[0, 1:])
    tree_logits = target(rows, tree_mod.tree_positions(tree, target.length)[None], tree.ancestor_mask).logits
    assert torch.equal(chain_logits, tree_logits)


def test_chain_tree_has_the_chain_verifier_law():
    """Deterministic proposal on a chain: ChainVerifier's accept/residual law == sample-and-match."""
    vocab, k = 3, 3
    g = torch.Generator().manual_seed(0)
    for trial in range(6):
        probs = torch.rand(k + 1, vocab, generator=g, dtype=torch.float64)
        probs[torch.rand(k + 1, vocab, generator=g) < 0.25] = 0.0
        probs[:, trial % vocab] += 0.1
        probs = probs / probs.sum(-1, keepdim=True)
        drafts = torch.randint(0, vocab, (k,), generator=g)
        laws = chain_laws(probs, drafts, None)
        chain_law: dict[tuple[int, ...], float] = {}
        reach = 1.0
        for n in range(k + 1):
            last = laws.bonus_probs if n == k else laws.residual_probs[n] * (1 - laws.accept_probs[n])
            for tok in range(vocab):
                if reach * float(last[tok]) > 0:
                    key = tuple(drafts[:n].tolist()) + (tok,)
                    chain_law[key] = chain_law.get(key, 0.0) + reach * float(last[tok])
            if n < k:
                reach *= float(laws.accept_probs[n])
        tree = Tree.chain(drafts)
        tree_law: dict[tuple[int, ...], float] = {}
        for draws in itertools.product(range(vocab), repeat=k + 1):
            w = math.prod(float(probs[r, d]) for r, d in enumerate(draws))
            if w:
                key = tuple(match_walk(tree, torch.tensor(draws)).emitted.tolist())
                tree_law[key] = tree_law.get(key, 0.0) + w
        assert set(chain_law) == set(tree_law)
        assert max(abs(chain_law[key] - tree_law[key]) for key in chain_law) < 1e-12


@pytest.mark.parametrize(
    "sampling",
    [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, top_k=3, top_p=0.9)],
    ids=["t1", "t0.7-topk3-topp0.9"],
)
def test_one_sampled_tree_round_has_the_autoregressive_law(sampling, monkeypatch):
    """Enumerate the draw at every verify row through TreeVerifier.verify itself (sample() patched to
    return the enumerated draws); the output law must equal the target's own sequence law."""
    vocab = 4
    target = tiny_target("qwen3", seed=3, vocab_size=vocab, max_seq_len=32)
    prefix, root = torch.tensor([1, 3, 0, 2]), torch.tensor([1])
    tree = Tree(tokens=[2, 0, 3], parents=[-1, -1, 0])  # root -> 2 -> 3, root -> 0
    proposal = TreeProposal(tokens=torch.tensor([2, 3]), draft_probs=None, tree=tree)

    forced: list[torch.Tensor] = []
    seen: list[torch.Tensor] = []

    def fake_sample(probs, generator=None):
        seen.append(probs)
        return forced[0]

    monkeypatch.setattr(walks_mod, "sample", fake_sample)

    def prefill():
        target.reset()
        target(prefix[None])
        target.commit(prefix.numel())

    prefill()
    law: dict[tuple[int, ...], float] = {}
    for draws in itertools.product(range(vocab), repeat=tree.num_nodes + 1):
        # the committed prefix stays intact below `length`: rolling back is enough between runs
        target.truncate(prefix.numel())
        forced[:] = [torch.tensor(draws)]
        seen.clear()
        result = TreeVerifier(budget=8).verify(target, root, proposal, sampling=sampling, generator=None)
        probs = seen[0].double()
        w = math.prod(float(probs[r, d]) for r, d in enumerate(draws))
        key = tuple(result.emitted.tolist())
        assert target.length == prefix.numel() + 1 + result.num_accepted
        if key not in law:
            # first time this outcome is seen: the committed cache must be the autoregressive one
            nxt = target(result.emitted[-1:][None]).logits[0, -1]
            full = torch.cat([prefix, root, result.emitted])
            target.reset()
            ar_logits = target(full[None]).logits[0, -1]
            assert torch.allclose(nxt, ar_logits, atol=1e-5, rtol=1e-5)
            prefill()
        if w:
            law[key] = law.get(key, 0.0) + w
    law = {key: m for key, m in law.items() if m > 0}

    def ar_law(context: torch.Tensor) -> torch.Tensor:
        target.reset()
        return logits_to_probs(target(context[None]).logits[0, -1], sampling).double()

    children = {-1: {2: 0, 0: 1}, 0: {3: 2}, 1: {}, 2: {}}
    want: dict[tuple[int, ...], float] = {}

    def rec(node: int, emitted: tuple[int, ...], mass: float) -> None:
        probs = ar_law(torch.cat([prefix, root, torch.tensor(emitted, dtype=torch.long)]))
        for tok in range(vocab):
            m = mass * float(probs[tok])
            if m == 0:
                continue
            child = children[node].get(tok)
            if child is None:
                want[emitted + (tok,)] = m
            else:
                rec(child, emitted + (tok,), m)

    rec(-1, (), 1.0)
    assert set(law) == set(want)
    assert max(abs(law[key] - want[key]) for key in want) < 1e-5
    assert abs(sum(law.values()) - 1.0) < 1e-6  # float32 laws


def test_sampled_tree_generate_is_seeded():
    target = target_for("llama", 1, 256)
    prompt = torch.tensor([[9, 8, 7, 9, 8]])
    truth = torch.zeros(64, dtype=torch.long)

    def run(seed):
        return sd.generate(
            target,
            prompt,
            24,
            drafter=RankNoiseDrafter(truth, 5, 0, max_rank=1, sharpness=1.0),
            verifier=TreeVerifier(budget=16),
            temperature=0.9,
            top_k=20,
            seed=seed,
            num_draft_tokens=4,
        )

    a, b, c = run(1), run(1), run(2)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


def test_tree_verifier_rejects_bad_input_before_the_forward():
    target = target_for("llama", 0, 16)
    target.reset()
    target(torch.tensor([[1] * 10]))
    target.commit(10)
    calls = []
    target.register_forward_pre_hook(lambda *a: calls.append(1))
    root = torch.tensor([3])
    try:
        with pytest.raises(ValueError, match=r"proposal.tree: 6 nodes \(depth 6\) need 7 cache rows with the root, but only 6"):
            TreeVerifier().verify(
                target,
                root,
                TreeProposal(tokens=torch.zeros(0, dtype=torch.long), tree=Tree.chain([1] * 6)),
                sampling=SamplingConfig(),
            )
        with pytest.raises(TypeError, match="proposal.tree: expected a Tree, got list"):
            TreeVerifier().verify(
                target, root, TreeProposal(tokens=torch.zeros(0, dtype=torch.long), tree=[1, 2]), sampling=SamplingConfig()
            )
        with pytest.raises(ValueError, match=r"proposal.tokens: expected token ids in \[0, 97\), got tokens\[1\] = 97"):
            TreeVerifier().verify(target, root, DraftProposal(tokens=torch.tensor([5, 97])), sampling=SamplingConfig())
    finally:
        target._forward_pre_hooks.clear()
    assert not calls and target.length == 10
    with pytest.raises(ValueError, match=r"budget: expected an int >= 1"):
        TreeVerifier(budget=0)
    with pytest.raises(ValueError, match=r"top_k: expected an int >= 1 or None"):
        TreeVerifier(top_k=0)


def test_tree_verifier_caps_the_built_tree_to_the_cache_room():
    target = target_for("llama", 0, 16)
    target.reset()
    target(torch.tensor([[1] * 10]))
    target.commit(10)
    probs = torch.softmax(torch.randn(4, VOCAB, generator=torch.Generator().manual_seed(0)), -1)
    verifier = TreeVerifier(budget=64)
    verifier.verify(
        target, torch.tensor([3]), DraftProposal(tokens=probs.argmax(-1), draft_probs=probs), sampling=SamplingConfig()
    )
    assert verifier.last_tree.num_nodes == 5  # room 6 = root + 5 nodes


# mutation tests: the equality check catches a broken verifier
class NoCompactionTree(TreeVerifier):
    """Mutant: keeps the first n + 1 verify rows instead of the accepted path's rows."""

    def verify(self, target, root, proposal, *, sampling, generator=None, **_):
        commit = target.commit
        target.commit = lambda accepted: commit(accepted if isinstance(accepted, int) else int(accepted.numel()))
        try:
            return super().verify(target, root, proposal, sampling=sampling, generator=generator)
        finally:
            target.__dict__.pop("commit", None)


@pytest.mark.parametrize("path_check", [True, False])
@pytest.mark.parametrize("mutant", ["no-compaction", "flat-positions"])
def test_mutation_equality_check_catches_a_broken_tree_verifier(mutant, path_check, monkeypatch):
    """On the CPU the target refuses the broken commit; without that check (an accelerator target skips its host
    read) the output differs from AR."""
    import specdec.models.dense as dense_mod

    if not path_check:
        monkeypatch.setattr(dense_mod, "check_committed_path", lambda *a, **k: None)
    prompt = torch.tensor([[5, 17, 3, 5, 17]])
    target = target_for("llama", 0, 256)
    ar = sd.generate(target, prompt, 40)
    truth = torch.cat([ar.tokens[0], torch.zeros(16, dtype=torch.long)])
    if mutant == "no-compaction":
        verifier = NoCompactionTree(budget=32)
    else:
        verifier = TreeVerifier(budget=32)
        monkeypatch.setattr(plan_mod, "tree_positions", lambda tree, p: p + torch.arange(tree.num_nodes + 1))
    drafter = RankNoiseDrafter(truth, 5, 3, max_rank=2)
    if path_check:
        with pytest.raises(ValueError, match="accepted: expected the rows of one root-to-node path"):
            sd.generate(target, prompt, 40, drafter=drafter, verifier=verifier, num_draft_tokens=5)
        return
    spec = sd.generate(target, prompt, 40, drafter=drafter, verifier=verifier, num_draft_tokens=5)
    assert not torch.equal(spec.tokens, ar.tokens)


@dataclass
class ScoredProposal(DraftProposal):
    tree_logprobs: torch.Tensor | None = None


def test_tree_logprobs_take_precedence_over_draft_probs():
    """A greedy drafter can hand over per-depth scores without claiming they are its law."""
    target = target_for("llama", 0, 256)
    target.reset()
    target(torch.tensor([[1, 2, 3]]))
    target.commit(3)
    scores = torch.full((2, VOCAB), float("-inf"))
    scores[0, [4, 7]] = math.log(0.5)
    scores[1, 9] = 0.0
    verifier = TreeVerifier(budget=8)
    uniform = torch.full((2, VOCAB), 1.0 / VOCAB)
    verifier.verify(
        target,
        torch.tensor([5]),
        ScoredProposal(tokens=torch.tensor([4, 9]), draft_probs=uniform, tree_logprobs=scores),
        sampling=SamplingConfig(),
    )
    tree = verifier.last_tree
    assert tree.tokens.tolist() == [4, 7, 9, 9] and tree.parents.tolist() == [-1, -1, 0, 1]
