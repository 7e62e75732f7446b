"""Parallel block drafters that read the target's hidden states: DFlash and DFlash2.

One draft forward predicts a whole block. The block is ``[anchor, MASK, ..., MASK]`` (the anchor is
the newest context token), embedded with the *target's* embedding; every draft layer attends, without
a causal mask inside the block, to the block itself and to the *context*: the target's hidden states
at ``target_layer_ids`` of the committed tokens, concatenated, projected by ``fc`` and normalised by
``hidden_norm``, then turned into keys and values by each layer's own ``k_proj`` / ``v_proj``
("KV injection"). Those context K/V live in the drafter's own cache; the block's K/V are never
stored. The draft hidden states go through the *target's* ``lm_head``.

* :class:`DFlashDrafter` -- z-lab ``DFlashDraftModel`` checkpoints and the transformers assistant
  ``muse_glimmer_assistant`` (same model, other tensor names). Row ``i`` of the block predicts the
  token ``i`` places after the anchor; the drafts are independent per position (marginals), which is
  what a best-first tree is built from.
* :class:`DFlash2Drafter` -- ``DFlash2DraftModel``: a grouped dynamic causal convolution wraps every
  attention and MLP sublayer, and a candidate selector walks the block left to right over the top-K
  tokens of each row, scoring ``unary + <A[previous] * P h, B[candidate]>``; its child log-probs depend
  on the path, so trees come from :func:`specdec.verify.best_first_tree` with a callable.

Embedding and ``lm_head`` are shared with the target passed at construction (they are never copied):
a drafter belongs to one target. The checkpoint is checked against that target when it is loaded.
"""

from __future__ import annotations

import torch

from specdec.drafters.base import DraftProposal
from specdec.drafters.block.config import DFLASH, DFLASH2, MUSE_ASSISTANT
from specdec.drafters.block.drafter import BlockDrafter
from specdec.verify.sampling import logits_to_probs, sample

__all__ = ["DFlash2Drafter", "DFlashDrafter"]


class DFlashDrafter(BlockDrafter):
    """DFlash (``DFlashDraftModel``) and the transformers DFlash assistant (``muse_glimmer_assistant``).

    Each round: the features of the newly committed rows enter the draft cache, one forward over
    ``[anchor, MASK x (B - 1)]`` gives ``B - 1`` independent per-position distributions. Greedy takes
    the argmax of each; at ``temperature > 0`` each token is drawn from the request's law after
    temperature / top-k / top-p and that law is ``draft_probs``. ``tree_logprobs`` are the
    per-position log-softmaxes (marginals), from which :class:`~specdec.TreeVerifier` builds a
    best-first tree.

    Args:
        model: a :class:`BlockDraftModel` of architecture ``DFlashDraftModel`` or ``muse_glimmer_assistant``.
        target: the :class:`~specdec.models.Target` whose ``embed`` and ``lm_head`` it shares.
        tree_budget: propose the best-first tree of at most ``min(tree_budget, max_tokens)`` nodes over the
            per-position marginals (the tree a :class:`~specdec.TreeVerifier` of that budget would build from the
            proposal's ``tree_logprobs``; without it the verifier's own budget decides).

    Example:
        >>> import tempfile
        >>> import specdec as sd
        >>> from specdec.testing import tiny_target
        >>> from specdec.drafters.block.fixtures import save_fixture
        >>> target, prompt = tiny_target(seed=0), torch.tensor([[1, 2, 3]])
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     drafter = DFlashDrafter.from_pretrained(save_fixture(tmp, "DFlashDraftModel", target), target)
        >>> out = sd.generate(target, prompt, 16, drafter=drafter, num_draft_tokens=drafter.max_draft_tokens)
        >>> torch.equal(out.tokens, sd.generate(target, prompt, 16).tokens)     # random weights, still lossless
        True
    """

    architectures = (DFLASH, MUSE_ASSISTANT)

    def _graph_head(self, hidden, anchor):
        logits = self.model.logits(hidden[..., 1:, :], self.lm_head)  # [..., B - 1, V]
        return {"logits": logits, "greedy": logits.argmax(-1), "scores": torch.log_softmax(logits, dim=-1)}

    def _graph_heads(self, hidden, anchors):
        # one lm_head GEMM over every request's predicting rows
        out = self._graph_head(hidden, anchors)
        return [{name: value[j] for name, value in out.items()} for j in range(hidden.shape[0])]

    def _draft(self, context, hidden, k, sampling, generator, *, max_nodes: int) -> DraftProposal:
        out = self._graph_out
        # static path: the logits (and greedy picks) of every predicting row came from the body
        logits = self.model.logits(hidden, self.lm_head) if out is None else out["logits"][:k]  # [k, V]
        scores = torch.log_softmax(logits, dim=-1) if out is None else out["scores"][:k]  # row-wise: a slice is exact
        if self.tree_budget is not None:
            return self._tree_from(scores, k, min(self.tree_budget, max_nodes), context.device)
        if sampling.greedy:
            tokens = logits.argmax(-1) if out is None else out["greedy"][:k].clone()
            return DraftProposal(tokens=tokens, tree_logprobs=scores)
        probs = logits_to_probs(logits, sampling)  # [k, V]
        return DraftProposal(tokens=sample(probs, generator), draft_probs=probs, tree_logprobs=scores)


class DFlash2Drafter(BlockDrafter):
    """DFlash2 (``DFlash2DraftModel``): DFlash with dynamic convolutions and a candidate selector.

    The selector keeps the top-``selector_top_k`` tokens ``C_t`` of each row's logits ``U_t`` and walks
    the block from the anchor: ``score_t(c) = U_t(c) + <A[prev] * (P h_t), B[c]>`` for ``c`` in ``C_t``
    (``A`` = ``predecessor_codebook``, ``B`` = ``successor_codebook``, ``P`` = ``hidden_projection``).
    Greedy takes the argmax; at ``temperature > 0`` it draws from ``softmax(score / T)`` over the
    candidates, and that law scattered onto the vocabulary is ``draft_probs`` (zero outside ``C_t``).

    With ``tree_budget`` set, the proposal carries a best-first tree whose child log-probs are the
    selector's ``log_softmax(score / T)`` given the path (T = 1 when greedy), capped at ``max_tokens``
    nodes; ``tokens`` is its first root-to-leaf path.

    Example:
        >>> from specdec import SamplingConfig
        >>> from specdec.drafters.block import fixture_config, random_block_model
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> model = random_block_model(fixture_config("DFlash2DraftModel", target), target)
        >>> drafter = DFlash2Drafter(model, target, tree_budget=6)    # proposes a best-first tree of at most 6 nodes
        >>> drafter.propose(torch.tensor([5]), 6, sampling=SamplingConfig(), generator=None).tree.num_nodes
        6
    """

    architectures = (DFLASH2,)

    def _selector_rows(self, hidden: torch.Tensor):
        sel = self.model.candidate_selector
        logits = self.model.logits(hidden, self.lm_head)  # [k, V]
        unary, cand = torch.topk(logits, self.cfg.selector_top_k, dim=-1)  # [k, K]
        proj = sel.hidden_projection(hidden).float()  # [k, r]
        succ = sel.successor_codebook[cand].float()  # [k, K, r]
        return unary, cand, proj, succ

    def _scores(self, rows, t: int, prev: torch.Tensor) -> torch.Tensor:
        unary, cand, proj, succ = rows
        # index_select, not [prev]: a 0-d device index would be read back to the host
        pred = self.model.candidate_selector.predecessor_codebook.index_select(0, prev.reshape(1))[0].float()  # [r]
        return unary[t] + succ[t] @ (pred * proj[t])  # [K]

    def _walk_step(self, rows, t: int, prev: torch.Tensor) -> torch.Tensor:
        """The greedy choice at row ``t`` after ``prev``: ``[1]`` token id, no host sync."""
        return rows[1][t].index_select(0, self._scores(rows, t, prev).argmax().reshape(1))

    def _graph_head(self, hidden, anchor):
        unary, cand, proj, succ = self._selector_rows(hidden[1:])
        rows = (unary, cand, proj, succ)
        # the greedy walk over every predicting row; its first k steps are the walk of a k-token round
        prev, picks = anchor, []
        for t in range(unary.shape[0]):
            prev = self._walk_step(rows, t, prev)  # [1]
            picks.append(prev)
        return {"unary": unary, "cand": cand, "proj": proj, "succ": succ, "greedy": torch.cat(picks)}

    def _draft(self, context, hidden, k, sampling, generator, *, max_nodes: int) -> DraftProposal:
        out = self._graph_out
        if out is None:
            rows = self._selector_rows(hidden)
        else:
            if sampling.greedy and self.tree_budget is None:
                return DraftProposal(tokens=out["greedy"][:k].clone())
            rows = tuple(out[name][:k] for name in ("unary", "cand", "proj", "succ"))
        cand = rows[1]
        temperature = 1.0 if sampling.greedy else sampling.temperature
        if self.tree_budget is not None:
            anchor = int(context[-1])

            def child_logprobs(path: torch.Tensor) -> torch.Tensor:
                t = path.numel()
                prev = anchor if t == 0 else int(path[-1])
                lp = torch.log_softmax(self._scores(rows, t, torch.tensor(prev, device=cand.device)) / temperature, -1)
                full = torch.full((self.vocab_size,), float("-inf"), device=cand.device)
                return full.scatter(0, cand[t], lp).cpu()

            return self._tree_from(child_logprobs, k, min(self.tree_budget, max_nodes), context.device)
        prev = context[-1:]
        tokens, laws = [], []
        for t in range(k):
            if sampling.greedy:
                prev = self._walk_step(rows, t, prev)  # [1]
            else:
                q = torch.softmax(self._scores(rows, t, prev) / temperature, dim=-1)  # [K]
                index = sample(q, generator)
                laws.append(torch.zeros(self.vocab_size, device=q.device).scatter(0, cand[t], q))
                prev = cand[t].index_select(0, index.reshape(1))
            tokens.append(prev)
        return DraftProposal(tokens=torch.cat(tokens), draft_probs=torch.stack(laws) if laws else None)
