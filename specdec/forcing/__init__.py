"""Token forcing: check a candidate system's outputs token by token against the stock target.

Free-running outputs cannot be compared for equality once rounding differs (bf16 verify passes run
other GEMM and attention shapes than plain decoding, and one flipped near-tie makes the rest of the
sequence diverge). Token forcing compares each emitted token with what the stock target would have
emitted *given the same prefix*, so every position is judged on its own and a flip does not cascade.

For each candidate output ``y`` of prompt ``x`` the stock target runs ``x + y`` teacher-forced (in
chunks that reuse the KV cache), and at each generated position ``t``:

* ``mismatch_t = emitted token y_t is not a stock argmax`` (ties with the top logit are not mismatches),
* ``margin_t = max(logits_t) - logits_t[y_t]`` (``>= 0``; ``0`` on matches).

The same path run on the stock system's own outputs (the *null*) measures what rounding alone
produces. The rule:

* rate test, per stratum (all tokens, each position bucket, each prompt set): fail when the lower
  Wilson 95% bound of the candidate's mismatch rate exceeds the upper bound of the null's;
* large-margin test: fail on any candidate mismatch whose margin exceeds ``tau``, calibrated from the
  null (``max(tau_floor, tau_scale * largest null mismatch margin)``): rounding flips near-ties only.

A planted ``+2`` logit bias on every 7th vocabulary id flips the argmax wherever a biased id lies
within 2 logits of the top, so it shows both as a rate jump in its position bucket and as
large-margin events.

Modules: :mod:`~specdec.forcing.statistics` (Wilson bounds, the rate rule, the threshold ``tau``,
power), :mod:`~specdec.forcing.runner` (teacher forcing through the stock system, the null run),
:mod:`~specdec.forcing.report` (events, strata, the report and its renderings),
:mod:`~specdec.forcing.checker` (:class:`TokenForcingChecker`).
"""

from specdec.forcing.checker import TokenForcingChecker
from specdec.forcing.report import ForcingReport, MarginEvent, Stratum
from specdec.forcing.runner import ForcedPositions, NullCalibration, teacher_force
from specdec.forcing.statistics import (
    Z95,
    large_margin_threshold,
    rate_rule_fails,
    simulate_power,
    tokens_needed,
    wilson_interval,
)

__all__ = [
    "ForcedPositions",
    "ForcingReport",
    "MarginEvent",
    "NullCalibration",
    "Stratum",
    "TokenForcingChecker",
    "Z95",
    "large_margin_threshold",
    "rate_rule_fails",
    "simulate_power",
    "teacher_force",
    "tokens_needed",
    "wilson_interval",
]
