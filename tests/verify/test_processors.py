"""Repetition penalty and transformers logits processors on the target law: exact laws, greedy equality."""

import functools

import pytest
import torch
from transformers import RepetitionPenaltyLogitsProcessor, SequenceBiasLogitsProcessor

import specdec as sd
import specdec.verify.chain as chain_mod
import specdec.verify.tree as tree_mod
from specdec.contracts import DraftProposal, Tree
from specdec.testing import tiny_hf_model, tiny_target
from specdec.testing.laws import MarkovLaw, autoregressive_law, chain_round_law, speculative_law, total_variation, tree_round_law
from specdec.verify.processors import apply_repetition_penalty

V = 4
PENALTY = 1.5
BIAS = {(1, 2): 2.0, (3,): -1.0}


def test_repetition_penalty_matches_transformers():
    gen = torch.Generator().manual_seed(0)
    scores = 3 * torch.randn(3, 97, generator=gen)
    ids = torch.randint(0, 97, (3, 20), generator=gen)
    want = RepetitionPenaltyLogitsProcessor(penalty=1.7)(ids, scores.clone())
    assert torch.equal(apply_repetition_penalty(ids, scores, 1.7), want)


class TableTarget:
    """A tree-capable Target whose logits are ``MarkovLaw(prefix)``, each row's prefix walked from the plan."""

    config = None
    dtype = torch.float32
    device = torch.device("cpu")
    supports_trees = True
    weight_views = ("exact",)
    max_seq_len = 64

    def __init__(self, law):
        self.law, self.tokens, self.last = law, [], []

    vocab_size = property(lambda self: self.law.vocab_size)
    length = property(lambda self: len(self.tokens))

    def room(self):
        return self.max_seq_len - self.length

    def reset(self):
        self.tokens, self.last = [], []

    def truncate(self, length):
        del self.tokens[length:]

    def discard(self):
        self.last = []

    def forward(self, tokens, positions=None, mask=None, *, hidden_layers=(), tree_parents=None, view="exact"):
        raise NotImplementedError

    def run_plan(self, plan, *, hidden_layers=(), view="exact"):
        from specdec.contracts import TargetOutput

        rows = plan.tokens[0].tolist()
        parents = [-1] + [p + 1 for p in plan.tree.parents.tolist()]
        logits = []
        for r in range(len(rows)):
            path, j = [], r
            while j >= 0:
                path.append(rows[j])
                j = parents[j]
            logits.append(self.law(self.tokens + path[::-1]))
        self.last = rows
        return TargetOutput(logits=torch.stack(logits)[None])

    def commit(self, accepted):
        rows = range(accepted) if isinstance(accepted, int) else accepted.tolist()
        self.tokens += [self.last[r] for r in rows]


@functools.cache
def _law():
    return MarkovLaw(V, order=2, seed=3)


def _processed_by_transformers(context):
    ids, scores = torch.tensor([list(context)]), _law()(context)[None]
    scores = RepetitionPenaltyLogitsProcessor(penalty=PENALTY)(ids, scores)
    return SequenceBiasLogitsProcessor(sequence_bias=BIAS)(ids, scores)[0]


def _drafts(context):
    return [(context[-1] + 1) % V, (context[-1] * 3 + context[-2]) % V, 2]


def _spy(monkeypatch, module, name):
    seen = []
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        seen.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return seen


def _round_law(verifier_kind, sampling, monkeypatch):
    """The exact law of one verify round of the real verifier: the laws it samples from, spied on."""
    target = TableTarget(_law())
    verifier = sd.ChainVerifier() if verifier_kind == "chain" else sd.TreeVerifier(budget=8)
    spied = (
        _spy(monkeypatch, chain_mod, "chain_laws")
        if verifier_kind == "chain"
        else _spy(monkeypatch, tree_mod, "sample_and_match")
    )

    def round_law(context):
        target.reset()
        target.tokens = list(context[:-1])
        drafts = torch.tensor(_drafts(context))
        tree = None if verifier_kind == "chain" else Tree(tokens=drafts.tolist() + [0], parents=[-1, 0, -1, 1])
        verifier.verify(
            target,
            torch.tensor(context[-1:]),
            DraftProposal(drafts, tree=tree),
            sampling=sampling,
            generator=torch.Generator().manual_seed(0),
            context=torch.tensor(context),
        )
        args = spied.pop()
        if verifier_kind == "chain":
            laws = args[0], args[1], args[2]
            return chain_round_law(
                torch.zeros(4, V),
                laws[1],
                None,
                sampling=sd.SamplingConfig(temperature=1.0),
                decide=lambda *a: chain_mod.chain_laws(*laws),
            )
        return tree_round_law(args[0], args[1])

    return round_law


@pytest.mark.parametrize("verifier", ["chain", "tree"])
def test_speculative_law_with_processors_equals_processed_ar_law(verifier, monkeypatch):
    sampling = sd.SamplingConfig(
        temperature=1.0, repetition_penalty=PENALTY, logits_processor=(SequenceBiasLogitsProcessor(BIAS),)
    )
    context = (1, 2, 1)
    spec = speculative_law(_round_law(verifier, sampling, monkeypatch), context, 4)
    want = autoregressive_law(_processed_by_transformers, context, 4, sampling=sd.SamplingConfig(temperature=1.0))
    unprocessed = autoregressive_law(_law(), context, 4, sampling=sd.SamplingConfig(temperature=1.0))
    assert total_variation(want, unprocessed) > 0.05  # the processors change the law
    assert total_variation(spec, want) < 1e-6  # the verifier's laws are float32, as in decoding


def test_law_check_catches_processing_with_the_root_prefix_only(monkeypatch):
    import specdec.verify.processors as proc_mod

    real = proc_mod.row_prefixes
    monkeypatch.setattr(chain_mod, "row_prefixes", lambda context, plan: [context] * len(real(context, plan)))
    sampling = sd.SamplingConfig(
        temperature=1.0, repetition_penalty=PENALTY, logits_processor=(SequenceBiasLogitsProcessor(BIAS),)
    )
    spec = speculative_law(_round_law("chain", sampling, monkeypatch), (1, 2, 1), 4)
    want = autoregressive_law(_processed_by_transformers, (1, 2, 1), 4, sampling=sd.SamplingConfig(temperature=1.0))
    assert total_variation(spec, want) > 1e-3


def test_verify_without_context_raises():
    target = TableTarget(_law())
    target.tokens = [1, 2]
    with pytest.raises(ValueError, match="context: expected the tokens so far"):
        sd.ChainVerifier().verify(
            target, torch.tensor([1]), DraftProposal(torch.tensor([2])), sampling=sd.SamplingConfig(repetition_penalty=1.2)
        )


@functools.cache
def _tiny(model_type="llama"):
    return tiny_target(model_type, seed=6, max_seq_len=96)


def test_ar_with_repetition_penalty_equals_transformers_generate():
    prompt = torch.tensor([[4, 5, 6, 4, 5, 6, 7]])
    hf = tiny_hf_model("llama", seed=6).generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=30, do_sample=False, repetition_penalty=1.3, pad_token_id=0
    )
    ours = sd.generate(_tiny(), prompt, 30, repetition_penalty=1.3)
    assert torch.equal(ours.tokens[0], hf[0, prompt.shape[1] :])
    assert not torch.equal(sd.generate(_tiny(), prompt, 30).tokens, ours.tokens)


@pytest.mark.parametrize("kind", ["ngram-chain", "ngram-tree", "model-tree"])
def test_greedy_speculative_equals_ar_under_repetition_penalty(kind):
    prompt = torch.tensor([[3, 4, 5, 3, 4, 6, 3, 4, 5, 9, 3, 4]])
    processors = [SequenceBiasLogitsProcessor({(4, 5): 1.5})]
    ar = sd.generate(_tiny(), prompt, 30, repetition_penalty=1.4, logits_processor=processors)
    if kind == "ngram-chain":
        drafter, verifier = sd.NGramDrafter(max_ngram=2), None
    elif kind == "ngram-tree":
        drafter, verifier = sd.NGramDrafter(max_ngram=2, max_paths=3, depth=4), sd.TreeVerifier(budget=10)
    else:
        drafter = sd.ModelDrafter(tiny_target("llama", seed=6, max_seq_len=128))  # the target's weights, its own cache
        verifier = sd.TreeVerifier(budget=10)
    spec = sd.generate(
        _tiny(),
        prompt,
        30,
        drafter=drafter,
        verifier=verifier,
        num_draft_tokens=10,
        repetition_penalty=1.4,
        logits_processor=processors,
    )
    assert torch.equal(spec.tokens, ar.tokens)
    assert spec.stats.rounds > 0


def test_bad_processor_arguments_raise():
    with pytest.raises(ValueError, match="repetition_penalty: expected a finite float > 0"):
        sd.generate(_tiny(), torch.tensor([[1, 2]]), 3, repetition_penalty=0.0)
    with pytest.raises(TypeError, match=r"logits_processor\[0\]: expected a callable"):
        sd.generate(_tiny(), torch.tensor([[1, 2]]), 3, logits_processor=[3])


def test_process_logits_needs_one_prefix_a_row_and_processors_that_keep_the_shape():
    from specdec.verify.processors import process_logits

    logits = torch.zeros(2, 5)
    with pytest.raises(ValueError, match=r"prefixes: expected one prefix per logits row \(2\), got 1"):
        process_logits(logits, [torch.tensor([1])], sd.SamplingConfig(repetition_penalty=1.5))
    wide = lambda ids, scores: torch.zeros(1, 6)  # noqa: E731
    with pytest.raises(
        ValueError, match=r"logits_processor: expected each processor to return scores \[1, 5\], got torch.Size\(\[1, 6\]\)"
    ):
        process_logits(logits, [torch.tensor([1]), torch.tensor([2])], sd.SamplingConfig(logits_processor=(wide,)))
