import os

# Triton reads this when kernels are decorated, so it must be set before any specdec kernel import.
os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Derandomised: CI explores the same examples on every run, so a pass is reproducible.
settings.register_profile(
    "specdec",
    derandomize=True,
    deadline=None,
    max_examples=20,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("SPECDEC_HYPOTHESIS_PROFILE", "specdec"))
# Test models are tiny: one thread avoids OpenMP start-up and spin costs that dominate small ops.
torch.set_num_threads(1)
