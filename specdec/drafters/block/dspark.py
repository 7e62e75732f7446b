"""DSpark: a semi-autoregressive block drafter with a sequential (Markov, gated or RNN) head and a
confidence head, and the hardware-aware prefix scheduler that decides how many drafts each request
verifies.

The parallel stage is the DFlash backbone (:mod:`specdec.drafters.block.backbone`), except that all ``gamma``
rows of the block ``[anchor, MASK x (gamma - 1)]`` predict: row ``k`` gives the logits ``U_k`` and the
hidden state ``h_k`` of the ``k``-th token after the anchor. The sequential stage adds a bias that
depends on the tokens already drawn, ``p_k(v) ~ exp(U_k(v) + b_k(v))`` (``x_0`` = the anchor), sampled
left to right, so every per-token law is an exact softmax and standard rejection sampling stays
lossless. ``markov_head_type`` picks the bias (``e = W1[x_{k-1}]``, ``W1`` = ``markov_w1``, ``W2`` =
``markov_w2``):

* ``vanilla`` (Markov): ``b_k = W2 e``.
* ``gated``: ``b_k = W2 (sigmoid(G [h_k ; e] + g) * e)`` (``G``, ``g`` = ``gate_proj``).
* ``rnn``: ``z = [s_{k-1} ; e ; h_k]``, ``[a ; c ; o] = J z + j`` (``J``, ``j`` = ``joint_proj``, split in
  three), ``s_k = sigmoid(a) * s_{k-1} + (1 - sigmoid(a)) * tanh(c)``, ``b_k = W2 tanh(o)``, ``s_0 = 0``.

The confidence head estimates ``c_k = sigmoid(w . [h_k ; W1[x_{k-1}]] + b)``, the probability that
token ``k`` survives given that the tokens before it did; per-position temperatures from
:func:`specdec.drafters.block.calibration.sequential_temperature_scaling` divide its logit.

:class:`~specdec.drafters.block.scheduler.PrefixScheduler` is Algorithm 1 of the DSpark paper: admit draft positions in decreasing
order of survival ``a_{r,j} = prod_{i <= j} c_{r,i}`` while the expected throughput
``(R + sum admitted a) * SPS(batch tokens)`` improves, and **stop at the first admission that does not
improve it**. The early stop is what keeps verification lossless: ``c_{j+1}`` depends on the realised
token ``x_j``, so a search that looks past a non-improving step lets ``x_j``'s value decide whether
``x_j`` itself is verified (Appendix A: target ``(0.7, 0.3)``, draft ``(0.5, 0.5)`` -> output
``(0.85, 0.15)``; ``tests/drafters/block/test_dspark.py`` reproduces it by exact enumeration). The lagged mode fixes
the *number* of admitted tokens from confidences two steps old, then fills it with the current best
candidates, which is causal without the early stop.
"""

from __future__ import annotations

import torch

from specdec.drafters.base import DraftProposal
from specdec.drafters.block.calibration import load_calibration
from specdec.drafters.block.checkpoint import load_dspark_model
from specdec.drafters.block.config import DSPARK, HEAD_TYPES
from specdec.drafters.block.drafter import BlockDrafter
from specdec.drafters.block.heads import markov_step
from specdec.drafters.block.scheduler import PrefixScheduler
from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample

__all__ = ["DSparkDrafter"]


class DSparkDrafter(BlockDrafter):
    """DSpark (``Qwen3DSparkModel``, DeepSpec): backbone + sequential head + confidence head.

    Greedy takes ``argmax(U_k + b_k)`` left to right (``b_k`` from the ``vanilla`` / ``gated`` / ``rnn``
    head, see the module docstring); at ``temperature > 0`` each token is drawn from the request's law
    (temperature / top-k / top-p) of those logits, which is returned as ``draft_probs``.
    ``last_confidence [k]`` holds the confidence of each drafted position (calibrated when
    ``confidence_temperatures`` is set; with a ``scheduler``, of every position before its cut),
    ``last_confidence_logits [k]`` the raw head output.

    On the static path (:meth:`enable_static_cache`, :meth:`enable_cuda_graphs`) the fixed-shape body
    also computes the base logits of every row, the greedy walk over all ``B`` rows and its confidences
    (:meth:`_graph_head`), so a greedy chain round is a replay plus a slice: a ``k``-token round takes
    the first ``k`` picks, which are the ``k``-token walk's. Sampled and tree rounds run the head
    eagerly on the body's base logits.

    Args:
        model, target: as for :class:`~specdec.drafters.DFlashDrafter`.
        tree_budget: propose a best-first tree (path-dependent: the bias of each child depends on its
            parent's token, and for the RNN head on the whole path) of at most
            ``min(tree_budget, max_tokens)`` nodes.
        scheduler: a :class:`PrefixScheduler`; the chain is cut to the length it admits (batch 1). Refused
            with ``tree_budget``.
        confidence_temperatures: ``[max_draft_tokens]`` per-position temperatures of the confidence
            logits (:func:`specdec.drafters.block.calibration.sequential_temperature_scaling`); ``None`` = 1.
            ``from_pretrained`` reads them from ``confidence_calibration.json`` when the folder has one.

    Example:
        >>> from specdec import SamplingConfig
        >>> from specdec.drafters.block import fixture_config, random_block_model
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> drafter = DSparkDrafter(random_block_model(fixture_config("Qwen3DSparkModel", target), target), target)
        >>> out = drafter.propose(torch.tensor([5]), 4, sampling=SamplingConfig(), generator=None)
        >>> out.tokens.shape, drafter.last_confidence.shape      # one confidence per drafted position
        (torch.Size([4]), torch.Size([4]))
    """

    architectures = (DSPARK,)
    first_predicting_row = 0

    def __init__(
        self,
        model,
        target,
        *,
        tree_budget: int | None = None,
        scheduler: PrefixScheduler | None = None,
        confidence_temperatures=None,
    ):
        super().__init__(model, target, tree_budget=tree_budget)
        if scheduler is not None and not isinstance(scheduler, PrefixScheduler):
            raise TypeError(f"scheduler: expected a PrefixScheduler or None, got {type(scheduler).__name__}")
        if scheduler is not None and tree_budget is not None:
            raise ValueError(
                f"scheduler: cuts a chain, and with tree_budget = {tree_budget} the drafter proposes trees; expected one of "
                "scheduler and tree_budget, got both"
            )
        head = getattr(model, "markov_head", None)
        self.head_type = self.cfg.markov_head_type if head is not None else None
        if head is not None and self.head_type not in HEAD_TYPES:
            raise ValueError(f"markov_head_type: expected one of {list(HEAD_TYPES)}, got {self.head_type!r}")
        needs = {"gated": "gate_proj", "rnn": "joint_proj"}.get(self.head_type)
        if needs is not None and not hasattr(head, needs):
            raise ValueError(
                f"model: a {self.head_type!r} head needs markov_head.{needs}; build the model with build_dspark_model"
            )
        self.scheduler = scheduler
        self.confidence_temperatures: torch.Tensor | None = None
        # the static body's copy of the temperatures ([B] on the drafter's device, ones when unset):
        # calibrate() writes it in place, so captured graphs read the current values
        self._graph_temperatures: torch.Tensor | None = None
        self.calibrate(confidence_temperatures)
        self.last_confidence: torch.Tensor | None = None
        self.last_confidence_logits: torch.Tensor | None = None

    @classmethod
    def from_pretrained(
        cls,
        folder,
        target,
        *,
        dtype=None,
        tree_budget=None,
        scheduler: PrefixScheduler | None = None,
        confidence_temperatures=None,
    ):
        """Load a DeepSpec ``Qwen3DSparkModel`` checkpoint folder for ``target`` (whose embedding and lm_head it shares).

        Args:
            folder: holds ``config.json`` and ``model.safetensors``, optionally ``confidence_calibration.json``.
            target: the target the drafter reads hidden states from.
            dtype: of the draft weights; default the target's.
            tree_budget, scheduler: as for the constructor.
            confidence_temperatures: ``[max_draft_tokens]``; ``None`` reads the folder's calibration (if any).

        Example:
            >>> import tempfile
            >>> from specdec.drafters import save_fixture
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     drafter = DSparkDrafter.from_pretrained(save_fixture(tmp, "Qwen3DSparkModel", target), target)
            >>> drafter.head_type, drafter.max_draft_tokens
            ('vanilla', 7)
        """
        if confidence_temperatures is None:
            confidence_temperatures = load_calibration(folder)
        return cls(
            load_dspark_model(folder, target, dtype=dtype),
            target,
            tree_budget=tree_budget,
            scheduler=scheduler,
            confidence_temperatures=confidence_temperatures,
        )

    def calibrate(self, temperatures) -> None:
        """Set (or with ``None`` clear) the per-position temperatures of the confidence logits.

        Args:
            temperatures: ``[max_draft_tokens]`` finite values > 0; position ``k`` reports
                ``sigmoid(logit_k / temperatures[k])``.
        """
        if temperatures is None:
            self.confidence_temperatures = None
        else:
            t = torch.as_tensor(temperatures, dtype=torch.float32).detach().flatten().cpu()
            if t.numel() != self.max_draft_tokens or not bool(torch.isfinite(t).all()) or not bool((t > 0).all()):
                raise ValueError(
                    f"confidence_temperatures: expected {self.max_draft_tokens} finite values > 0 (one per draft position), "
                    f"got {t.tolist()}"
                )
            self.confidence_temperatures = t
        self._sync_graph_temperatures()

    def _sync_graph_temperatures(self) -> None:
        if self._graph_temperatures is not None:
            # x / 1 == x exactly, so the unset case matches the eager path's undivided logits
            t = self.confidence_temperatures
            self._graph_temperatures.copy_(torch.ones(self.max_draft_tokens) if t is None else t)

    def _enable_static(self, max_context: int, max_new_rows: int | None, *, capture: bool) -> None:
        # Both enable_static_cache and enable_cuda_graphs come through here, before any capture: the
        # static body (and so each CUDA graph) also runs the greedy sequential walk and the confidence
        # head (_graph_head), which divide by these device-side temperatures.
        super()._enable_static(max_context, max_new_rows, capture=capture)
        self._graph_temperatures = torch.ones(self.max_draft_tokens, dtype=torch.float32, device=self.model.fc.weight.device)
        self._sync_graph_temperatures()

    def reset(self) -> None:
        """Start a request: empty the draft cache and reset the :class:`PrefixScheduler`, if any.

        Example:
            >>> from specdec.drafters.block import fixture_config, random_block_model
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> model = random_block_model(fixture_config("Qwen3DSparkModel", target), target)
            >>> drafter = DSparkDrafter(model, target, scheduler=PrefixScheduler([1.0, 0.9]))
            >>> drafter.reset(); drafter.cache.length
            0
        """
        super().reset()
        if self.scheduler is not None:
            self.scheduler.reset()

    def propose(self, context, max_tokens, *, sampling: SamplingConfig, generator, target_hidden=None) -> DraftProposal:
        """:meth:`BlockDrafter.propose <specdec.drafters.block.drafter.BlockDrafter.propose>`; ``last_confidence`` and
        ``last_confidence_logits`` describe this round only (``None`` after a round that drafts nothing)."""
        self.last_confidence = self.last_confidence_logits = None
        return super().propose(context, max_tokens, sampling=sampling, generator=generator, target_hidden=target_hidden)

    def sequential_bias(
        self, prev: torch.Tensor, hidden: torch.Tensor | None = None, state: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(b_k [..., V] float32, state)`` of one position: previous token ``prev``, backbone row ``hidden``."""
        head = self.model.markov_head
        bias, state = markov_step(head, self.head_type, prev, hidden, state)
        return bias.float(), state

    def confidence_logits(self, hidden: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """Raw confidence logits ``[k]`` float32 of rows ``hidden [k, H]`` with previous tokens ``prev [k]``."""
        head = self.model.confidence_head
        feats = hidden
        if self.cfg.confidence_head_with_markov:
            feats = torch.cat([hidden, self.model.markov_head.markov_w1(prev).to(hidden.dtype)], dim=-1)
        return head.proj(feats).float().squeeze(-1)

    def confidence(self, hidden: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """``c_k`` in ``[0, 1]`` for rows ``hidden [k, H]`` (positions ``0 .. k-1``) with previous tokens ``prev [k]``."""
        if getattr(self.model, "confidence_head", None) is None:
            self.last_confidence_logits = None
            return torch.ones(hidden.shape[0], device=hidden.device)
        logits = self.confidence_logits(hidden, prev)
        self.last_confidence_logits = logits
        if self.confidence_temperatures is not None:
            logits = logits / self.confidence_temperatures[: logits.shape[0]].to(logits.device)
        return torch.sigmoid(logits)

    def _head_temperatures(self, device) -> torch.Tensor:
        """``[B]`` temperatures of the per-round head on the device: made at the first round (or by the static
        path), kept in step with :meth:`calibrate`."""
        if self._graph_temperatures is None:
            self._graph_temperatures = torch.ones(self.max_draft_tokens, dtype=torch.float32, device=device)
            self._sync_graph_temperatures()
        return self._graph_temperatures

    def batched(self, *, slots: int, layout: str = "packed", max_context: int | None = None):
        """:meth:`BlockDrafter.batched <specdec.drafters.block.BlockDrafter.batched>`; refused with a
        ``PrefixScheduler``, which decides for one request (an engine's ``verify_budget`` allocates across them)."""
        if self.scheduler is not None:
            raise ValueError(
                "scheduler: a PrefixScheduler cuts one request's chain (batch 1); the batched form drafts for many "
                "(use Engine(..., verify_budget=...) to allocate across requests), got a PrefixScheduler; build the "
                "DSparkDrafter with scheduler=None"
            )
        return super().batched(slots=slots, layout=layout, max_context=max_context)

    def _greedy_walk(self, base: torch.Tensor, hidden: torch.Tensor, anchor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy left-to-right drafting over every row: ``base [B, V]`` float32 logits, ``hidden [B, H]``,
        ``anchor`` 0-d int64 -> ``(tokens [B], previous tokens [B])``, on the device with no host sync.

        Row ``t`` takes ``argmax(U_t + b_t)`` with ``b_t`` from the token it picked at row ``t - 1`` (the
        anchor at row 0), the RNN state carried along. The step-by-step ops are those of the eager walk
        in :meth:`_draft`, so its first ``k`` picks are the ``k``-token eager walk's, bit for bit.
        """
        if self.head_type is None:
            tokens = base.argmax(-1)  # [B]
            return tokens, torch.cat([anchor.reshape(1), tokens[:-1]])
        prev, state = anchor, None
        tokens, prevs = [], []
        for t in range(base.shape[0]):
            bias, state = self.sequential_bias(prev, hidden[t], state)
            prevs.append(prev)
            prev = (base[t] + bias).argmax(-1)  # 0-d, stays on the device
            tokens.append(prev)
        return torch.stack(tokens), torch.stack(prevs)

    def _graph_head(self, hidden, anchor):
        """The base logits of every row, the greedy walk and its confidences, inside the static body."""
        base = self.model.logits(hidden, self.lm_head)  # [B, V]
        tokens, prevs = self._greedy_walk(base, hidden, anchor.reshape(()))  # [B], [B]
        out = {"logits": base, "greedy": tokens}
        if getattr(self.model, "confidence_head", None) is not None:
            logits = self.confidence_logits(hidden, prevs)  # [B]
            out["confidence_logits"] = logits
            out["confidence"] = torch.sigmoid(logits / self._head_temperatures(logits.device))
        return out

    def _draft(self, context, hidden, k, sampling, generator, *, max_nodes: int) -> DraftProposal:
        out = self._graph_out
        if out is not None and sampling.greedy and self.tree_budget is None:
            # static path: the walk and its confidences ran inside the body; a k-token round is its prefix
            drafted = out["greedy"][:k].clone()
            if "confidence" in out:
                self.last_confidence_logits = out["confidence_logits"][:k].clone()
                conf = out["confidence"][:k].clone()
            else:
                self.last_confidence_logits = None
                conf = torch.ones(k, device=hidden.device)
            self.last_confidence = conf
            if self.scheduler is not None:
                drafted = drafted[: int(self.scheduler.schedule(conf[None])[0])]
            return DraftProposal(tokens=drafted)
        # sampled and tree drafting stay eager; on the static path the base logits come from the body
        base = self.model.logits(hidden, self.lm_head) if out is None else out["logits"][:k]  # [k, V]
        has_head = self.head_type is not None
        if self.tree_budget is not None:
            anchor = int(context[-1])
            temperature = 1.0 if sampling.greedy else sampling.temperature
            # (anchor, x_1, .., x_t) -> (bias of position t, state after it): siblings share their prefix
            memo: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor | None]] = {}

            def bias_after(prevs: tuple[int, ...]):
                if prevs not in memo:
                    state = None if len(prevs) == 1 else bias_after(prevs[:-1])[1]
                    t = len(prevs) - 1
                    memo[prevs] = self.sequential_bias(torch.tensor(prevs[-1], device=base.device), hidden[t], state)
                return memo[prevs]

            def child_logprobs(path: torch.Tensor) -> torch.Tensor:
                t = path.numel()
                step = base[t]
                if has_head:
                    step = step + bias_after((anchor, *path.tolist()))[0]
                return torch.log_softmax(step / temperature, dim=-1).cpu()

            return self._tree_from(child_logprobs, k, min(self.tree_budget, max_nodes), context.device)
        prev, state = context[-1], None
        tokens, prevs, laws = [], [], []
        for t in range(k):
            step = base[t]  # [V]
            if has_head:
                bias, state = self.sequential_bias(prev, hidden[t], state)
                step = step + bias
            prevs.append(prev)
            if sampling.greedy:
                prev = step.argmax(-1)
            else:
                law = logits_to_probs(step, sampling)
                prev = sample(law, generator)
                laws.append(law)
            tokens.append(prev)
        drafted = torch.stack(tokens)
        conf = self.confidence(hidden, torch.stack(prevs))
        self.last_confidence = conf
        draft_probs = torch.stack(laws) if laws else None
        if self.scheduler is not None:
            # the admission of position j reads c_1..c_j only (the early-stop rule), never x_j
            keep = int(self.scheduler.schedule(conf[None])[0])
            drafted = drafted[:keep]
            draft_probs = None if draft_probs is None else draft_probs[:keep]
        return DraftProposal(tokens=drafted, draft_probs=draft_probs)
